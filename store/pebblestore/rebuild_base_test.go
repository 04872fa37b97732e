package pebblestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestRebuildBaseWithForeignPositions: with the aggregators on another log
// (Kafka), a rebuild raises the empty log to the data set's position base and
// the aggregators' positions to the topic's end, both before anything
// serves; a peer's finish then raises nothing in those positions (neither to
// its cursor nor to an adopted cell's HWM, which are of another space), and
// writes resume above the base. The raise is refused on a log that holds
// events, and is a no-op outside a rebuild.
func TestRebuildBaseWithForeignPositions(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	open := func(fs vfs.FS) *pebblestore.Store {
		st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: fs, Region: "r1", Partitions: 2, Clock: clk, CacheBytes: 1 << 20, ForeignPositions: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	st := open(vfs.NewMem())
	const base = 1 << 40
	if err := st.RaiseRebuildBase(ctx, base, []uint64{base, base}); err != nil {
		t.Fatalf("outside a rebuild: %v", err)
	}
	if fl, _ := st.LogFloor(ctx, 0); fl != 0 {
		t.Fatalf("raised outside a rebuild: floor %d", fl)
	}
	if err := st.MarkRebuild([]string{"r2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.RaiseRebuildBase(ctx, base, []uint64{base - 1, base}); err == nil {
		t.Fatal("a position below the base accepted")
	}
	if err := st.RaiseRebuildBase(ctx, base, []uint64{base}); err == nil {
		t.Fatal("one position for two partitions accepted")
	}
	if err := st.RaiseRebuildBase(ctx, base, []uint64{base + 7, base}); err != nil {
		t.Fatal(err)
	}
	// Again (another start of the region): the positions stay where they are.
	if err := st.RaiseRebuildBase(ctx, base, []uint64{base + 9, base + 9}); err != nil {
		t.Fatal(err)
	}
	for p, want := range []uint64{base + 7, base} {
		if pos, _, _ := st.Position(ctx, uint32(p)); pos != want {
			t.Fatalf("partition %d position %d, want %d", p, pos, want)
		}
		if fl, _ := st.LogFloor(ctx, uint32(p)); fl != base {
			t.Fatalf("partition %d floor %d, want the base", p, fl)
		}
	}
	own := replica.CellState{Key: crdt.CellKey{Item: "i1", Region: "r1", Shard: 0}, Cell: crdt.Cell{P: 5, HWM: 1 << 45}}
	if err := st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{own}}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishSnapshot(ctx, "r2", replica.SnapshotMark{Log: []uint64{0, 0}, YourLog: []uint64{30, 70}, YourCells: 12}); err != nil {
		t.Fatal(err)
	}
	if len(st.Rebuilding()) != 0 {
		t.Fatalf("still rebuilding from %v", st.Rebuilding())
	}
	for p, want := range []uint64{base + 7, base} {
		if pos, _, _ := st.Position(ctx, uint32(p)); pos != want {
			t.Fatalf("after the finish partition %d position %d, want %d (not raised to a cursor or HWM)", p, pos, want)
		}
		if fl, _ := st.LogFloor(ctx, uint32(p)); fl != base {
			t.Fatalf("after the finish partition %d floor %d, want the base", p, fl)
		}
	}
	req := edge.Request{Item: "i1", User: "u1", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1, Now: clk.Now().UnixMilli()}
	d, err := st.Apply(ctx, req)
	if err != nil || d.Event == nil || d.Event.Pos != base+1 {
		t.Fatalf("write after the rebuild: %+v %v, want position base+1", d.Event, err)
	}

	// A log that holds events is not raised: whether they were counted is
	// the other log's business.
	st2 := open(vfs.NewMem())
	if _, err := st2.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := st2.MarkRebuild([]string{"r2"}); err != nil {
		t.Fatal(err)
	}
	err = st2.RaiseRebuildBase(ctx, base, []uint64{base, base})
	if err == nil || !strings.Contains(err.Error(), "holds events") || errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("raise of a log holding events: %v", err)
	}
}
