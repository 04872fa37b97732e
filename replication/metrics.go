package replication

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/clock"
)

// ShipperCollector exports a Shipper's per-peer state as Prometheus metrics
// (label peer: the peer's region), read from Stats at each scrape. Lag in
// seconds is now minus the watermark of this region that the peer last
// acknowledged: how old this region's counts are at the peer. It is not
// reported before the peer has acknowledged a watermark (no sentinel value).
type ShipperCollector struct {
	s   PeerStatser
	clk clock.Clock

	lagEvents, lagSeconds, active                        *prometheus.Desc
	pushes, events, cells, bytes, failures, repaired, ae *prometheus.Desc
}

var _ prometheus.Collector = (*ShipperCollector)(nil)

// PeerStatser is what a ShipperCollector reads: a *Shipper, or a region's
// view of whichever shipper runs now (a region of several nodes runs one).
type PeerStatser interface {
	Stats() []PeerStats
}

var _ PeerStatser = (*Shipper)(nil)

// NewShipperCollector returns the collector of s; clk is the clock the lag is
// measured with (nil: the wall clock).
func NewShipperCollector(s PeerStatser, clk clock.Clock) *ShipperCollector {
	if clk == nil {
		clk = clock.Real{}
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"peer"}, nil)
	}
	return &ShipperCollector{
		s: s, clk: clk,
		lagEvents:  d("likes_replication_lag_events", "Events of this region's log not yet acknowledged by the peer, summed over partitions."),
		lagSeconds: d("likes_replication_lag_seconds", "Now minus this region's watermark as the peer last acknowledged it: how stale this region's counts are at the peer."),
		active:     d("likes_replication_peer_active", "1 while a loop ships to the peer and the peer has told its cursor; 0 while the peer is known but not handshaken or has left."),
		pushes:     d("likes_replication_pushes_total", "Successful pushes to the peer."),
		events:     d("likes_replication_events_shipped_total", "Log events in successful pushes to the peer (resends included)."),
		cells:      d("likes_replication_cells_shipped_total", "Cell states in successful pushes to the peer (repairs included)."),
		bytes:      d("likes_replication_sent_bytes_total", "Encoded bytes sent to the peer."),
		failures:   d("likes_replication_failures_total", "Failed replication calls to the peer (push, digest or local read)."),
		repaired:   d("likes_replication_cells_repaired_total", "Cell states pushed to the peer by anti-entropy."),
		ae:         d("likes_replication_digest_rounds_total", "Anti-entropy digest rounds with the peer."),
	}
}

// Describe implements prometheus.Collector.
func (c *ShipperCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lagEvents, c.lagSeconds, c.active, c.pushes, c.events, c.cells, c.bytes, c.failures, c.repaired, c.ae} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ShipperCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.clk.Now()
	for _, st := range c.s.Stats() {
		p := st.Region
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, p)
		}
		n := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), p)
		}
		up := 0.0
		if st.Active && st.Handshaken {
			up = 1
		}
		g(c.active, up)
		if st.Active && st.Handshaken {
			g(c.lagEvents, float64(st.LagEvents))
			if st.Watermark > 0 {
				g(c.lagSeconds, max(0, now.Sub(time.UnixMilli(st.Watermark)).Seconds()))
			}
		}
		n(c.pushes, st.Pushes)
		n(c.events, st.EventsShipped)
		n(c.cells, st.CellsShipped)
		n(c.bytes, st.BytesShipped)
		n(c.failures, st.Failures)
		n(c.repaired, st.CellsRepaired)
		n(c.ae, st.DigestRounds)
	}
}

// GRPCMetrics counts and times the region-to-region gRPC calls, on the server
// and the client side, by method and status code (the names of the
// go-grpc-middleware Prometheus provider, written here as a small pair of
// unary interceptors: every call of this plane is unary). Register it on a
// registry; ServerOption and ClientInterceptor install it.
type GRPCMetrics struct {
	clk                    clock.Clock
	srvHandled, cliHandled *prometheus.CounterVec
	srvSeconds, cliSeconds *prometheus.HistogramVec
}

var _ prometheus.Collector = (*GRPCMetrics)(nil)

// grpcBuckets are the latency buckets of the gRPC histograms (seconds).
var grpcBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .15, .25, .5, 1, 2.5, 5, 10}

// NewGRPCMetrics returns unregistered gRPC metrics timed with clk (nil: the
// wall clock).
func NewGRPCMetrics(clk clock.Clock) *GRPCMetrics {
	if clk == nil {
		clk = clock.Real{}
	}
	labels := []string{"grpc_method", "grpc_code"}
	return &GRPCMetrics{
		clk: clk,
		srvHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total", Help: "gRPC calls completed by this region's server, by method and code.",
		}, labels),
		cliHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_client_handled_total", Help: "gRPC calls this region made to peers, by method and code.",
		}, labels),
		srvSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpc_server_handling_seconds", Help: "Time this region's server took to handle a gRPC call.", Buckets: grpcBuckets,
		}, []string{"grpc_method"}),
		cliSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpc_client_handling_seconds", Help: "Time a gRPC call to a peer took, as the caller saw it.", Buckets: grpcBuckets,
		}, []string{"grpc_method"}),
	}
}

// Describe implements prometheus.Collector.
func (m *GRPCMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.srvHandled.Describe(ch)
	m.cliHandled.Describe(ch)
	m.srvSeconds.Describe(ch)
	m.cliSeconds.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *GRPCMetrics) Collect(ch chan<- prometheus.Metric) {
	m.srvHandled.Collect(ch)
	m.cliHandled.Collect(ch)
	m.srvSeconds.Collect(ch)
	m.cliSeconds.Collect(ch)
}

// ServerOption installs the server-side interceptor.
func (m *GRPCMetrics) ServerOption() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(m.ServerInterceptor())
}

// ServerInterceptor is the server-side interceptor.
func (m *GRPCMetrics) ServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := m.clk.Now()
		resp, err := h(ctx, req)
		m.srvSeconds.WithLabelValues(info.FullMethod).Observe(m.clk.Now().Sub(start).Seconds())
		m.srvHandled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
		return resp, err
	}
}

// ClientInterceptor is the client-side interceptor (TransportConfig.Interceptors).
func (m *GRPCMetrics) ClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := m.clk.Now()
		err := inv(ctx, method, req, reply, cc, opts...)
		m.cliSeconds.WithLabelValues(method).Observe(m.clk.Now().Sub(start).Seconds())
		m.cliHandled.WithLabelValues(method, status.Code(err).String()).Inc()
		return err
	}
}
