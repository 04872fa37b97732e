package cassandra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
)

// TestCellCommitWithoutPaxos: a window's cells and dedupe rows are plain
// batches; the only Paxos request of a commit is the cell-change feed's
// append (one per window, not per item).
func TestCellCommitWithoutPaxos(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	const n = 12
	for i := range n {
		mustApply(t, s, edgetest.Like(fmt.Sprintf("i%d", i), "u", "", 1, t0), edge.ActWrite)
	}
	clk.Advance(time.Second)
	agg, err := pipeline.NewAggregator(pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fold := func() int {
		windows := 0
		for range 20 {
			k, _, err := agg.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				break
			}
			windows++
		}
		return windows
	}
	fold() // the first window also creates the feed's sequence row
	for i := range n {
		mustApply(t, s, edgetest.Like(fmt.Sprintf("i%d", i), "v", "", 1, t0), edge.ActWrite)
	}
	clk.Advance(time.Second)
	before := s.Ops()
	windows := fold()
	paxos := s.Ops().Paxos - before.Paxos
	t.Logf("%d likes on %d items folded in %d windows: %d Paxos requests, %d plain", n, n, windows, paxos, s.Ops().Plain-before.Plain)
	// Per window: the feed append's sequence LWT, and at most one
	// CompleteThrough LWT of the log read (plus one retry under load).
	if paxos > uint64(2*windows+1) {
		t.Fatalf("%d windows took %d Paxos requests, want at most %d: cell batches must not be LWTs", windows, paxos, 2*windows+1)
	}
	pipelinetest.CheckCounts(t, s, s, itemNames(n))
}

func itemNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("i%d", i)
	}
	return out
}

// TestZombieWindowLoses: a zombie aggregator passes its fence check, then
// the live one commits the same window and a later one before the zombie's
// batches land. The zombie's writes (an older log prefix, a lower write
// timestamp) change nothing: the cells keep the later prefix, and a fresh
// aggregator from the position the zombie set back counts nothing twice.
// (Without the timestamps the zombie's stale cell would overwrite the
// later one and lose its like.)
func TestZombieWindowLoses(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	ctx := context.Background()
	items := []string{"a", "b"}
	mustApply(t, s, edgetest.Like("a", "u1", "", 1, t0), edge.ActWrite)
	mustApply(t, s, edgetest.Like("b", "u1", "", 1, t0), edge.ActWrite)
	clk.Advance(time.Second)
	cfg := pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}
	zombie, err := pipeline.NewAggregator(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	live, err := pipeline.NewAggregator(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	armed.Store(true)
	var liveErr error
	s.SetTestHook(func(stage string) error {
		if stage != "cells-checked" || !armed.CompareAndSwap(true, false) {
			return nil
		}
		// The zombie is between its fence check and its batches: the live
		// aggregator folds the same window, then one more like of a and an
		// unlike of b.
		if _, _, liveErr = live.Step(ctx); liveErr != nil {
			return nil
		}
		mustApply(t, s, edgetest.Like("a", "u2", "", 1, t0+1), edge.ActWrite)
		mustApply(t, s, edgetest.Unlike("b", "u1", "", 1, t0+1), edge.ActWrite)
		clk.Advance(time.Second)
		_, _, liveErr = live.Step(ctx)
		return nil
	})
	if _, _, err := zombie.Step(ctx); err != nil && !errors.Is(err, pipeline.ErrFenced) {
		t.Fatalf("zombie Step: %v", err)
	}
	s.SetTestHook(nil)
	if liveErr != nil {
		t.Fatalf("live Step: %v", liveErr)
	}
	if armed.Load() {
		t.Fatal("the zombie never reached its batches")
	}
	pipelinetest.CheckCounts(t, s, s, items) // a: 2, b: 0
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, cfg))
	pipelinetest.CheckCounts(t, s, s, items)
}

// TestCellFromOlderRelease: a cell last written by a lightweight
// transaction (a release before this one: a Paxos ballot timestamp, now in
// microseconds) is superseded by the next window of this release.
func TestCellFromOlderRelease(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	ctx := context.Background()
	cfg := pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}
	mustApply(t, s, edgetest.Like("a", "u1", "", 1, t0), edge.ActWrite)
	clk.Advance(time.Second)
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, cfg))
	// Rewrite the cell as the older release did: an LWT on its hwm.
	var hwm int64
	var shard int
	if err := s.read(ctx, "SELECT shard, hwm FROM "+ks+".cells WHERE item = 'a' AND kind = 0 AND region = 'r1'").Scan(&shard, &hwm); err != nil {
		t.Fatal(err)
	}
	applied, err := s.cas(ctx, "UPDATE "+ks+".cells SET p = 1, n = 0, hwm = ? WHERE item = 'a' AND kind = 0 AND region = 'r1' AND shard = ? AND user = '' IF hwm = ?",
		hwm, shard, hwm).MapScanCAS(map[string]any{})
	if err != nil || !applied {
		t.Fatalf("LWT rewrite of the cell: applied %v, %v", applied, err)
	}
	mustApply(t, s, edgetest.Like("a", "u2", "", 1, t0+1), edge.ActWrite)
	clk.Advance(time.Second)
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, cfg))
	pipelinetest.CheckCounts(t, s, s, []string{"a"})
}

