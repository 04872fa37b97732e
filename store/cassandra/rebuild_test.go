package cassandra_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/cassandra"
)

// TestRebuildGates (pebblestore's, on Cassandra): a store rebuilding from
// peers refuses client writes and wants a rebuild from each peer (the
// replication server then refuses its pushes); a peer's copies of this
// region's cells are adopted only during that peer's rebuild; finishing it
// raises every log partition's head, truncation point and aggregator
// position past the peer's cursor and the adopted cells' HWMs, and the
// cell-change feed past the peer's cell cursor; finishing again changes
// nothing; writes resume at positions above the raise and count once.
func TestRebuildGates(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, "r1", 2)
	own := replica.CellState{Key: crdt.CellKey{Item: "i1", Region: "r1", Shard: 0}, Cell: crdt.Cell{P: 5, HWM: 40, Watermark: 9}}
	// Not rebuilding: a peer's copy of an own cell is ignored, and so is a
	// rebuild mark (a finished rebuild's mark sent again).
	if err := f.st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{own}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.st.Count(ctx, "i1"); n != 0 {
		t.Fatalf("own cell adopted outside a rebuild: count %d", n)
	}
	if ok, err := f.st.WantsRebuild(ctx, "r2"); ok || err != nil {
		t.Fatalf("wants a rebuild before any was marked: %v %v", ok, err)
	}
	if err := f.st.MarkRebuild(ctx, []string{"r2", "r3", "r1", ""}); err != nil {
		t.Fatal(err)
	}
	if got := f.st.Rebuilding(); !reflect.DeepEqual(got, []string{"r2", "r3"}) {
		t.Fatalf("rebuilding from %v, want [r2 r3]", got)
	}
	req := edge.Request{Item: "i1", User: "u1", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1, Now: f.clk.Now().UnixMilli()}
	if _, err := f.st.Apply(ctx, req); !errors.Is(err, cassandra.ErrRebuilding) || !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("write while rebuilding: %v", err)
	}
	for _, p := range []string{"r2", "r3"} {
		if ok, err := f.st.WantsRebuild(ctx, p); !ok || err != nil {
			t.Fatalf("does not want %s's rebuild: %v", p, err)
		}
	}
	// A peer may send only this region's cells as "yours".
	bad := replica.CellState{Key: crdt.CellKey{Item: "i1", Region: "r2", Shard: 0}, Cell: crdt.Cell{P: 1, HWM: 1}}
	if err := f.st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{bad}}); err == nil {
		t.Fatal("a peer's own cell accepted as this region's")
	}
	if err := f.st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{own}}); err != nil {
		t.Fatal(err)
	}
	mark := replica.SnapshotMark{Log: []uint64{3, 4}, YourLog: []uint64{30, 70}, YourCells: 12}
	if err := f.st.FinishSnapshot(ctx, "r2", mark); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.st.WantsRebuild(ctx, "r2"); ok {
		t.Fatal("still wants r2's rebuild")
	}
	if cur, err := f.st.Cursor(ctx, "r2"); err != nil || !reflect.DeepEqual(cur.Log, []uint64{3, 4}) {
		t.Fatalf("cursor for r2 %+v %v, want the mark's", cur, err)
	}
	if _, err := f.st.Apply(ctx, req); !errors.Is(err, cassandra.ErrRebuilding) {
		t.Fatalf("write while r3's rebuild is pending: %v", err)
	}
	if err := f.st.FinishSnapshot(ctx, "r3", replica.SnapshotMark{Log: []uint64{0, 0}, YourLog: []uint64{0, 0}}); err != nil {
		t.Fatal(err)
	}
	if got := f.st.Rebuilding(); len(got) != 0 {
		t.Fatalf("still rebuilding from %v", got)
	}
	// Partition 0 rises past the adopted cell's HWM (40), partition 1 past
	// the cursor (70), the feed past the cell cursor (12).
	want := []uint64{40, 70}
	check := func(when string) {
		t.Helper()
		for p, w := range want {
			head, _, err := f.st.HeadOf(ctx, uint32(p))
			if err != nil {
				t.Fatal(err)
			}
			fl, err := f.st.LogFloor(ctx, uint32(p))
			if err != nil {
				t.Fatal(err)
			}
			pos, _, err := f.st.Position(ctx, uint32(p))
			if err != nil {
				t.Fatal(err)
			}
			if head < w || fl != w || pos < w {
				t.Fatalf("%s: partition %d: head %d floor %d position %d, want all >= %d (floor == %d)", when, p, head, fl, pos, w, w)
			}
			if _, _, err := f.st.Read(ctx, uint32(p), w-1, 10); !errors.Is(err, cassandra.ErrTruncated) {
				t.Fatalf("%s: read of partition %d below the raise: %v, want ErrTruncated", when, p, err)
			}
		}
		if head, _, err := f.st.HeadOf(ctx, cassandra.FeedPart); err != nil || head < 12 {
			t.Fatalf("%s: feed head %d (%v), want >= 12", when, head, err)
		}
		if fl, err := f.st.FeedFloor(ctx); err != nil || fl != 12 {
			t.Fatalf("%s: feed floor %d (%v), want 12", when, fl, err)
		}
	}
	check("after the rebuild")
	// The same marks again (a peer that did not see the answer) change nothing.
	if err := f.st.FinishSnapshot(ctx, "r2", mark); err != nil {
		t.Fatal(err)
	}
	check("after the marks again")
	d, err := f.st.Apply(ctx, req)
	if err != nil || d.Event == nil {
		t.Fatalf("write after the rebuild: %+v %v", d.Event, err)
	}
	if w := want[d.Event.Partition]; d.Event.Pos <= w {
		t.Fatalf("new event at %d of partition %d, not above the raise %d", d.Event.Pos, d.Event.Partition, w)
	}
	f.aggregate()
	if n, err := f.st.Count(ctx, "i1"); err != nil || n != 6 {
		t.Fatalf("count %d (%v), want the adopted 5 + 1", n, err)
	}
	// A new cell change is announced above the peer's cell cursor.
	changes, through, err := f.st.CellChanges(ctx, 12, 100)
	if err != nil || len(changes) == 0 || through <= 12 {
		t.Fatalf("cell changes after 12: %v through %d (%v)", changes, through, err)
	}
}

