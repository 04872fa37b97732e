package pipeline

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/clock"
)

// Collector exports the aggregators' progress, read from stats at each
// scrape (nil or empty while the aggregators are stopped: then only the
// counters' last values are lost, and nothing is made up).
type Collector struct {
	stats func() []Stats
	clk   clock.Clock

	lagSeconds, windows, events, corrections *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the unregistered collector over stats; clk measures
// the lag (nil: the wall clock).
func NewCollector(stats func() []Stats, clk clock.Clock) *Collector {
	if clk == nil {
		clk = clock.Real{}
	}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &Collector{
		stats: stats, clk: clk,
		lagSeconds:  d("likes_aggregator_lag_seconds", "Consumer lag in seconds: now minus the oldest partition watermark of this region's aggregators (the event time through which every partition is folded into cells)."),
		windows:     d("likes_aggregator_windows_total", "Aggregator windows committed, summed over partitions (since the aggregators started)."),
		events:      d("likes_aggregator_events_total", "Log events folded by the aggregators, summed over partitions (since the aggregators started)."),
		corrections: d("likes_branch_corrections_total", "Correction events folded: older-epoch writes that arrived after an unplanned failover branched their edge (acknowledged writes overtaken; counts stay exact)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagSeconds
	ch <- c.windows
	ch <- c.events
	ch <- c.corrections
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	if len(st) == 0 {
		return
	}
	var windows, events, corr uint64
	oldest := int64(-1)
	for _, s := range st {
		windows += s.Windows
		events += s.Events
		corr += s.Corrections
		if oldest < 0 || s.Watermark < oldest {
			oldest = s.Watermark
		}
	}
	if oldest > 0 {
		lag := max(0, c.clk.Now().Sub(time.UnixMilli(oldest)).Seconds())
		ch <- prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, lag)
	}
	ch <- prometheus.MustNewConstMetric(c.windows, prometheus.CounterValue, float64(windows))
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(events))
	ch <- prometheus.MustNewConstMetric(c.corrections, prometheus.CounterValue, float64(corr))
}
