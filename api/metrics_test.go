package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/region"
)

// family returns the samples of a metric family: for a histogram its sample
// count and sum, else its value (ok false when it is not exported).
func family(t *testing.T, g prometheus.Gatherer, name string) (v, sum float64, ok bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				v += float64(h.GetSampleCount())
				sum += h.GetSampleSum()
				continue
			}
			v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return v, sum, true
	}
	return 0, 0, false
}

// TestStalenessHistogramObservesCountsServed: every count answered (single
// and batch) is observed with its own staleness (now − asOf), no more.
func TestStalenessHistogramObservesCountsServed(t *testing.T) {
	e := newRegionEnv(t, nil)
	mustAnswer(t, e.like(e.token("alice", false), "x", "k1"), true, true)
	c1 := e.getCount("x")
	c2 := e.getCount("y")
	e.batchGet("", []string{"x", "y", "z"})
	n, sum, ok := family(t, e.reg.Registry, "likes_count_staleness_seconds")
	if !ok || n != 5 {
		t.Fatalf("staleness observations: %v (exported %v), want 5 (2 counts + a batch of 3)", n, ok)
	}
	if low := float64(c1.StalenessMs+c2.StalenessMs) / 1000; sum < low {
		t.Fatalf("staleness sum %v s is below the two answered counts' %v s", sum, low)
	}
}

// TestHotItemGauge: the most written item's writes in the last full minute.
func TestHotItemGauge(t *testing.T) {
	clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(time.Second))
	e := newRegionEnv(t, func(c *region.Config) { c.Clock = clk })
	for i := range 5 {
		mustAnswer(t, e.like(e.token(fmt.Sprintf("u%d", i), false), "viral", fmt.Sprintf("k%d", i)), true, true)
	}
	mustAnswer(t, e.like(e.token("v", false), "other", "kv"), true, true)
	if v, _, _ := family(t, e.reg.Registry, "likes_hot_item_writes_per_minute"); v != 0 {
		t.Fatalf("during the first minute: %v, want 0 (no full minute yet)", v)
	}
	clk.Advance(time.Minute)
	if v, _, _ := family(t, e.reg.Registry, "likes_hot_item_writes_per_minute"); v != 5 {
		t.Fatalf("the minute after: %v, want 5", v)
	}
	clk.Advance(2 * time.Minute)
	if v, _, _ := family(t, e.reg.Registry, "likes_hot_item_writes_per_minute"); v != 0 {
		t.Fatalf("two quiet minutes later: %v, want 0", v)
	}
}
