package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestSnapshotRoundTrip: a snapshot of one store, read in small chunks and
// applied to another, carries every edge, live record, erasure mark and own
// cell, and raises the receiver's cursor to its mark (never lowers it).
func TestSnapshotRoundTrip(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, 2)
	for i := 0; i < 30; i++ {
		f.write(fmt.Sprintf("i%d", i%3), fmt.Sprintf("u%d", i), crdt.Liked)
	}
	f.write("i0", "u0", crdt.Unliked)
	if err := f.st.PutErasure(ctx, edge.ErasureJob{User: "u7", State: edge.ErasureRunning, StartedAt: 5}); err != nil {
		t.Fatal(err)
	}
	f.aggregate()
	dst, err := pebblestore.Open(pebblestore.Options{Dir: "/db2", FS: vfs.NewMem(), Region: "r2", Partitions: 2, Clock: f.clk, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	rd, err := f.st.OpenSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mark := rd.Mark()
	f.write("i9", "u9", crdt.Liked) // after the snapshot: not in it
	chunks, records := 0, 0
	for more := true; more; {
		c, m, err := rd.Next(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() > 7 {
			t.Fatalf("chunk of %d > 7", c.Len())
		}
		more = m
		chunks++
		records += len(c.Records)
		if err := dst.ApplySnapshot(ctx, "r1", c); err != nil {
			t.Fatal(err)
		}
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dst.FinishSnapshot(ctx, "r1", mark); err != nil {
		t.Fatal(err)
	}
	if chunks < 5 || records != 31 {
		t.Fatalf("%d chunks, %d records", chunks, records)
	}
	for i := 0; i < 30; i++ {
		item, user := fmt.Sprintf("i%d", i%3), fmt.Sprintf("u%d", i)
		a, _, _ := f.st.Edge(ctx, item, user)
		b, _, err := dst.Edge(ctx, item, user)
		if err != nil || a.Register() != b.Register() {
			t.Fatalf("edge %s/%s: %v vs %v (%v)", item, user, a, b, err)
		}
	}
	if _, ok, _ := dst.Edge(ctx, "i9", "u9"); ok {
		t.Fatal("an edge written after the snapshot was in it")
	}
	if j, ok, err := dst.Erasure(ctx, "u7"); err != nil || !ok || !j.Remote || j.State != edge.ErasureRunning {
		t.Fatalf("erasure mark %+v ok=%v err=%v", j, ok, err)
	}
	for i := 0; i < 3; i++ {
		item := fmt.Sprintf("i%d", i)
		a, _ := f.st.Count(ctx, item)
		b, _ := dst.Count(ctx, item)
		if a != b || a == 0 {
			t.Fatalf("count of %s: %d at the source, %d at the receiver", item, a, b)
		}
	}
	cur, err := dst.Cursor(ctx, "r1")
	if err != nil || cur.Log[0] != mark.Log[0] || cur.Log[1] != mark.Log[1] || cur.Cells != mark.Cells {
		t.Fatalf("cursor %+v, mark %+v (%v)", cur, mark, err)
	}
	// A replayed record replays at the receiver too.
	req := edge.Request{Item: "i0", User: "u3", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1,
		IdemKey: "k4", Fingerprint: "f4", Now: f.clk.Now().UnixMilli(), IdemTTLms: (24 * time.Hour).Milliseconds()}
	if d, err := dst.Apply(ctx, req); err != nil || d.Action != edge.ActReplay {
		t.Fatalf("record from the snapshot: %v %v", d.Action, err)
	}
	// An older mark never lowers the cursor.
	if err := dst.FinishSnapshot(ctx, "r1", pebblestoreMark(0, 0)); err != nil {
		t.Fatal(err)
	}
	if again, _ := dst.Cursor(ctx, "r1"); again.Log[0] != cur.Log[0] || again.Cells != cur.Cells {
		t.Fatalf("cursor lowered: %+v", again)
	}
}

func pebblestoreMark(p0, p1 uint64) replica.SnapshotMark {
	return replica.SnapshotMark{Log: []uint64{p0, p1}}
}

// TestRebuildGates: a store rebuilding from peers refuses client writes and
// wants a rebuild from each peer; a peer's copies of this region's cells are
// adopted only during that peer's rebuild; finishing it raises the log past
// the peer's cursor, and writes resume at positions above it.
func TestRebuildGates(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, 2)
	own := replica.CellState{Key: crdt.CellKey{Item: "i1", Region: "r1", Shard: 0}, Cell: crdt.Cell{P: 5, HWM: 40}}
	// Not rebuilding: a peer's copy of an own cell is ignored.
	if err := f.st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{own}}); err != nil {
		t.Fatal(err)
	}
	if n := f.count("i1"); n != 0 {
		t.Fatalf("own cell adopted outside a rebuild: count %d", n)
	}
	if err := f.st.MarkRebuild([]string{"r2", "r3"}); err != nil {
		t.Fatal(err)
	}
	req := edge.Request{Item: "i1", User: "u1", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1, Now: f.clk.Now().UnixMilli()}
	if _, err := f.st.Apply(ctx, req); !errors.Is(err, pebblestore.ErrRebuilding) || !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("write while rebuilding: %v", err)
	}
	if ok, _ := f.st.WantsRebuild(ctx, "r2"); !ok {
		t.Fatal("does not want r2's rebuild")
	}
	if err := f.st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{own}}); err != nil {
		t.Fatal(err)
	}
	mark := replica.SnapshotMark{Log: []uint64{0, 0}, YourLog: []uint64{30, 70}, YourCells: 12}
	if err := f.st.FinishSnapshot(ctx, "r2", mark); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.st.WantsRebuild(ctx, "r2"); ok {
		t.Fatal("still wants r2's rebuild")
	}
	if _, err := f.st.Apply(ctx, req); !errors.Is(err, pebblestore.ErrRebuilding) {
		t.Fatalf("write while r3's rebuild is pending: %v", err)
	}
	if err := f.st.FinishSnapshot(ctx, "r3", replica.SnapshotMark{Log: []uint64{0, 0}, YourLog: []uint64{0, 0}}); err != nil {
		t.Fatal(err)
	}
	// Partition 0 rises past the adopted cell's HWM (40), partition 1 past the cursor (70).
	fl0, _ := f.st.LogFloor(context.Background(), 0)
	fl1, _ := f.st.LogFloor(context.Background(), 1)
	if fl0 != 40 || fl1 != 70 {
		t.Fatalf("floors %d %d, want 40 70", fl0, fl1)
	}
	d, err := f.st.Apply(ctx, req)
	if err != nil || d.Event == nil || d.Event.Pos <= 40 {
		t.Fatalf("write after the rebuild: %+v %v", d.Event, err)
	}
	f.aggregate()
	if n := f.count("i1"); n != 6 {
		t.Fatalf("count %d, want the adopted 5 + 1", n)
	}
}
