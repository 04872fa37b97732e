package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replica"
)

// Snapshot catch-up (issue 14). A peer whose cursor is below this region's
// truncation point (it was away longer than the retention horizon, or came
// back from an old backup) cannot be served from the log: the Source's Read
// or CellChanges fails with pipeline.ErrTruncated. The Sender never skips
// ahead: it marks the peer Behind and its driver (the Shipper's loop, the
// simulation) runs Sender.Snapshot, which pushes a consistent snapshot of
// this region's state (edges, idempotency records, erasure marks, own cells)
// in chunks through SnapshotFunc, then the snapshot's mark, which raises the
// peer's cursor; shipping resumes from the log there. The receiver
// (Server.Snapshot) validates every chunk as strictly as a push (each edge
// and erasure mark as the replicated event it is applied as; records' ids;
// cells only of the sender's own region) and applies it through the Sink's
// SnapshotSink methods, which use the same apply rules as the log.
//
// A snapshot interrupted anywhere (a failed push, a restart of either side)
// leaves the receiver's cursor where it was; the next attempt starts over.
// Chunks already applied are harmless to apply again.

// ErrPeerBehind marks a Sender whose peer's cursor is below the source's
// truncation point: it needs a snapshot.
var ErrPeerBehind = errors.New("replication: peer is behind the retention horizon (its cursor is below the log's truncation point): catching up from a snapshot")

// ErrPeerAhead marks a peer that has applied more of this region's log than
// the log holds: this region's data folder lost its tail (restored from an
// older backup, or rebuilt by --bootstrap-from-peers). New events would reuse
// positions the peer has passed and be skipped there, so the Sender ships
// nothing to it and says so, instead of losing them silently.
var ErrPeerAhead = errors.New("replication: the peer has applied this region's log past its head (this region's data was restored or rebuilt); shipping stops instead of reusing positions the peer has passed")

func peerAhead(p int, cursor, head uint64) error {
	return fmt.Errorf("%w: partition %d: peer cursor %d, head %d", ErrPeerAhead, p, cursor, head)
}

// ErrRebuildWanted is the receiver's answer to a push while it rebuilds from
// the pushing region (its data folder was lost; --bootstrap-from-peers): the
// sender sends a rebuild snapshot instead (Sender.RebuildWanted).
var ErrRebuildWanted = errors.New("replication: the receiver rebuilds from this region and wants a rebuild snapshot")

// rebuildWantedMsg marks the status that carries ErrRebuildWanted.
const rebuildWantedMsg = "likes: rebuild snapshot wanted"

// IsRebuildWanted reports whether a push failed because the peer wants a
// rebuild snapshot.
func IsRebuildWanted(err error) bool {
	if errors.Is(err, ErrRebuildWanted) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), rebuildWantedMsg)
}

// checkRebuild refuses a push from a region this receiver rebuilds from.
func (s *Server) checkRebuild(ctx context.Context, from string) error {
	rs, ok := s.cfg.Sink.(replica.RebuildSink)
	if !ok {
		return nil
	}
	want, err := rs.WantsRebuild(ctx, from)
	if err != nil {
		return sinkError(ctx, "rebuild state", err)
	}
	if want {
		return status.Errorf(codes.FailedPrecondition, "%s: region %q lost its data and rebuilds from %q", rebuildWantedMsg, s.cfg.Region, from)
	}
	return nil
}

// RebuildWanted marks the peer (named peer) as wanting a rebuild snapshot:
// the next Snapshot is one (replica.RebuildSource).
func (s *Sender) RebuildWanted(peer string) {
	s.behind, s.rebuildFor = true, peer
}

// SnapshotBatch is one snapshot push: a chunk, or (Done set) the mark that
// ends the snapshot.
type SnapshotBatch struct {
	From       string
	Partitions int
	Chunk      replica.SnapshotChunk
	Done       *replica.SnapshotMark
}

// SnapshotFunc pushes one snapshot batch and returns the peer's cursor.
type SnapshotFunc func(ctx context.Context, b SnapshotBatch) (Cursor, error)

// SnapshotTransport is a Transport that carries snapshots (GRPCTransport).
type SnapshotTransport interface {
	Snapshot(ctx context.Context, peer Peer, b SnapshotBatch) (Cursor, error)
}

// SnapshotResult is what one snapshot catch-up did.
type SnapshotResult struct {
	Chunks, Entries int
	Mark            replica.SnapshotMark
}

// Behind reports whether the peer needs a snapshot (the last read of the
// source failed with pipeline.ErrTruncated).
func (s *Sender) Behind() bool { return s.behind }

// readErr classifies a failed read of the source: a truncated log marks the
// peer Behind.
func (s *Sender) readErr(err error) error {
	if errors.Is(err, pipeline.ErrTruncated) {
		s.behind = true
		return fmt.Errorf("%w: %w", ErrPeerBehind, err)
	}
	return err
}

