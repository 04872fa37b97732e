package region

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/pebblestore"
)

// The region's metrics follow Prometheus conventions: base units (seconds,
// bytes), _total for counters, and no sentinel values: a gauge whose value
// cannot be read (a store error, a lease never kept alive) is simply not
// reported at that scrape, so an alert on it sees no sample rather than a
// made-up −1.

// metricScrapeTimeout bounds a gauge that reads a store at scrape time.
const metricScrapeTimeout = 5 * time.Second

// optGauge is a gauge read at scrape time that may have no value.
type optGauge struct {
	desc *prometheus.Desc
	fn   func() (float64, bool)
}

func newOptGauge(name, help string, fn func() (float64, bool)) *optGauge {
	return &optGauge{desc: prometheus.NewDesc(name, help, nil, nil), fn: fn}
}

func (g *optGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *optGauge) Collect(ch chan<- prometheus.Metric) {
	if v, ok := g.fn(); ok {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
}

// registerStorageMetrics registers the store's health (and, on Pebble, its
// own metrics).
func (r *Region) registerStorageMetrics() {
	if r.Cassandra != nil {
		c := r.Cassandra
		r.Registry.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "likes_storage_writable",
				Help: "1 while Cassandra takes writes; 0 while its write breaker is open (writes refused at once; /readyz and the log say why).",
			}, func() float64 {
				if ok, _, _ := c.Health(); ok {
					return 1
				}
				return 0
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "likes_storage_faults_total",
				Help: "Times Cassandra's write breaker opened.",
			}, func() float64 { _, _, n := c.Health(); return float64(n) }),
		)
	}
	if r.Store == nil {
		return
	}
	st := r.Store
	r.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "likes_storage_writable",
			Help: "1 while the store accepts writes; 0 while it refuses them (low disk space, a failed write or sync, a background error, a stall; /readyz and the log say why).",
		}, func() float64 {
			if st.Health().Writable {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_storage_faults_total",
			Help: "Times the store went from accepting writes to refusing them.",
		}, func() float64 { return float64(st.Health().Faults) }),
		newOptGauge("likes_storage_free_bytes",
			"Free space of the data folder's filesystem at the last check (not reported while the low-disk watermark is off).",
			func() (float64, bool) {
				h := st.Health()
				return float64(h.FreeBytes), h.FreeBytes > 0
			}),
		pebblestore.NewCollector(st),
	)
}

// registerPipelineMetrics registers the Go and process collectors and the
// aggregators', relay's and DLQ's metrics.
func (r *Region) registerPipelineMetrics() {
	r.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		pipeline.NewCollector(r.aggStats, r.cfg.Clock),
		newOptGauge("likes_aggregator_lag_events",
			"Committed log events not yet folded into cells, summed over partitions (not reported while the log cannot be read).",
			func() (float64, bool) {
				ctx, cancel := context.WithTimeout(context.Background(), metricScrapeTimeout)
				defer cancel()
				lag, err := r.aggregatorLag(ctx)
				return float64(lag), err == nil
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_aggregator_cell_writes_total",
			Help: "Cell writes committed by the aggregators (one per touched cell per window).",
		}, func() float64 { return float64(r.cellWrites.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_dlq_records_total",
			Help: "Undecodable Kafka log records parked in the dead-letter topic and skipped by the aggregators (always 0 on the embedded log). Alert on any increase: an operator must look at them.",
		}, func() float64 {
			if r.KafkaLog == nil {
				return 0
			}
			return float64(r.KafkaLog.Stats().Poisoned)
		}),
		&watermarkCollector{r: r, desc: prometheus.NewDesc("likes_region_watermark_age_seconds",
			"Now minus each region's watermark as this region knows it (label source); the max over sources is the staleness of a fresh count read here.",
			[]string{"source"}, nil)},
	)
	if r.cfg.Engines.Log == LogKafka {
		a := &admin{r: r}
		r.Registry.MustRegister(
			newOptGauge("likes_relay_lag_events",
				"Events of the store's log the Kafka relay has not published yet, summed over partitions.",
				func() (float64, bool) {
					ctx, cancel := context.WithTimeout(context.Background(), metricScrapeTimeout)
					defer cancel()
					lag, err := a.relayLag(ctx)
					return float64(lag), err == nil
				}),
			newOptGauge("likes_relay_lag_seconds",
				"Now minus the oldest watermark the Kafka relay has published over partitions (the event time through which Kafka holds the log).",
				func() (float64, bool) {
					r.pmu.Lock()
					rl := r.Relay
					r.pmu.Unlock()
					if rl == nil {
						return 0, false
					}
					oldest := int64(math.MaxInt64)
					for _, s := range rl.Stats() {
						oldest = min(oldest, s.Watermark)
					}
					if oldest <= 0 || oldest == math.MaxInt64 {
						return 0, false
					}
					return max(0, r.cfg.Clock.Now().Sub(time.UnixMilli(oldest)).Seconds()), true
				}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "likes_kafka_log_fetches_total",
				Help: "Fetch requests the aggregators' Kafka log made.",
			}, func() float64 {
				if r.KafkaLog == nil {
					return 0
				}
				return float64(r.KafkaLog.Stats().Fetches)
			}),
			r.kafkaM,
		)
	}
}

