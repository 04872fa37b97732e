package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricValue is the value of the unlabelled gauge or counter name in reg
// (ok false when it is not exported).
func metricValue(t *testing.T, reg prometheus.Gatherer, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
	}
	return 0, false
}

// pollMetric waits (bounded) until cond holds for the metric's value.
func pollMetric(t *testing.T, reg prometheus.Gatherer, name string, what string, cond func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, ok := metricValue(t, reg, name)
		if ok && cond(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s = %v (exported %v)", what, name, v, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBackgroundReconcilerFindsAnInjectedMismatch: a region whose cells are
// made to drift from its edges (a heal event with no edge behind it) is
// found and counted by the background reconciler without any operator; a
// clean region reports 0 after several full passes.
func TestBackgroundReconcilerFindsAnInjectedMismatch(t *testing.T) {
	for _, inject := range []bool{false, true} {
		t.Run(fmt.Sprintf("inject=%v", inject), func(t *testing.T) {
			cfg := config(t.TempDir())
			cfg.ReconcileRate = 500
			r, srv := open(t, cfg)
			for i := range 6 {
				if _, err := write(t, srv, fmt.Sprintf("u%d", i), fmt.Sprintf("item-%d", i%3), fmt.Sprintf("k%d", i), true); err != nil {
					t.Fatal(err)
				}
			}
			if inject {
				if err := r.Backend.Heal(context.Background(), "item-1", 5); err != nil {
					t.Fatal(err)
				}
				pollMetric(t, r.Registry, "likes_reconcile_mismatches_total", "the drift is found", func(v float64) bool { return v == 1 })
				pollMetric(t, r.Registry, "likes_reconcile_mismatch_items", "the drift is in the gauge", func(v float64) bool { return v == 1 })
				return
			}
			v0, _ := metricValue(t, r.Registry, "likes_reconcile_passes_total")
			pollMetric(t, r.Registry, "likes_reconcile_passes_total", "full passes", func(v float64) bool { return v >= v0+5 })
			for _, name := range []string{"likes_reconcile_mismatch_items", "likes_reconcile_mismatches_total"} {
				if v, ok := metricValue(t, r.Registry, name); !ok || v != 0 {
					t.Errorf("clean region: %s = %v (exported %v), want 0", name, v, ok)
				}
			}
		})
	}
}