// Snapshot catches the peer up from a snapshot of src (see above): chunks of
// at most the current cell limit, then the mark; the peer's answer to the mark
// is adopted as its cursor. A failure of the local source is a *localError.
func (s *Sender) Snapshot(ctx context.Context, src Source, push SnapshotFunc) (SnapshotResult, error) {
	var res SnapshotResult
	ss, ok := src.(replica.SnapshotSource)
	if !ok {
		return res, &localError{errors.New("replication: the source cannot take snapshots; the peer cannot catch up")}
	}
	parts := src.Partitions()
	var rd replica.SnapshotReader
	var err error
	if s.rebuildFor != "" {
		rs, ok := src.(replica.RebuildSource)
		if !ok {
			return res, &localError{errors.New("replication: the source cannot take rebuild snapshots; the peer cannot rebuild")}
		}
		rd, err = rs.OpenRebuildSnapshot(ctx, s.rebuildFor)
	} else {
		rd, err = ss.OpenSnapshot(ctx)
	}
	if err != nil {
		return res, &localError{fmt.Errorf("open snapshot: %w", err)}
	}
	defer rd.Close()
	res.Mark = rd.Mark()
	for more := true; more; {
		var c replica.SnapshotChunk
		c, more, err = rd.Next(ctx, max(1, s.curCells))
		if err != nil {
			return res, &localError{fmt.Errorf("read snapshot: %w", err)}
		}
		if c.Len() == 0 {
			continue
		}
		if _, err := push(ctx, SnapshotBatch{From: s.region, Partitions: parts, Chunk: c}); err != nil {
			s.Refused(err)
			return res, fmt.Errorf("snapshot push: %w", err)
		}
		res.Chunks++
		res.Entries += c.Len()
	}
	mark := res.Mark
	cur, err := push(ctx, SnapshotBatch{From: s.region, Partitions: parts, Done: &mark})
	if err != nil {
		return res, fmt.Errorf("snapshot mark: %w", err)
	}
	s.behind, s.rebuildFor = false, ""
	s.adopt(cur, parts)
	return res, nil
}

// Snapshot applies one snapshot batch from a peer (see above) and returns
// the peer's cursor. Errors are gRPC statuses.
func (s *Server) Snapshot(ctx context.Context, b SnapshotBatch) (Cursor, error) {
	if err := s.checkPeer(ctx, b.From, b.Partitions); err != nil {
		s.cfg.Logger.Warn("replication: snapshot refused", "from", b.From, "err", err)
		return Cursor{}, err
	}
	if err := validateSnapshot(b, s.cfg.Region); err != nil {
		s.cfg.Logger.Warn("replication: snapshot refused", "from", b.From, "err", err)
		return Cursor{}, err
	}
	sink, ok := s.cfg.Sink.(replica.SnapshotSink)
	if !ok {
		return Cursor{}, status.Error(codes.Unimplemented, "replication: this region's store cannot apply snapshots")
	}
	unlock, err := s.lock(ctx, b.From)
	if err != nil {
		return Cursor{}, err
	}
	defer unlock()
	if b.Done != nil {
		if err := sink.FinishSnapshot(ctx, b.From, *b.Done); err != nil {
			return Cursor{}, sinkError(ctx, "finish snapshot", err)
		}
	} else if err := sink.ApplySnapshot(ctx, b.From, b.Chunk); err != nil {
		return Cursor{}, sinkError(ctx, "apply snapshot", err)
	}
	out, err := s.cfg.Sink.Cursor(ctx, b.From)
	if err != nil {
		return Cursor{}, sinkError(ctx, "cursor", err)
	}
	return normalize(out, s.cfg.Partitions), nil
}

