package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"likes/api"
	"likes/auth"
	"likes/clock"
	"likes/counts"
	"likes/edge"
	"likes/inproc"
	"likes/pipeline"
	"likes/store/pebblestore"
)

// Config configures one region.
type Config struct {
	// Name is the region's name (e.g. "us"). Required.
	Name string
	// DataDir holds the region's database. Required.
	DataDir string
	// Partitions of the committed log (default 16; fixed at creation).
	Partitions int
	// Window is the aggregator commit interval (default 250ms).
	Window time.Duration
	// Secret verifies bearer tokens. Required.
	Secret []byte
	// MaxInFlightWrites bounds admitted writes (default 1024).
	MaxInFlightWrites int
	// UserRate/UserBurst limit writes per user (default 20/s, burst 40; rate < 0 disables).
	UserRate  float64
	UserBurst int
	// IPRate/IPBurst limit requests per client IP (default disabled: behind a
	// load balancer every request has the balancer's address).
	IPRate  float64
	IPBurst int
	// EraseRate bounds edges erased per second (default 500).
	EraseRate int
	// Cluster, when set, makes this region one of several (pins, leases,
	// replication, forwarding); nil runs a single region owning every range.
	Cluster *Cluster
	// Unsafe breaks guarantees on purpose, for the chaos suite's proof that its
	// checker can fail. Never set in a deployment.
	Unsafe Unsafe
	Clock  clock.Clock
	Logger *slog.Logger
}

// Unsafe lists the guarantees that can be switched off for testing the checker.
type Unsafe struct {
	// NoFence: aggregators replay from position 0 without the hwm fence or dedupe.
	NoFence bool
	// NoIdempotency: idempotency keys are ignored.
	NoIdempotency bool
	// NoLeaseCheck: the region writes any range its (possibly stale) pin table
	// gives it, ignoring lease freshness and notBefore.
	NoLeaseCheck bool
}

// ParseUnsafe parses a comma list of "fence", "idempotency", "lease".
func ParseUnsafe(list string) (Unsafe, error) {
	var u Unsafe
	if list == "" {
		return u, nil
	}
	for _, f := range strings.Split(list, ",") {
		switch f {
		case "fence":
			u.NoFence = true
		case "idempotency":
			u.NoIdempotency = true
		case "lease":
			u.NoLeaseCheck = true
		default:
			return u, fmt.Errorf("unknown guarantee %q (want fence, idempotency or lease)", f)
		}
	}
	return u, nil
}

// Any reports whether any guarantee is off.
func (u Unsafe) Any() bool { return u.NoFence || u.NoIdempotency || u.NoLeaseCheck }

// Region is one running region.
type Region struct {
	cfg      Config
	Store    *pebblestore.Store
	Service  *edge.Service
	Eraser   *edge.Eraser
	Counts   *counts.Reader
	Aggs     *pipeline.Group
	API      *api.Server
	Registry *prometheus.Registry

	cluster  *clusterParts
	regions  []string // every region whose watermark bounds asOf
	once     sync.Once
	closeErr error
}

