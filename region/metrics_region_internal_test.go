package region

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/epoch"
)

// collect returns the samples of c: label values joined → value.
func collect(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		key := ""
		for _, l := range d.GetLabel() {
			key += l.GetValue()
		}
		out[key] = d.GetGauge().GetValue() + d.GetCounter().GetValue()
	}
	return out
}

// TestOptGaugeReportsNothingWithoutAValue: no sample, rather than a −1.
func TestOptGaugeReportsNothingWithoutAValue(t *testing.T) {
	ok := false
	g := newOptGauge("x", "x", func() (float64, bool) { return 7, ok })
	if got := collect(t, g); len(got) != 0 {
		t.Fatalf("a gauge without a value reported %v", got)
	}
	ok = true
	if got := collect(t, g); got[""] != 7 {
		t.Fatalf("got %v, want 7", got)
	}
}

// TestPinsCollector counts pins per owner.
func TestPinsCollector(t *testing.T) {
	pins := []epoch.Pin{{Range: 0, Region: "us"}, {Range: 1, Region: "eu"}, {Range: 2, Region: "us"}}
	c := &pinsCollector{pins: func() []epoch.Pin { return pins }, desc: prometheus.NewDesc("likes_pins", "", []string{"owner"}, nil)}
	got := collect(t, c)
	if got["us"] != 2 || got["eu"] != 1 || len(got) != 2 {
		t.Fatalf("pins per owner: %v", got)
	}
}

// TestCatchUpCollector: the oldest range catching up, from its notBefore or
// from when it was first seen; 0 once none catches up.
func TestCatchUpCollector(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var pins []epoch.Pin
	c := newCatchUpCollector(func() []epoch.Pin { return pins }, clk)
	if got := collect(t, c)[""]; got != 0 {
		t.Fatalf("nothing catching up: %v", got)
	}
	pins = []epoch.Pin{{Range: 3, Epoch: 2, Region: "us", CatchUp: true}} // no notBefore: first seen now
	collect(t, c)
	clk.Advance(90 * time.Second)
	if got := collect(t, c)[""]; got != 90 {
		t.Fatalf("catching up for %v s, want 90", got)
	}
	pins = append(pins, epoch.Pin{Range: 4, Epoch: 5, Region: "us", CatchUp: true, NotBefore: clk.Now().Add(-10 * time.Minute)})
	if got := collect(t, c)[""]; got != 600 {
		t.Fatalf("oldest from notBefore: %v s, want 600", got)
	}
	pins = nil
	if got := collect(t, c)[""]; got != 0 {
		t.Fatalf("after the catch-up: %v", got)
	}
}
