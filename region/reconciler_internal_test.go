package region

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/likes-dev/likes/clock"
)

// fakeRecon is a reconSource whose recounts follow a script per item: the
// i-th recount of an item answers script[i] (the last value once past the
// end; an item without a script is clean).
type fakeRecon struct {
	mu     sync.Mutex
	items  []string
	script map[string][]int64
	calls  map[string]int
	moving map[string]bool
	asOf   int64
}

func (f *fakeRecon) Items(_ context.Context, after string, limit int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := sort.SearchStrings(f.items, after)
	if i < len(f.items) && f.items[i] == after {
		i++
	}
	end := min(len(f.items), i+limit)
	return append([]string(nil), f.items[i:end]...), nil
}

func (f *fakeRecon) Recount(_ context.Context, item string) (Recount, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.script[item]
	n := f.calls[item]
	f.calls[item]++
	var m int64
	if len(s) > 0 {
		m = s[min(n, len(s)-1)]
	}
	fp := uint64(m)
	if f.moving[item] { // written all the time: the same mismatch, new cells
		fp = uint64(n)
	}
	return Recount{Item: item, Liked: 10 + m, Cells: 10, Mismatch: m}, fp, nil
}

func (f *fakeRecon) AsOf(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asOf, nil
}

func (f *fakeRecon) setAsOf(ms int64) {
	f.mu.Lock()
	f.asOf = ms
	f.mu.Unlock()
}

// TestReconcilerConfirmsOnlyStableMismatches drives the reconciler's steps by
// hand: a real drift (the item unchanged on both checks) is confirmed and
// counted; a difference that is gone once the watermark passed the first
// check (writes in flight) is not; an item that keeps changing is given up,
// even one whose mismatch stays the same while its cells move (a steady
// stream of writes in flight); a suspect is never re-checked before the
// watermark passes its check.
func TestReconcilerConfirmsOnlyStableMismatches(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_000_000))
	busy := make([]int64, 100) // a different value at every recount
	for i := range busy {
		busy[i] = int64(i + 1)
	}
	src := &fakeRecon{
		items: []string{"busy", "clean", "drift", "inflight", "steady"},
		script: map[string][]int64{
			"drift":    {-5},
			"inflight": {2, 0},
			"busy":     busy,
			"steady":   {1},
		},
		moving: map[string]bool{"steady": true},
		calls:  map[string]int{},
		asOf:   0, // the watermark has not passed anything yet
	}
	m := newReconMetrics()
	rc := newReconciler(src, clk, 100, m, slog.New(slog.DiscardHandler))
	rc.slack = 0 // the watermark passing the check is enough here
	ctx := context.Background()
	step := func() {
		t.Helper()
		if err := rc.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 { // the first pass samples the five items
		step()
	}
	if got := len(rc.pending); got != 4 {
		t.Fatalf("suspects after the first pass: %d, want 4 (busy, drift, inflight, steady)", got)
	}
	// The watermark has not passed the checks: the next steps sample the
	// second pass instead of re-checking.
	step()
	if got := src.calls["busy"]; got != 2 {
		t.Fatalf("busy recounted %d times, want 2 (sampled in each pass, never re-checked)", got)
	}
	if v := value(m.mismatches); v != 0 {
		t.Fatalf("mismatches before any re-check: %v", v)
	}
	clk.Advance(time.Second)
	src.setAsOf(clk.Now().UnixMilli()) // the watermark passed every check
	for range 20 {
		step()
		clk.Advance(10 * time.Millisecond)
		src.setAsOf(clk.Now().UnixMilli())
	}
	if v := value(m.mismatches); v != 1 {
		t.Errorf("likes_reconcile_mismatches_total = %v, want 1 (drift only; not steady, whose cells move)", v)
	}
	if v := value(m.mismatch); v != 1 {
		t.Errorf("likes_reconcile_mismatch_items = %v, want 1", v)
	}
	if v := value(m.transient); v < 1 {
		t.Errorf("likes_reconcile_transient_total = %v, want ≥ 1 (inflight)", v)
	}
	if v := value(m.unsettled); v < 1 {
		t.Errorf("likes_reconcile_unsettled_total = %v, want ≥ 1 (busy, steady)", v)
	}
	// The drift is healed: the next full passes find nothing and the gauge
	// goes back to 0, while the counter keeps what was found.
	src.mu.Lock()
	src.script = map[string][]int64{}
	src.mu.Unlock()
	before := value(m.passes)
	for i := 0; value(m.passes) < before+3; i++ {
		if i > 1000 {
			t.Fatal("no full pass in 1000 steps")
		}
		step()
		clk.Advance(10 * time.Millisecond)
		src.setAsOf(clk.Now().UnixMilli())
	}
	if v := value(m.mismatch); v != 0 {
		t.Errorf("likes_reconcile_mismatch_items after a clean pass = %v, want 0", v)
	}
	if v := value(m.mismatches); v < 1 {
		t.Errorf("likes_reconcile_mismatches_total went back to %v", v)
	}
}

// TestReconcilerHoldsSuspectsWhileTheWatermarkStops: a region whose asOf
// does not move past a check plus the slack (a partitioned peer) never
// confirms a suspect.
func TestReconcilerHoldsSuspectsWhileTheWatermarkStops(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_000_000))
	// asOf stays within the slack of the first check.
	src := &fakeRecon{items: []string{"a"}, script: map[string][]int64{"a": {3}}, calls: map[string]int{}, asOf: 1_000_000 + reconcileSlack.Milliseconds()}
	m := newReconMetrics()
	rc := newReconciler(src, clk, 100, m, slog.New(slog.DiscardHandler))
	for range 50 {
		if err := rc.step(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if v := value(m.mismatches); v != 0 {
		t.Fatalf("confirmed %v mismatches while the watermark stood still", v)
	}
	if len(rc.pending) != 1 {
		t.Fatalf("suspects: %d, want 1 (held)", len(rc.pending))
	}
}

// TestReconcilerLoopAndClose runs the goroutine on a fake clock and closes
// it twice.
func TestReconcilerLoopAndClose(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_000_000))
	src := &fakeRecon{items: []string{"a", "b"}, calls: map[string]int{}}
	m := newReconMetrics()
	rc := newReconciler(src, clk, 10, m, slog.New(slog.DiscardHandler))
	rc.start()
	deadline := time.Now().Add(10 * time.Second)
	for value(m.checked) < 4 {
		if time.Now().After(deadline) {
			t.Fatal("the loop made no recounts")
		}
		clk.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond) // let the loop take the tick (bounded by the deadline)
	}
	rc.Close()
	rc.Close()
	never := newReconciler(src, clk, 10, m, slog.New(slog.DiscardHandler))
	never.Close() // never started
}

// value reads a single gauge's or counter's value.
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		panic(err)
	}
	return d.GetGauge().GetValue() + d.GetCounter().GetValue()
}
