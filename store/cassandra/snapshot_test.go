package cassandra_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/pebblestore"
)

// snapStore is what the snapshot round trips need of either store.
type snapStore interface {
	edge.Store
	edge.JobStore
	pipeline.Log
	pipeline.CellStore
	replica.SnapshotSource
	replica.SnapshotSink
	Cursor(ctx context.Context, from string) (replica.Cursor, error)
	ScanCells(ctx context.Context, region string, fn func(replica.CellState) error) error
	Count(ctx context.Context, item string) (int64, error)
}

func openPebble(t *testing.T, region string, clk clock.Clock) snapStore {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: vfs.NewMem(), Region: region, Partitions: 2, Clock: clk, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// populate writes the same state into src (region r1): 30 likes with
// idempotency keys, an unlike, an erasure mark, the cells folded.
func populate(t *testing.T, ctx context.Context, src snapStore, clk clock.Clock) {
	t.Helper()
	for i := 1; i <= 31; i++ {
		item, user, target := fmt.Sprintf("i%d", i%3), fmt.Sprintf("u%d", i), crdt.Liked
		if i == 31 {
			item, user, target = "i1", "u1", crdt.Unliked
		}
		req := edge.Request{Item: item, User: user, Target: target, Kind: edge.KindFlip, Epoch: 1,
			IdemKey: fmt.Sprintf("k%d", i), Fingerprint: fmt.Sprintf("f%d", i),
			Now: clk.Now().UnixMilli(), IdemTTLms: day.Milliseconds()}
		if _, err := src.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.PutErasure(ctx, edge.ErasureJob{User: "u7", State: edge.ErasureRunning, StartedAt: clk.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	var aggs []*pipeline.Aggregator
	for p := 0; p < 2; p++ {
		a, err := pipeline.NewAggregator(pipeline.Config{Region: "r1", Log: src, Cells: src, Clock: clk}, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		aggs = append(aggs, a)
	}
	pipelinetest.CatchUp(t, aggs)
}

// transfer reads a snapshot of src in chunks of 7 and applies it to dst.
func transfer(t *testing.T, ctx context.Context, src, dst snapStore) replica.SnapshotMark {
	t.Helper()
	rd, err := src.OpenSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	mark := rd.Mark()
	chunks := 0
	for more := true; more; chunks++ {
		var c replica.SnapshotChunk
		c, more, err = rd.Next(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() > 7 {
			t.Fatalf("chunk of %d > 7", c.Len())
		}
		if err := dst.ApplySnapshot(ctx, "r1", c); err != nil {
			t.Fatal(err)
		}
	}
	if chunks < 5 {
		t.Fatalf("%d chunks for %d entries of at most 7", chunks, 31+30+1)
	}
	if err := dst.FinishSnapshot(ctx, "r1", mark); err != nil {
		t.Fatal(err)
	}
	return mark
}

// state is what a store holds of r1's data, in a canonical order: edges,
// records and erasure marks (as its own snapshot reads them) and r1's cells.
type state struct {
	Edges    []edge.Edge
	Records  []replica.SnapRecord
	Erasures []replica.SnapErasure
	Cells    []replica.CellState
}

func dump(t *testing.T, ctx context.Context, s snapStore) state {
	t.Helper()
	rd, err := s.OpenSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var st state
	for more := true; more; {
		var c replica.SnapshotChunk
		if c, more, err = rd.Next(ctx, 100); err != nil {
			t.Fatal(err)
		}
		st.Edges = append(st.Edges, c.Edges...)
		st.Records = append(st.Records, c.Records...)
		st.Erasures = append(st.Erasures, c.Erasures...)
	}
	if err := s.ScanCells(ctx, "r1", func(c replica.CellState) error { st.Cells = append(st.Cells, c); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Slice(st.Edges, func(i, j int) bool {
		return st.Edges[i].Item+"\x00"+st.Edges[i].User < st.Edges[j].Item+"\x00"+st.Edges[j].User
	})
	sort.Slice(st.Records, func(i, j int) bool {
		return st.Records[i].User+"\x00"+st.Records[i].Key < st.Records[j].User+"\x00"+st.Records[j].Key
	})
	sort.Slice(st.Erasures, func(i, j int) bool { return st.Erasures[i].User < st.Erasures[j].User })
	sort.Slice(st.Cells, func(i, j int) bool {
		a, b := st.Cells[i].Key, st.Cells[j].Key
		return a.Item < b.Item || (a.Item == b.Item && a.Shard < b.Shard)
	})
	return st
}

// checkRoundTrip: the receiver holds exactly the sender's edges, records,
// erasure marks and cells, counts agree, its cursor is the mark (never
// lowered by an older one), and a retried request replays there.
func checkRoundTrip(t *testing.T, ctx context.Context, clk clock.Clock, src, dst snapStore, mark replica.SnapshotMark) {
	t.Helper()
	a, b := dump(t, ctx, src), dump(t, ctx, dst)
	if len(a.Edges) != 30 || len(a.Records) != 31 || len(a.Erasures) != 1 || len(a.Cells) == 0 {
		t.Fatalf("source state: %d edges, %d records, %d erasures, %d cells", len(a.Edges), len(a.Records), len(a.Erasures), len(a.Cells))
	}
	for _, what := range []struct {
		name string
		x, y any
	}{{"edges", a.Edges, b.Edges}, {"records", a.Records, b.Records}, {"erasure marks", a.Erasures, b.Erasures}, {"cells", a.Cells, b.Cells}} {
		if !reflect.DeepEqual(what.x, what.y) {
			t.Errorf("%s differ:\n sender   %+v\n receiver %+v", what.name, what.x, what.y)
		}
	}
	for i := 0; i < 3; i++ {
		item := fmt.Sprintf("i%d", i)
		x, err1 := src.Count(ctx, item)
		y, err2 := dst.Count(ctx, item)
		if x != y || x == 0 || err1 != nil || err2 != nil {
			t.Fatalf("count of %s: %d at the sender, %d at the receiver (%v, %v)", item, x, y, err1, err2)
		}
	}
	if j, ok, err := dst.Erasure(ctx, "u7"); err != nil || !ok || !j.Remote || j.State != edge.ErasureRunning {
		t.Fatalf("erasure mark %+v ok=%v err=%v", j, ok, err)
	}
	cur, err := dst.Cursor(ctx, "r1")
	if err != nil || !reflect.DeepEqual(cur.Log, mark.Log) || cur.Cells != mark.Cells {
		t.Fatalf("cursor %+v, mark %+v (%v)", cur, mark, err)
	}
	if err := dst.FinishSnapshot(ctx, "r1", replica.SnapshotMark{Log: []uint64{0, 0}}); err != nil {
		t.Fatal(err)
	}
	if again, _ := dst.Cursor(ctx, "r1"); !reflect.DeepEqual(again.Log, cur.Log) || again.Cells != cur.Cells {
		t.Fatalf("an older mark lowered the cursor: %+v, was %+v", again, cur)
	}
	req := edge.Request{Item: "i1", User: "u4", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1,
		IdemKey: "k4", Fingerprint: "f4", Now: clk.Now().UnixMilli(), IdemTTLms: day.Milliseconds()}
	if d, err := dst.Apply(ctx, req); err != nil || d.Action != edge.ActReplay {
		t.Fatalf("record from the snapshot: %v %v, want a replay", d.Action, err)
	}
}

// TestSnapshotCassandraToPebble: a peer behind the horizon catches up from a
// Cassandra region (OpenSnapshot here, applied by the embedded store).
func TestSnapshotCassandraToPebble(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, "r1", 2)
	populate(t, ctx, f.st, f.clk)
	dst := openPebble(t, "r2", f.clk)
	mark := transfer(t, ctx, f.st, dst)
	checkRoundTrip(t, ctx, f.clk, f.st, dst, mark)
	// Applying the same snapshot again changes nothing.
	transfer(t, ctx, f.st, dst)
	checkRoundTrip(t, ctx, f.clk, f.st, dst, mark)
}

// TestSnapshotPebbleToCassandra: a Cassandra region behind the horizon is
// caught up by a snapshot of an embedded region.
func TestSnapshotPebbleToCassandra(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, "r2", 2)
	src := openPebble(t, "r1", f.clk)
	populate(t, ctx, src, f.clk)
	mark := transfer(t, ctx, src, f.st)
	checkRoundTrip(t, ctx, f.clk, src, f.st, mark)
	transfer(t, ctx, src, f.st)
	checkRoundTrip(t, ctx, f.clk, src, f.st, mark)
}

// TestSnapshotRebuildFromCassandra: a rebuild snapshot from a Cassandra
// region carries the receiver's cells as held there and the cursor of its
// log; a store that rebuilds from no one ignores a rebuild mark (a finished
// rebuild's, sent again), as the embedded store does.
func TestSnapshotRebuildFromCassandra(t *testing.T) {
	ctx := context.Background()
	f := newRetFixture(t, "r1", 2)
	theirs := replica.CellState{Key: crdt.CellKey{Item: "i1", Region: "r2", Shard: 1}, Cell: crdt.Cell{P: 5, HWM: 40, Watermark: 7}}
	if err := f.st.MergeCells(ctx, "r2", []replica.CellState{theirs}, 3, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.st.ApplyRemote(ctx, "r2", 1, nil, 40); err != nil {
		t.Fatal(err)
	}
	rd, err := f.st.OpenRebuildSnapshot(ctx, "r2")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	m := rd.Mark()
	if !reflect.DeepEqual(m.YourLog, []uint64{0, 40}) || m.YourCells != 3 {
		t.Fatalf("rebuild mark %+v", m)
	}
	var yours []replica.CellState
	for more := true; more; {
		var c replica.SnapshotChunk
		if c, more, err = rd.Next(ctx, 3); err != nil {
			t.Fatal(err)
		}
		yours = append(yours, c.YourCells...)
	}
	if !reflect.DeepEqual(yours, []replica.CellState{theirs}) {
		t.Fatalf("your cells %+v", yours)
	}
	if err := f.st.FinishSnapshot(ctx, "r2", m); err != nil {
		t.Fatal(err)
	}
	if head, _, err := f.st.HeadOf(ctx, 1); err != nil || head != 0 {
		t.Fatalf("a store rebuilding from no one raised its head to %d (%v)", head, err)
	}
	if _, err := f.st.OpenRebuildSnapshot(ctx, "r1"); err == nil {
		t.Fatal("a rebuild snapshot for the store's own region")
	}
	if err := f.st.ApplySnapshot(ctx, "r1", replica.SnapshotChunk{}); err == nil {
		t.Fatal("the store's own snapshot accepted")
	}
}
