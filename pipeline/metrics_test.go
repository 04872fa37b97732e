package pipeline_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/pipeline"
)

// TestCollectorLagSeconds: consumer lag is now minus the oldest partition
// watermark; counters are summed; nothing while the aggregators are stopped.
func TestCollectorLagSeconds(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_000_000))
	var stats []pipeline.Stats
	reg := prometheus.NewRegistry()
	reg.MustRegister(pipeline.NewCollector(func() []pipeline.Stats { return stats }, clk))
	gather := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			m := mf.GetMetric()[0]
			out[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return out
	}
	if got := gather(); len(got) != 0 {
		t.Fatalf("stopped aggregators reported %v", got)
	}
	stats = []pipeline.Stats{{Watermark: 998_000, Windows: 3, Events: 10, Corrections: 1}, {Watermark: 999_500, Windows: 2, Events: 5}}
	got := gather()
	if got["likes_aggregator_lag_seconds"] != 2 || got["likes_aggregator_windows_total"] != 5 ||
		got["likes_aggregator_events_total"] != 15 || got["likes_branch_corrections_total"] != 1 {
		t.Fatalf("got %v", got)
	}
}
