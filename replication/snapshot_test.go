package replication

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replica"
)

// TestSnapshotRefusesHostileBatches: a snapshot batch is validated as
// strictly as a push: another region's cells, a bad edge, a bad record or a
// mark of the wrong shape store nothing and are refused InvalidArgument.
func TestSnapshotRefusesHostileBatches(t *testing.T) {
	srv := newServer(t, "eu", 2, newFakeSink(2))
	ok := edge.Edge{Item: "i1", User: "u1", State: crdt.Liked, Version: crdt.Version{Epoch: 1, Op: 1}}
	for name, b := range map[string]SnapshotBatch{
		"another region's cell": {Chunk: replica.SnapshotChunk{Cells: []CellState{{Key: crdt.CellKey{Item: "i1", Region: "ap", Shard: 0}}}}},
		"a shard out of range":  {Chunk: replica.SnapshotChunk{Cells: []CellState{{Key: crdt.CellKey{Item: "i1", Region: "us", Shard: 9}}}}},
		"an hwm past MaxHWM":    {Chunk: replica.SnapshotChunk{Cells: []CellState{{Key: crdt.CellKey{Item: "i1", Region: "us"}, Cell: crdt.Cell{HWM: replica.MaxHWM + 1}}}}},
		"own cell past MaxHWM":  {Chunk: replica.SnapshotChunk{YourCells: []CellState{{Key: crdt.CellKey{Item: "i1", Region: "eu"}, Cell: crdt.Cell{HWM: 1 << 63}}}}},
		"a bad item":            {Chunk: replica.SnapshotChunk{Edges: []edge.Edge{{Item: "bad\x00", User: "u1", State: crdt.Liked}}}},
		"an unknown state":      {Chunk: replica.SnapshotChunk{Edges: []edge.Edge{{Item: "i1", User: "u1", State: 9}}}},
		"a bad erasure user":    {Chunk: replica.SnapshotChunk{Erasures: []replica.SnapErasure{{User: ""}}}},
		"a record without key":  {Chunk: replica.SnapshotChunk{Records: []replica.SnapRecord{{User: "u1", Fingerprint: "f"}}}},
		"a control character":   {Chunk: replica.SnapshotChunk{Records: []replica.SnapRecord{{User: "u1", Key: "k\n", Fingerprint: "f"}}}},
		"a short mark":          {Done: &replica.SnapshotMark{Log: []uint64{1}}},
		"a mark with a chunk":   {Done: &replica.SnapshotMark{Log: []uint64{1, 1}}, Chunk: replica.SnapshotChunk{Edges: []edge.Edge{ok}}},
	} {
		b.From, b.Partitions = "us", 2
		if _, err := srv.Snapshot(context.Background(), b); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	// A valid batch to a sink that cannot apply snapshots: Unimplemented.
	_, err := srv.Snapshot(context.Background(), SnapshotBatch{From: "us", Partitions: 2, Chunk: replica.SnapshotChunk{Edges: []edge.Edge{ok}}})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("valid batch, sink without snapshots: %v", err)
	}
	if _, err := srv.Snapshot(context.Background(), SnapshotBatch{From: "eu", Partitions: 2}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a snapshot from itself: %v", err)
	}
}

// truncatedSource is a Source whose log is truncated below everything.
type truncatedSource struct{ *fakeSource }

func (s truncatedSource) Read(context.Context, uint32, uint64, int) ([]edge.Event, pipeline.Head, error) {
	return nil, pipeline.Head{}, pipeline.ErrTruncated
}

// TestSenderMarksPeerBehind: a truncated read marks the peer Behind with
// ErrPeerBehind; a source without snapshots is a local error, never a skip.
func TestSenderMarksPeerBehind(t *testing.T) {
	src := truncatedSource{newFakeSource("us", 2)}
	snd := NewSender("us", 16, 16)
	snd.Acked(Batch{From: "us", Partitions: 2}, Cursor{Log: []uint64{0, 0}}) // handshake
	_, _, _, err := snd.Next(context.Background(), src)
	if !errors.Is(err, ErrPeerBehind) || !snd.Behind() {
		t.Fatalf("Next on a truncated log: %v, behind=%v", err, snd.Behind())
	}
	_, err = snd.Snapshot(context.Background(), src, func(context.Context, SnapshotBatch) (Cursor, error) {
		t.Fatal("pushed a snapshot of a source that cannot take one")
		return Cursor{}, nil
	})
	var local *localError
	if !errors.As(err, &local) || !snd.Behind() {
		t.Fatalf("snapshot of a source without snapshots: %v", err)
	}
}
