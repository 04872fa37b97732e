package replication

import (
	"context"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/replica"
)

// The snapshot over protocol 2: the same batches as version 1's Snapshot
// method, as protobuf (about a third of the JSON's bytes for an edge and its
// record). The receiver validates the decoded batch exactly as a version-1
// one (Server.Snapshot); decoding refuses only what does not fit the types.

const methodSnapshotV2 = "/" + serviceV2 + "/Snapshot"

func handleSnapshotV2(s *Server, ctx context.Context, in *peerpb.SnapshotRequest) (*peerpb.SnapshotResponse, error) {
	if err := s.checkProtocol(in.GetProtocol()); err != nil {
		return nil, err
	}
	b, err := snapshotFromPB(in)
	if err != nil {
		return nil, err
	}
	cur, err := s.Snapshot(ctx, b)
	if err != nil {
		return nil, err
	}
	return &peerpb.SnapshotResponse{Protocol: 2, Cursor: cursorToPB(cur)}, nil
}

// snapshotV2 sends b over protocol 2; ok false: the peer does not serve it
// (Unimplemented: a release from before it), and the caller uses version 1
// for this call only (its pushes stay on protocol 2).
func (t *GRPCTransport) snapshotV2(ctx context.Context, peer Peer, b SnapshotBatch) (cur Cursor, ok bool, err error) {
	cc, err := t.conn(peer)
	if err != nil {
		return Cursor{}, true, err
	}
	var out peerpb.SnapshotResponse
	err = cc.Invoke(ctx, methodSnapshotV2, snapshotToPB(b), &out)
	if status.Code(err) == codes.Unimplemented {
		return Cursor{}, false, nil
	}
	if err != nil {
		return Cursor{}, true, err
	}
	return cursorFromPB(out.GetCursor()), true, nil
}

func snapshotToPB(b SnapshotBatch) *peerpb.SnapshotRequest {
	out := &peerpb.SnapshotRequest{Protocol: 2, From: b.From, Partitions: uint32(b.Partitions)}
	if d := b.Done; d != nil {
		out.Done = &peerpb.SnapshotMark{Log: d.Log, Cells: d.Cells, YourLog: d.YourLog, YourCells: d.YourCells}
		return out
	}
	c := &peerpb.SnapshotChunk{Cells: cellsToPB(b.Chunk.Cells, b.From), YourCells: cellsToPB(b.Chunk.YourCells, b.From)}
	for _, e := range b.Chunk.Edges {
		c.Edges = append(c.Edges, &peerpb.SnapEdge{Item: e.Item, User: e.User, State: uint32(e.State),
			Epoch: e.Version.Epoch, Op: e.Version.Op, UpdatedAt: e.UpdatedAt})
	}
	for _, r := range b.Chunk.Records {
		fp, raw := peerpb.EncodeFingerprint(r.Fingerprint)
		c.Records = append(c.Records, &peerpb.SnapRecord{User: r.User, Key: r.Key, Fingerprint: fp, FingerprintRaw: raw,
			ExpiresAt: r.ExpiresAt, Liked: r.Liked, Changed: r.Changed})
	}
	for _, e := range b.Chunk.Erasures {
		c.Erasures = append(c.Erasures, &peerpb.SnapErasure{User: e.User, Done: e.Done, At: e.At})
	}
	out.Chunk = c
	return out
}

func snapshotFromPB(in *peerpb.SnapshotRequest) (SnapshotBatch, error) {
	b := SnapshotBatch{From: in.GetFrom(), Partitions: int(in.GetPartitions())}
	if d := in.GetDone(); d != nil {
		if in.GetChunk() != nil {
			return b, errBadV2("a snapshot message with both a chunk and the mark")
		}
		b.Done = &replica.SnapshotMark{Log: d.GetLog(), Cells: d.GetCells(), YourLog: d.GetYourLog(), YourCells: d.GetYourCells()}
		return b, nil
	}
	c := in.GetChunk()
	if c == nil {
		return b, errBadV2("a snapshot message with neither a chunk nor the mark")
	}
	for _, e := range c.GetEdges() {
		if e.GetState() > math.MaxUint8 {
			return b, errBadV2("edge state %d out of range", e.GetState())
		}
		b.Chunk.Edges = append(b.Chunk.Edges, edge.Edge{Item: e.GetItem(), User: e.GetUser(), State: crdt.State(e.GetState()),
			Version: crdt.Version{Epoch: e.GetEpoch(), Op: e.GetOp()}, UpdatedAt: e.GetUpdatedAt()})
	}
	for _, r := range c.GetRecords() {
		fp, err := peerpb.DecodeFingerprint(r.GetFingerprint(), r.GetFingerprintRaw())
		if err != nil {
			return b, status.Error(codes.InvalidArgument, "replication: "+err.Error())
		}
		b.Chunk.Records = append(b.Chunk.Records, replica.SnapRecord{User: r.GetUser(), Key: r.GetKey(), Fingerprint: fp,
			ExpiresAt: r.GetExpiresAt(), Liked: r.GetLiked(), Changed: r.GetChanged()})
	}
	for _, e := range c.GetErasures() {
		b.Chunk.Erasures = append(b.Chunk.Erasures, replica.SnapErasure{User: e.GetUser(), Done: e.GetDone(), At: e.GetAt()})
	}
	b.Chunk.Cells = cellsFromPB(c.GetCells(), b.From)
	b.Chunk.YourCells = cellsFromPB(c.GetYourCells(), b.From)
	return b, nil
}

// cellsToPB encodes cells; the sender's own region travels as "".
func cellsToPB(cells []CellState, from string) []*peerpb.CellState {
	var out []*peerpb.CellState
	for _, c := range cells {
		region := c.Key.Region
		if region == from {
			region = ""
		}
		out = append(out, &peerpb.CellState{Item: c.Key.Item, Region: region, Shard: c.Key.Shard,
			P: c.Cell.P, N: c.Cell.N, Hwm: c.Cell.HWM, Watermark: c.Cell.Watermark})
	}
	return out
}

func cellsFromPB(cells []*peerpb.CellState, from string) []CellState {
	var out []CellState
	for _, c := range cells {
		region := c.GetRegion()
		if region == "" {
			region = from
		}
		out = append(out, CellState{Key: crdt.CellKey{Item: c.GetItem(), Region: region, Shard: c.GetShard()},
			Cell: crdt.Cell{P: c.GetP(), N: c.GetN(), HWM: c.GetHwm(), Watermark: c.GetWatermark()}})
	}
	return out
}