// TestRebuildRefusesUnfolded: MarkRebuild refuses a store whose aggregators
// have not folded its log (its positions are about to rise past it).
func TestRebuildRefusesUnfolded(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, "r1", 2)
	f.write("i1", "u1", crdt.Liked)
	if err := f.st.MarkRebuild(ctx, []string{"r2"}); err == nil {
		t.Fatal("marked with an unfolded log")
	}
	f.aggregate()
	if err := f.st.MarkRebuild(ctx, []string{"r2"}); err != nil {
		t.Fatal(err)
	}
}

// TestKeyspaceIdentity: a keyspace's identity is written once per data set
// (a lightweight transaction on the data set read), and HoldsData tells a
// freshly migrated keyspace from one that holds a region's data.
func TestKeyspaceIdentity(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, "r1", 2)
	id, err := f.st.Identity(ctx)
	if err != nil || id.Region != "r1" || id.DataSet != "" || id.Cluster != "" || id.CreatedMs == 0 {
		t.Fatalf("fresh identity %+v %v", id, err)
	}
	if held, err := f.st.HoldsData(ctx); held || err != nil {
		t.Fatalf("fresh keyspace holds data: %v %v", held, err)
	}
	if id.PositionBase != 0 {
		t.Fatalf("fresh identity has position base %d", id.PositionBase)
	}
	if err := f.st.SetIdentity(ctx, "c1", "d1", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.st.SetIdentity(ctx, "c1", "d2", 0, ""); !errors.Is(err, cassandra.ErrIdentityChanged) {
		t.Fatalf("second identity over none: %v", err)
	}
	const base = 1_800_000_000_000 << 20
	if err := f.st.SetIdentity(ctx, "c2", "d1", base, "d1"); err != nil {
		t.Fatal(err)
	}
	if id, err = f.st.Identity(ctx); err != nil || id.Cluster != "c2" || id.DataSet != "d1" || id.PositionBase != base {
		t.Fatalf("identity %+v %v", id, err)
	}
	// A meta row with a negative base (written around this store) is refused.
	bad := "UPDATE " + f.st.Keyspace() + ".meta SET position_base = -5 WHERE name = 'store'"
	if err := cassandra.SharedSession(t).Query(bad).WithContext(ctx).Exec(); err != nil {
		t.Fatal(err)
	}
	if id, err := f.st.Identity(ctx); err == nil {
		t.Fatalf("identity with a negative position base read as %+v", id)
	}
	if err := cassandra.SharedSession(t).Query("UPDATE "+f.st.Keyspace()+".meta SET position_base = ? WHERE name = 'store'", int64(base)).WithContext(ctx).Exec(); err != nil {
		t.Fatal(err)
	}
	f.write("i1", "u1", crdt.Liked)
	if held, err := f.st.HoldsData(ctx); !held || err != nil {
		t.Fatalf("keyspace with a write holds no data: %v %v", held, err)
	}
}