// TestReplayAnnouncesCellsOfACrashedWindow: a window whose cell batch landed
// but whose process died before the cell-change feed was appended (and
// before the position moved) leaves a cell the replaying aggregator finds
// ahead of its window. The replay announces it, so replication ships it
// before any watermark that vouches for it (without that, a peer counted
// the cell's old state under a later asOf).
func TestReplayAnnouncesCellsOfACrashedWindow(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	ctx := context.Background()
	mustApply(t, s, edgetest.Like("a", "u1", "", 1, t0), edge.ActWrite)
	clk.Advance(time.Second)
	cfg := pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}
	crashOnce(s, "cell-written")
	agg, err := pipeline.NewAggregator(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := agg.Step(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("Step: %v, want the simulated crash after the cell batch", err)
	}
	if cs, _, err := s.CellChanges(ctx, 0, 100); err != nil || len(cs) != 0 {
		t.Fatalf("feed after the crash: %v, %v; want nothing announced yet", cs, err)
	}
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, cfg))
	cs, _, err := s.CellChanges(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Key.Item != "a" || cs[0].Cell.P != 1 {
		t.Fatalf("feed after the replay: %+v; want item a's cell (P 1) announced", cs)
	}
	pipelinetest.CheckCounts(t, s, s, []string{"a"})
}

// TestBaseReadsAnItemOnce: Base answers what Cells and Applied answer, in one
// read per item (two for an item with 150 edges: reads of 100), and refuses a
// cell no window of the partition folds.
func TestBaseReadsAnItemOnce(t *testing.T) {
	ks := FreshKeyspace(t)
	s := openTest(t, ks, 2, clock.NewFake(time.UnixMilli(t0)))
	ctx := context.Background()
	viral := crdt.CellKey{Item: "viral", Region: "r1", Shard: 1}
	plain := crdt.CellKey{Item: "plain", Region: "r1", Shard: 1}
	w := pipeline.Window{Partition: 1, Through: 200, Watermark: 5,
		Cells: []pipeline.CellUpdate{
			{Key: viral, Cell: crdt.Cell{P: 150, HWM: 190, Watermark: 5}},
			{Key: plain, Cell: crdt.Cell{P: 1, HWM: 200, Watermark: 5}},
		},
		Dedupe: map[pipeline.EdgeKey]pipeline.Applied{{Item: "plain", User: "u"}: {Write: crdt.Version{Epoch: 1, Op: 1}, At: 3}},
	}
	var edges []pipeline.EdgeKey
	for i := range 150 {
		k := pipeline.EdgeKey{Item: "viral", User: fmt.Sprintf("u%03d", i)}
		w.Dedupe[k] = pipeline.Applied{Write: crdt.Version{Epoch: 2, Op: uint64(i + 1)}, At: int64(i)}
		edges = append(edges, k)
	}
	if err := s.Commit(ctx, w); err != nil {
		t.Fatal(err)
	}
	edges = append(edges, pipeline.EdgeKey{Item: "plain", User: "u"}, pipeline.EdgeKey{Item: "plain", User: "nobody"})
	keys := []crdt.CellKey{viral, plain, {Item: "none", Region: "r1", Shard: 1}}
	before := s.Ops().Plain
	cells, applied, err := s.Base(ctx, 1, keys, edges)
	if err != nil {
		t.Fatal(err)
	}
	if reads := s.Ops().Plain - before; reads != 4 { // viral 2, plain 1, none 1
		t.Fatalf("Base took %d reads, want 4", reads)
	}
	wantC, err := s.Cells(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	wantA, err := s.Applied(ctx, 1, edges)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(cells, wantC) || !maps.Equal(applied, wantA) || len(applied) != 151 {
		t.Fatalf("Base: %d cells, %d dedupe rows; Cells and Applied: %d, %d", len(cells), len(applied), len(wantC), len(wantA))
	}
	if _, _, err := s.Base(ctx, 0, keys, nil); err == nil {
		t.Fatal("Base of another partition's cells: no error")
	}
	// Another writer's window lands between the viral item's two parts:
	// their cells disagree, and the base is refused rather than mixed.
	var once sync.Once
	s.SetTestHook(func(stage string) error {
		if stage != "base-part-read" {
			return nil
		}
		var err error
		once.Do(func() {
			err = s.Commit(ctx, pipeline.Window{Partition: 1, Through: 250, Watermark: 6,
				Cells: []pipeline.CellUpdate{{Key: viral, Expect: 190, Cell: crdt.Cell{P: 151, HWM: 250, Watermark: 6}}}})
		})
		return err
	})
	if _, _, err := s.Base(ctx, 1, keys, edges); !errors.Is(err, pipeline.ErrFenced) {
		t.Fatalf("Base across another writer's window: %v, want ErrFenced", err)
	}
	s.SetTestHook(nil)
	if _, _, err := s.Base(ctx, 1, keys, edges); err != nil {
		t.Fatalf("Base after it: %v", err)
	}
}