// validateSnapshot checks a snapshot batch as strictly as a push.
func validateSnapshot(b SnapshotBatch, self string) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "replication: invalid snapshot from %q: "+format, append([]any{b.From}, args...)...)
	}
	if b.Done != nil {
		if b.Chunk.Len() > 0 {
			return bad("a mark with a chunk")
		}
		if len(b.Done.Log) != b.Partitions || (b.Done.YourLog != nil && len(b.Done.YourLog) != b.Partitions) {
			return bad("a mark of %d (yours %d) partitions, want %d", len(b.Done.Log), len(b.Done.YourLog), b.Partitions)
		}
		return nil
	}
	for _, c := range b.Chunk.YourCells {
		if c.Key.Region != self {
			return bad("cell %v sent as this region's own", c.Key)
		}
		if err := checkCell(c, b.Partitions); err != nil {
			return bad("%v", err)
		}
	}
	for _, e := range b.Chunk.Edges {
		if err := edge.ValidateEvent(replica.SnapEdgeEvent(e, b.Partitions), b.Partitions); err != nil {
			return bad("edge: %v", err)
		}
	}
	for _, x := range b.Chunk.Erasures {
		if err := edge.ValidateEvent(replica.SnapErasureEvent(x, b.Partitions), b.Partitions); err != nil {
			return bad("erasure mark: %v", err)
		}
	}
	for _, r := range b.Chunk.Records {
		if err := edge.ValidateID("userId", r.User); err != nil {
			return bad("record: %v", err)
		}
		if r.Key == "" || len(r.Key) > 256 || r.Fingerprint == "" || len(r.Fingerprint) > 256 {
			return bad("record of %q: key or fingerprint empty or longer than 256 bytes", r.User)
		}
		for i := 0; i < len(r.Key); i++ {
			if r.Key[i] < 0x20 || r.Key[i] == 0x7f {
				return bad("record of %q: control character in its key", r.User)
			}
		}
	}
	for _, c := range b.Chunk.Cells {
		if c.Key.Region != b.From {
			return bad("cell %v is not the sender's own (each region ships only its own cells)", c.Key)
		}
		if err := checkCell(c, b.Partitions); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// checkCell validates a shipped cell's key and HWM (a snapshot's or a
// push's): a valid item id, a shard among the sender's partitions, an HWM a
// store can order writes by (replica.MaxHWM).
func checkCell(c CellState, partitions int) error {
	if err := edge.ValidateID("itemId", c.Key.Item); err != nil {
		return fmt.Errorf("cell: %w", err)
	}
	if int(c.Key.Shard) >= partitions {
		return fmt.Errorf("cell %v: shard out of range", c.Key)
	}
	if c.Cell.HWM > replica.MaxHWM {
		return fmt.Errorf("cell %v: hwm %d above %d", c.Key, c.Cell.HWM, replica.MaxHWM)
	}
	return nil
}

// The snapshot RPC of the version-1 service (JSON-coded Go structs, as Push).
const methodSnapshot = "/" + serviceName + "/Snapshot"

type (
	snapshotRequest struct {
		V int
		SnapshotBatch
	}
	snapshotResponse struct {
		V      int
		Cursor Cursor
	}
)

func snapshotHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(snapshotRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if interceptor == nil {
		return s.handleSnapshot(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: methodSnapshot}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.handleSnapshot(ctx, req.(*snapshotRequest))
	})
}

func (s *Server) handleSnapshot(ctx context.Context, in *snapshotRequest) (*snapshotResponse, error) {
	if err := s.checkV1(in.V); err != nil {
		return nil, err
	}
	cur, err := s.Snapshot(ctx, in.SnapshotBatch)
	if err != nil {
		return nil, err
	}
	return &snapshotResponse{V: ProtocolVersion, Cursor: cur}, nil
}

// Snapshot sends one snapshot batch to peer (SnapshotTransport).
func (t *GRPCTransport) Snapshot(ctx context.Context, peer Peer, b SnapshotBatch) (Cursor, error) {
	cc, err := t.conn(peer)
	if err != nil {
		return Cursor{}, err
	}
	v, err := t.version(peer)
	if err != nil {
		return Cursor{}, err
	}
	if v >= 2 {
		if cur, ok, err := t.snapshotV2(ctx, peer, b); ok { // snapshot2.go
			return cur, err
		}
	}
	var out snapshotResponse
	if err := cc.Invoke(ctx, methodSnapshot, &snapshotRequest{V: ProtocolVersion, SnapshotBatch: b}, &out); err != nil {
		return Cursor{}, err
	}
	if err := checkVersion(out.V); err != nil {
		return Cursor{}, err
	}
	return out.Cursor, nil
}

// catchUpSnapshot runs a snapshot catch-up of the loop's peer (the Shipper's
// side of Sender.Snapshot).
func (l *peerLoop) catchUpSnapshot() error {
	st, ok := l.s.cfg.Transport.(SnapshotTransport)
	if !ok {
		return &localError{errors.New("replication: the transport cannot carry snapshots; the peer cannot catch up")}
	}
	l.s.cfg.Logger.Warn("replication: peer is behind the retention horizon; sending a snapshot", "peer", l.peer.Region)
	res, err := l.snd.Snapshot(l.ctx, l.s.cfg.Source, func(ctx context.Context, b SnapshotBatch) (Cursor, error) {
		ctx, cancel := context.WithTimeout(ctx, l.s.cfg.PushTimeout)
		defer cancel()
		return st.Snapshot(ctx, l.peer, b)
	})
	if err != nil {
		return err
	}
	l.note(true, func(st *PeerStats) { st.Snapshots++ })
	l.s.cfg.Logger.Info("replication: peer caught up from a snapshot", "peer", l.peer.Region,
		"chunks", res.Chunks, "entries", res.Entries)
	return nil
}