// Open starts a region.
func Open(ctx context.Context, cfg Config) (*Region, error) {
	if cfg.Name == "" || cfg.DataDir == "" {
		return nil, errors.New("region: Config needs Name and DataDir")
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("region: Config needs Secret")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.UserRate == 0 {
		cfg.UserRate = 20
	}
	if cfg.UserBurst <= 0 {
		cfg.UserBurst = max(1, int(2*cfg.UserRate))
	}
	if cfg.IPBurst <= 0 {
		cfg.IPBurst = max(1, int(2*cfg.IPRate))
	}
	log := cfg.Logger.With("region", cfg.Name)
	if cfg.Unsafe.Any() {
		log.Warn("UNSAFE: guarantees are switched off for testing", "unsafe", fmt.Sprintf("%+v", cfg.Unsafe))
	}
	st, err := pebblestore.Open(pebblestore.Options{
		Dir: filepath.Join(cfg.DataDir, cfg.Name), Region: cfg.Name, Partitions: cfg.Partitions, Clock: cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	r := &Region{cfg: cfg, Store: st, Registry: prometheus.NewRegistry()}
	fail := func(err error) (*Region, error) {
		_ = r.Close()
		return nil, err
	}
	var authority edge.Authority = edge.StaticAuthority(1)
	var forwarder edge.Forwarder
	regions := []string{cfg.Name}
	if cfg.Cluster != nil {
		if r.cluster, err = startCluster(ctx, cfg.Name, cfg.Cluster, st, cfg.Clock, log); err != nil {
			return fail(err)
		}
		authority, forwarder = r.cluster.authority, r.cluster.forwarder
		if cfg.Unsafe.NoLeaseCheck {
			authority = noLeaseAuthority{a: r.cluster.authority, self: cfg.Name}
		}
		if len(cfg.Cluster.Regions) > 0 {
			regions = cfg.Cluster.Regions
		}
	}
	r.Service, err = edge.NewService(edge.ServiceConfig{
		Store: st, Overlay: inproc.NewOverlay(cfg.Clock, 30*time.Second), Clock: cfg.Clock,
		Authority: authority, Forwarder: forwarder, UnsafeNoIdempotency: cfg.Unsafe.NoIdempotency,
	})
	if err != nil {
		return fail(err)
	}
	if r.cluster != nil {
		r.cluster.serve(r.Service)
	}
	r.Aggs, err = pipeline.NewGroup(ctx, pipeline.Config{
		Region: cfg.Name, Log: st, Cells: st, Clock: cfg.Clock, Window: cfg.Window, UnsafeNoFence: cfg.Unsafe.NoFence,
		OnError: func(p uint32, err error) { log.Warn("aggregator window failed; retrying", "partition", p, "err", err) },
	})
	if err != nil {
		return fail(err)
	}
	r.Eraser, err = edge.NewEraser(ctx, edge.EraserConfig{
		Service: r.Service, Store: st, Jobs: st, Clock: cfg.Clock, Rate: cfg.EraseRate,
		OnError: func(err error) { log.Warn("erasure step failed; retrying", "err", err) },
	})
	if err != nil {
		return fail(err)
	}
	r.Counts, err = counts.NewReader(counts.Config{
		Store: st, Cache: inproc.NewCache(cfg.Clock, time.Minute), Clock: cfg.Clock, Regions: regions,
	})
	if err != nil {
		return fail(err)
	}
	var ipLimiter api.Limiter
	if cfg.IPRate > 0 {
		ipLimiter = inproc.NewLimiter(cfg.Clock, cfg.IPRate, cfg.IPBurst)
	}
	var userLimiter api.Limiter
	if cfg.UserRate > 0 {
		userLimiter = inproc.NewLimiter(cfg.Clock, cfg.UserRate, cfg.UserBurst)
	}
	r.regions = regions
	var userHome func(string) (bool, string, error)
	if r.cluster != nil {
		userHome = r.cluster.userHome
	}
	r.API, err = api.New(api.Config{
		Admin:    newAdmin(r),
		UserHome: userHome,
		Region:   cfg.Name, Service: r.Service, Eraser: r.Eraser, Store: st, Counts: r.Counts,
		Verifier:    auth.NewVerifier(cfg.Secret, cfg.Clock.Now),
		UserLimiter: userLimiter, IPLimiter: ipLimiter, MaxInFlightWrites: cfg.MaxInFlightWrites,
		Registry: r.Registry, Clock: cfg.Clock,
	})
	if err != nil {
		return fail(err)
	}
	r.registerPipelineMetrics()
	return r, nil
}

func (r *Region) registerPipelineMetrics() {
	r.Registry.MustRegister(
		collectors.NewGoCollector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "likes_aggregator_lag_events",
			Help: "Committed log events not yet folded into cells, summed over partitions.",
		}, func() float64 {
			var lag uint64
			for _, s := range r.Aggs.Stats() {
				if s.Head > s.Position {
					lag += s.Head - s.Position
				}
			}
			return float64(lag)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_branch_corrections_total",
			Help: "Correction events folded: older-epoch writes that arrived after an unplanned failover branched their edge (acknowledged writes overtaken; counts stay exact).",
		}, func() float64 {
			var n uint64
			for _, s := range r.Aggs.Stats() {
				n += s.Corrections
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "likes_count_staleness_seconds",
			Help: "Now minus this region's watermark (the asOf of a fresh count read).",
		}, func() float64 {
			wm, err := r.Store.Watermarks(context.Background())
			if err != nil {
				return -1
			}
			return r.cfg.Clock.Now().Sub(time.UnixMilli(wm[r.cfg.Name])).Seconds()
		}),
	)
}

// Name is the region's name.
func (r *Region) Name() string { return r.cfg.Name }

// Close stops the region. Idempotent.
func (r *Region) Close() error {
	r.once.Do(func() {
		var errs []error
		for _, c := range []interface{ Close() error }{r.Eraser, r.Aggs, r.Counts} {
			if c == nil || isNilCloser(c) {
				continue
			}
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if r.cluster != nil {
			r.cluster.close()
		}
		if r.Store != nil {
			if err := r.Store.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		r.closeErr = errors.Join(errs...)
		if r.closeErr != nil {
			r.closeErr = fmt.Errorf("region %s: close: %w", r.cfg.Name, r.closeErr)
		}
	})
	return r.closeErr
}

func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *edge.Eraser:
		return v == nil
	case *pipeline.Group:
		return v == nil
	case *counts.Reader:
		return v == nil
	case *pebblestore.Store:
		return v == nil
	}
	return false
}
