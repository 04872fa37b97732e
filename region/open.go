package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/buildinfo"
	"github.com/likes-dev/likes/internal/tracing"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/stream/kafkalog"
)

// Open starts a region: it validates cfg, then opens its subsystems in
// dependency order, each in its own step below (store, caches, cluster,
// write path, log and aggregators, eraser, count reader, API, metrics). A
// failing step closes what the earlier ones opened. ctx bounds the setup
// only; every loop runs until Close.
func Open(ctx context.Context, cfg Config) (*Region, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("region", cfg.Name)
	if u := cfg.knobs().Unsafe; u.Any() {
		log.Warn("UNSAFE: guarantees are switched off for testing", "unsafe", fmt.Sprintf("%+v", u))
	}
	r := &Region{cfg: cfg, log: log, Registry: prometheus.NewRegistry(), reconM: newReconMetrics(), kafkaM: kafkalog.NewClientMetrics()}
	if err := r.checkDataFolder(ctx); err != nil {
		return nil, err
	}
	if err := r.openStore(ctx); err != nil {
		return nil, err // openStore closes what it opened
	}
	if err := r.checkKeyspace(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	if err := r.startRebuild(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	if err := r.raiseRebuildBase(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	o := &opening{r: r, cfg: cfg, log: log, authority: edge.StaticAuthority(1), regions: []string{cfg.Name}}
	for _, step := range []func(context.Context) error{
		o.openCaches, o.joinCluster, o.openWritePath, o.startPipeline, o.startRetention, o.startEraser, o.openCounts, o.openAPI,
	} {
		if err := step(ctx); err != nil {
			_ = r.Close()
			return nil, err
		}
	}
	o.registerMetrics()
	r.startReconciler()
	return r, nil
}

// withDefaults validates cfg and fills its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		return cfg, errors.New("region: Config needs Name")
	}
	if len(cfg.Secret) == 0 && len(cfg.Auth.Secret) == 0 && len(cfg.Auth.PublicKeys) == 0 {
		return cfg, errors.New("region: Config needs Secret or Auth.PublicKeys")
	}
	if err := cfg.Engines.normalize(cfg.Name, cfg.Cluster != nil && !cfg.Cluster.Peerless(cfg.Name)); err != nil {
		return cfg, err
	}
	if c := cfg.Cluster; c != nil && c.Node != "" {
		if err := etcdepoch.ValidNode(c.Node); err != nil {
			return cfg, fmt.Errorf("region: %w", err)
		}
		if cfg.Engines.Store != StoreCassandra {
			return cfg, fmt.Errorf("region: node %q: several nodes per region need the Cassandra store (--store cassandra); a region on the embedded store is one process", c.Node)
		}
	}
	if cfg.DataDir == "" && cfg.Engines.Store == StorePebble {
		return cfg, errors.New("region: Config needs DataDir (the Pebble store's folder)")
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tracer == nil {
		cfg.Tracer = tracing.IDsOnly()
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
	return cfg, nil
}

// opening is what Open's steps hand each other.
type opening struct {
	r         *Region
	cfg       Config
	log       *slog.Logger
	caches    caching
	authority edge.Authority
	forwarder edge.Forwarder
	regions   []string // every region whose watermark bounds asOf
}

// openCaches opens the count cache, the overlay and the limiters (Engines.Cache).
func (o *opening) openCaches(context.Context) error {
	var err error
	o.caches, err = openCaching(o.cfg)
	o.r.Redis = o.caches.redis
	return err
}

// joinCluster starts leases, pins, the controller, replication and
// forwarding (Config.Cluster); without one the region owns every range.
func (o *opening) joinCluster(ctx context.Context) error {
	cfg, r := o.cfg, o.r
	if cfg.Cluster == nil {
		return nil
	}
	// Replication ships the store's own log and cells (Pebble or Cassandra,
	// whichever log the aggregators read). A peerless region on Cassandra
	// takes only its write authority from etcd, as before.
	var replica replicaStore
	switch {
	case r.Store != nil:
		replica = r.Store
	case r.Cassandra != nil && !cfg.Cluster.Peerless(cfg.Name):
		replica = r.Cassandra
	}
	var err error
	cc := *cfg.Cluster
	cc.tracer = cfg.Tracer
	cc.storeRequest = cfg.Engines.Cassandra.Timeout
	if r.cluster, err = startCluster(ctx, cfg.Name, &cc, replica, cfg.Clock, o.log); err != nil {
		return err
	}
	o.authority = r.cluster.authority
	if r.cluster.forwarder != nil {
		o.forwarder = r.cluster.forwarder
	}
	if cfg.knobs().Unsafe.NoLeaseCheck {
		o.authority = noLeaseAuthority{a: r.cluster.authority, self: cfg.Name}
	}
	if len(cfg.Cluster.Regions) > 0 {
		o.regions = cfg.Cluster.Regions
	}
	return nil
}

// openWritePath builds the edge service over the store and the authority,
// and lets the cluster's gRPC services serve it.
func (o *opening) openWritePath(context.Context) error {
	cfg, r := o.cfg, o.r
	var writes edge.Store = r.Backend
	if cfg.Engines.Log == LogKafka {
		writes = kickingStore{Backend: r.Backend, r: r}
	}
	var err error
	r.Service, err = edge.NewService(edge.ServiceConfig{
		Store: writes, Overlay: o.caches.overlay, Clock: cfg.Clock,
		Authority: o.authority, Forwarder: o.forwarder,
		Knobs: &edge.TestingKnobs{NoIdempotency: cfg.knobs().Unsafe.NoIdempotency},
	})
	if err != nil {
		return err
	}
	if r.cluster != nil {
		r.cluster.serve(r.Service)
	}
	return nil
}

// startPipeline opens the log the aggregators read (the store's, or Kafka
// with its relay) and starts the aggregators.
func (o *opening) startPipeline(ctx context.Context) error {
	cfg, r, log := o.cfg, o.r, o.log
	if c := r.cluster; c != nil && c.nodes != nil {
		r.assign = newAssigner(r, c.nodes) // this node's share, before the relay and aggregators start
	}
	if err := r.openLog(ctx); err != nil {
		return err
	}
	r.pcfg = pipeline.Config{
		Region: cfg.Name, Log: r.aggLog, Cells: countCells(r.Backend, &r.cellWrites), Clock: cfg.Clock,
		Window: cfg.Window, Knobs: &pipeline.TestingKnobs{NoFence: cfg.knobs().Unsafe.NoFence},
		OnError: func(p uint32, err error) {
			if errors.Is(err, edge.ErrStorageUnavailable) {
				return // the store logs its state changes once; not every window
			}
			log.Warn("aggregator window failed; retrying", "partition", p, "err", err)
		},
		Partitions: r.ownedParts(),
	}
	if err := r.startAggregators(ctx); err != nil {
		return err
	}
	if r.assign != nil {
		r.assign.start()
	}
	return nil
}

// startEraser starts the account-erasure worker.
func (o *opening) startEraser(ctx context.Context) error {
	cfg, r, log := o.cfg, o.r, o.log
	var err error
	var active func() bool
	if c := r.cluster; c != nil && c.nodes != nil {
		active = c.erasing.Load // the node elected to run erasures (nodes.go)
	}
	r.Eraser, err = edge.NewEraser(ctx, edge.EraserConfig{
		Service: r.Service, Store: r.Backend, Jobs: r.Backend, Clock: cfg.Clock, Rate: cfg.EraseRate, Active: active,
		OnError: func(err error) {
			if !errors.Is(err, edge.ErrStorageUnavailable) {
				log.Warn("erasure step failed; retrying", "err", err)
			}
		},
	})
	if err != nil {
		return err
	}
	if r.cluster != nil {
		r.cluster.eraser.Store(r.Eraser)
	}
	return nil
}

// openCounts starts the count reader over every region's cells.
func (o *opening) openCounts(context.Context) error {
	var err error
	var skip func(string) bool
	if c := o.r.cluster; c != nil && c.registry != nil {
		skip = c.registry.Retired
	}
	o.r.Counts, err = counts.NewReader(counts.Config{
		Store: o.r.Backend, Cache: o.caches.cache, Clock: o.cfg.Clock, Regions: o.regions, Skip: skip,
	})
	o.r.regions = o.regions
	return err
}

// openAPI adds the readiness checks and builds the HTTP API.
func (o *opening) openAPI(context.Context) error {
	cfg, r := o.cfg, o.r
	var home func(string) (string, bool, error)
	var relay api.ErasureRelay
	var owner api.OwnerReader
	if r.cluster != nil {
		home = r.cluster.home
		if r.cluster.forwarder != nil {
			relay, owner = r.cluster.forwarder, r.cluster.forwarder
		}
	}
	sessionKey, err := sessionKeyOf(cfg)
	if err != nil {
		return err
	}
	verifier, err := newVerifier(cfg)
	if err != nil {
		return err
	}
	r.AddReadyCheck("draining", func(context.Context) error {
		if r.draining.Load() {
			return errDraining
		}
		return nil
	})
	r.addClusterReadiness()
	r.AddReadyCheck("storage", r.storageReady)
	r.AddReadyCheck("aggregators", func(context.Context) error {
		if r.aggStats() == nil {
			return errAggregatorsStopped
		}
		return nil
	})
	r.API, err = api.New(api.Config{
		Ready: r.Ready,
		Admin: newAdmin(r),
		Home:  home, Relay: relay, Owner: owner, SessionKey: sessionKey,
		Region: cfg.Name, Service: r.Service, Eraser: r.Eraser, Store: r.Backend, Counts: r.Counts,
		Verifier:    verifier,
		UserLimiter: o.caches.user, IPLimiter: o.caches.ip, MaxInFlightWrites: cfg.MaxInFlightWrites,
		Registry: r.Registry, Clock: cfg.Clock, Tracer: cfg.Tracer, Logger: o.log,
	})
	return err
}

// registerMetrics registers the region's own gauges and counters.
func (o *opening) registerMetrics() {
	r := o.r
	bi := buildinfo.Get()
	rev := bi.Revision
	if bi.Modified {
		rev += "+modified"
	}
	r.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "likes_build_info",
		Help:        "Always 1; the labels name the running build (to join with other series, and to see a rolling upgrade's progress).",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": rev, "goversion": bi.GoVersion, "region": o.cfg.Name},
	}, func() float64 { return 1 }))
	r.registerPipelineMetrics()
	r.registerStorageMetrics()
	r.registerClusterMetrics()
	r.Registry.MustRegister(r.reconM.collectors()...)
	if e := o.cfg.Engines; e.Store != StorePebble || e.Log != LogStore || e.Cache != CacheInproc {
		o.log.Info("region engines", "engines", e.String())
	}
}
