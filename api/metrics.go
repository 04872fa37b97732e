package api

import (
	"github.com/prometheus/client_golang/prometheus"
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
}

// NewMetrics creates and registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		WriteLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "likes_write_duration_seconds",
			Help:    "Latency of like/unlike writes, from admission to durable answer.",
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
	reg.MustRegister(m.WriteLatency, m.Outcomes, m.InFlight, m.Shed, m.Requests, m.SessionReads)
	return m
}