// TestRebuildBaseWithForeignPositions (pebblestore's, on Cassandra): with
// the aggregators on Kafka, a rebuild raises the empty log to the data set's
// position base and the aggregators' positions to the topic's end before
// anything serves (a second process's raise moves nothing); a peer's finish
// raises nothing in those positions (neither to its cursor nor to an adopted
// cell's HWM, which are of another space), and writes resume above the base.
// The raise is refused on a log that holds events, and is a no-op outside a
// rebuild.
func TestRebuildBaseWithForeignPositions(t *testing.T) {
	ctx := context.Background()
	foreign := func(o *cassandra.Options) { o.ForeignPositions = true }
	f := newRetFixtureWith(t, "r1", 2, foreign)
	const base = 1 << 40
	if err := f.st.RaiseRebuildBase(ctx, base, []uint64{base, base}); err != nil {
		t.Fatalf("outside a rebuild: %v", err)
	}
	if h := f.head(0); h != 0 {
		t.Fatalf("raised outside a rebuild: head %d", h)
	}
	if err := f.st.MarkRebuild(ctx, []string{"r2"}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.RaiseRebuildBase(ctx, base, []uint64{base - 1, base}); err == nil {
		t.Fatal("a position below the base accepted")
	}
	if err := f.st.RaiseRebuildBase(ctx, base, []uint64{base + 7, base}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.RaiseRebuildBase(ctx, base, []uint64{base + 9, base + 9}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for p, want := range []uint64{base + 7, base} {
			if pos, _, err := f.st.Position(ctx, uint32(p)); err != nil || pos != want {
				t.Fatalf("%s: partition %d position %d %v, want %d", when, p, pos, err, want)
			}
			if fl, err := f.st.LogFloor(ctx, uint32(p)); err != nil || fl != base {
				t.Fatalf("%s: partition %d floor %d %v, want the base", when, p, fl, err)
			}
			if h := f.head(uint32(p)); h != base {
				t.Fatalf("%s: partition %d head %d, want the base", when, p, h)
			}
		}
	}
	check("raised")
	own := replica.CellState{Key: crdt.CellKey{Item: "i1", Region: "r1", Shard: 0}, Cell: crdt.Cell{P: 5, HWM: 1 << 45, Watermark: 9}}
	if err := f.st.ApplySnapshot(ctx, "r2", replica.SnapshotChunk{YourCells: []replica.CellState{own}}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.FinishSnapshot(ctx, "r2", replica.SnapshotMark{Log: []uint64{0, 0}, YourLog: []uint64{30, 70}, YourCells: 12}); err != nil {
		t.Fatal(err)
	}
	if p := f.st.Rebuilding(); len(p) != 0 {
		t.Fatalf("still rebuilding from %v", p)
	}
	check("finished")
	req := edge.Request{Item: "i1", User: "u1", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1, Now: f.clk.Now().UnixMilli()}
	d, err := f.st.Apply(ctx, req)
	if err != nil || d.Event == nil || d.Event.Pos != base+1 {
		t.Fatalf("write after the rebuild: %+v %v, want position base+1", d.Event, err)
	}

	// A log that holds events is not raised.
	g := newRetFixtureWith(t, "r1", 1, foreign)
	g.write("i1", "u1", crdt.Liked)
	if err := g.st.MarkRebuild(ctx, []string{"r2"}); err != nil {
		t.Fatal(err)
	}
	err = g.st.RaiseRebuildBase(ctx, base, []uint64{base})
	if err == nil || !strings.Contains(err.Error(), "holds events") {
		t.Fatalf("raise of a log holding events: %v", err)
	}
}
