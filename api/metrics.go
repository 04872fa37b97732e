package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
)

// Metrics are the API's Prometheus collectors, registered on a caller-owned
// registry (no global state).
type Metrics struct {
	WriteLatency *prometheus.HistogramVec
	Outcomes     *prometheus.CounterVec
	InFlight     prometheus.Gauge
	Shed         prometheus.Counter
	Requests     *prometheus.CounterVec
	SessionReads *prometheus.CounterVec
	// Staleness is now − asOf of every count answered (the cross-region asOf
	// the client sees), observed where counts are answered.
	Staleness prometheus.Histogram

	reg prometheus.Registerer
}

// StalenessBuckets are the staleness histogram's buckets (seconds); 5 is the
// SLO's bound (p99 < 5 s), 1 and 2 the in- and cross-region goals.
var StalenessBuckets = []float64{.1, .25, .5, 1, 2, 3, 5, 10, 30, 60, 300}

// served records a count answered to a client.
func (m *Metrics) served(res counts.Result) {
	m.Staleness.Observe(res.Staleness.Seconds())
}

// watchHot exports the write rate of the most written item (hotItems).
func (m *Metrics) watchHot(h *hotItems, clk clock.Clock) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "likes_hot_item_writes_per_minute",
		Help: "Writes at this region in the last full minute to the most written item (items past the tracking bound are not seen). A viral item's writes spread over its 64 buckets; alert when one item nears the buckets' write capacity.",
	}, func() float64 { return float64(h.hottest(clk.Now())) }))
}

// hottest is the highest write count of one item in the last full minute
// (a scan of at most maxTracked entries, once per scrape).
func (h *hotItems) hottest(now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roll(now)
	n := 0
	for _, c := range h.prev {
		n = max(n, c)
	}
	return n
}

// NewMetrics creates and registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		Staleness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "likes_count_staleness_seconds",
			Help:    "Staleness of the counts answered to clients (single and batch reads): now minus the count's asOf, the min over regions of the watermarks known here.",
			Buckets: StalenessBuckets,
		}),
		WriteLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "likes_write_duration_seconds",
			Help:    "Latency of like/unlike writes, from admission to durable answer (the 0.15 bucket is the SLO's bound: p99 < 150 ms).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .15, .25, .5, 1, 2.5},
		}, []string{"op"}),
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "likes_write_outcomes_total",
			Help: "Write outcomes: changed, unchanged, replayed, conflict, erased, shed, rate_limited, unavailable, storage_unavailable, error.",
		}, []string{"op", "outcome"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "likes_inflight_writes",
			Help: "Writes admitted and not yet answered.",
		}),
		Shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_shed_total",
			Help: "Writes refused with 503 because the in-flight bound was reached.",
		}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "likes_http_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
	}
	m.SessionReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "likes_session_reads_total",
		Help: "Button reads that carried a valid Likes-Session token naming the item, by where the answer came from: local (the replica had caught up), owner (asked the range's owner), session (the owner could not prove it: the token's own state).",
	}, []string{"source"})
	reg.MustRegister(m.WriteLatency, m.Outcomes, m.InFlight, m.Shed, m.Requests, m.SessionReads, m.Staleness)
	return m
}