// watermarkCollector reports the age of every region's watermark known here.
type watermarkCollector struct {
	r    *Region
	desc *prometheus.Desc
}

func (c *watermarkCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *watermarkCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricScrapeTimeout)
	defer cancel()
	wms, err := c.r.Backend.Watermarks(ctx)
	if err != nil {
		return
	}
	now := c.r.cfg.Clock.Now()
	for _, reg := range c.r.regions {
		if wm := wms[reg]; wm > 0 {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, max(0, now.Sub(time.UnixMilli(wm)).Seconds()), reg)
		}
	}
}

// registerClusterMetrics registers the lease, pin and replication metrics of
// a region in a cluster.
func (r *Region) registerClusterMetrics() {
	c := r.cluster
	if c == nil {
		return
	}
	clk := r.cfg.Clock
	r.Registry.MustRegister(
		newOptGauge("likes_lease_age_seconds",
			"Time since this region's last successful etcd lease keepalive (not reported before the first one). Writes fail closed once it nears likes_lease_ttl_seconds.",
			func() (float64, bool) {
				last := c.keepalive.LastKeepalive()
				if last.IsZero() {
					return 0, false
				}
				return max(0, clk.Now().Sub(last).Seconds()), true
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "likes_lease_ttl_seconds",
			Help: "The region lease's TTL in etcd.",
		}, func() float64 { return c.ecfg.TTL.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "likes_lease_held",
			Help: "1 while this region can prove its lease and pin table fresh (it may write the ranges it owns); 0 while it fails closed (etcd unreachable or the lease lost).",
		}, func() float64 {
			if c.authority.LeaseProof() == nil {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "likes_pins_catching_up",
			Help: "Ranges this region owns by a planned move but may not write yet: it is catching up on the other live regions' logs (alert if it stays nonzero: a peer is unreachable).",
		}, func() float64 { return float64(len(c.authority.CatchingUp())) }),
		newCatchUpCollector(c.authority.CatchingUp, clk),
		&pinsCollector{pins: c.authority.Pins, desc: prometheus.NewDesc("likes_pins",
			"Ranges pinned to each region (label owner) in this region's view of the pin table.", []string{"owner"}, nil)},
	)
	if c.grpcSrv != nil {
		r.Registry.MustRegister(replication.NewShipperCollector(c, clk))
	}
	if c.grpcMetrics != nil {
		r.Registry.MustRegister(c.grpcMetrics)
	}
	if rs := c.replServer; rs != nil {
		r.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_peer_protocol_refused_total",
			Help: "Region-to-region calls refused because the caller's protocol version is outside this region's range (a peer too old or too new for a rolling upgrade).",
		}, func() float64 { return float64(rs.RefusedProtocol()) }))
	}
}

// pinsCollector counts pins per owner region.
type pinsCollector struct {
	pins func() []epoch.Pin
	desc *prometheus.Desc
}

func (c *pinsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pinsCollector) Collect(ch chan<- prometheus.Metric) {
	n := map[string]int{}
	for _, p := range c.pins() {
		n[p.Region]++
	}
	for owner, k := range n {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(k), owner)
	}
}

// catchUpCollector reports how long the oldest range still catching up has
// been waiting: since its notBefore (when it could otherwise have been
// written), or since this collector first saw it catching up when the pin
// has no notBefore. 0 while no range catches up.
type catchUpCollector struct {
	pins func() []epoch.Pin
	clk  interface{ Now() time.Time }
	desc *prometheus.Desc

	mu    sync.Mutex
	first map[[2]uint64]time.Time // (range, epoch) → first seen catching up
}

func newCatchUpCollector(pins func() []epoch.Pin, clk interface{ Now() time.Time }) *catchUpCollector {
	return &catchUpCollector{pins: pins, clk: clk, first: map[[2]uint64]time.Time{},
		desc: prometheus.NewDesc("likes_pins_catching_up_seconds",
			"How long the oldest range this region owns by a planned move has been catching up (0: none). Alert when it stays high: a live peer does not answer the barrier.", nil, nil)}
}

func (c *catchUpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *catchUpCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.clk.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[[2]uint64]time.Time{}
	oldest := 0.0
	for _, p := range c.pins() {
		k := [2]uint64{uint64(p.Range), p.Epoch}
		start, ok := c.first[k]
		if !ok {
			start = now
		}
		seen[k] = start
		if !p.NotBefore.IsZero() && p.NotBefore.Before(start) {
			start = p.NotBefore
		}
		oldest = max(oldest, now.Sub(start).Seconds())
	}
	c.first = seen
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, oldest)
}
