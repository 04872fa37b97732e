package region

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/store/cassandra"
	"github.com/likes-dev/likes/store/pebblestore"
	"github.com/likes-dev/likes/stream/kafkalog"
)

// Config configures one region.
type Config struct {
	// Name is the region's name (e.g. "us"). Required.
	Name string
	// DataDir holds the region's database. Required with the Pebble store.
	DataDir string
	// Partitions of the committed log (default 16; fixed at creation).
	Partitions int
	// Window is the aggregator commit interval (default 250ms).
	Window time.Duration
	// Secret verifies HS256 bearer tokens. Required unless Auth has public keys.
	Secret []byte
	// Auth configures token verification beyond Secret: public keys (EdDSA,
	// ES256), iss, aud, maximum lifetime, cache size. Its Now is the Clock's.
	Auth auth.Config
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
	// It needs the embedded default store and log (Engines).
	Cluster *Cluster
	// Engines chooses the backend of each role; the zero value is the
	// embedded default (Pebble, in-process log tailing, cache and limiters).
	Engines Engines
	// MinFreeBytes and MinFreeFraction are the Pebble store's low-disk
	// watermark (the larger applies; both zero: none): below it writes are
	// refused with 503 storage_unavailable and readiness fails, before the
	// disk is full.
	MinFreeBytes    uint64
	MinFreeFraction float64
	// ReconcileRate is how many items per second the background reconciler
	// recounts (default DefaultReconcileRate; negative: no background
	// reconciliation).
	ReconcileRate float64
	// Lifecycle is retention and the data folder's identity (identity.go).
	Lifecycle Lifecycle
	// Knobs are test-only switches and hooks (TestingKnobs); nil in a
	// deployment.
	Knobs  *TestingKnobs
	Clock  clock.Clock
	Logger *slog.Logger
	// Tracer makes the region's spans: HTTP requests, forwarding, the
	// erasure relay, replication pushes (default tracing.IDsOnly: trace ids
	// for the logs, nothing recorded).
	Tracer trace.TracerProvider
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

// TestingKnobs are the region's switches and hooks for tests only (the
// pattern of CockroachDB's testing knobs): out of Config's real fields, so a
// deployment's configuration cannot carry them by accident.
type TestingKnobs struct {
	// Unsafe breaks guarantees on purpose, for the chaos suite's proof that
	// its checker can fail (likesd --unsafe-break).
	Unsafe Unsafe
	// DiskFull, when it returns true, makes the Pebble store read its free
	// space as zero: it refuses writes as a full disk would make it, until
	// DiskFull returns false again (the chaos suite's disk-full nemesis).
	DiskFull func() bool
}

// knobs returns cfg's testing knobs, or none.
func (c *Config) knobs() TestingKnobs {
	if c.Knobs == nil {
		return TestingKnobs{}
	}
	return *c.Knobs
}

// Any reports whether any guarantee is off.
func (u Unsafe) Any() bool { return u.NoFence || u.NoIdempotency || u.NoLeaseCheck }

// Region is one running region.
type Region struct {
	cfg Config
	// Store is the embedded default's Pebble store (nil on other engines; the
	// roles are in Backend whatever the engine).
	Store *pebblestore.Store
	// Backend holds edges, jobs, the committed log and cells (Engines.Store).
	Backend Backend
	// Cassandra is the Cassandra store (Engines.Store "cassandra"), else nil.
	Cassandra *cassandra.Store
	// KafkaLog is what the aggregators read with Engines.Log "kafka", else nil.
	KafkaLog *kafkalog.Log
	// Relay publishes the store's log to Kafka (Engines.Log "kafka"), else nil.
	Relay *kafkalog.Relay
	// Redis serves the cache, overlay and limiters (Engines.Cache "redis"), else nil.
	Redis    *rediscache.Store
	Service  *edge.Service
	Eraser   *edge.Eraser
	Counts   *counts.Reader
	Aggs     *pipeline.Group
	API      *api.Server
	Registry *prometheus.Registry

	log        *slog.Logger
	session    *gocql.Session // Cassandra's, closed after the store
	aggLog     pipeline.Log   // what the aggregators read
	pcfg       pipeline.Config
	pmu        sync.Mutex // guards Aggs and Relay (stopped and restarted in tests)
	cellWrites atomic.Uint64
	recount    func(ctx context.Context, item string) (Recount, error)
	cluster    *clusterParts
	retainer   io.Closer  // the store's retention loop; nil: none (identity.go)
	assign     *assigner  // nil: this process folds and relays every partition (nodes.go)
	backup     backupGate // one online backup at a time (backup.go)
	identity   IdentityDecision
	regStates  map[string]epoch.RegionState // the registry at start (nil: none; registry.go)
	regions    []string                     // every region whose watermark bounds asOf
	recon      *reconciler
	reconM     *reconMetrics
	kafkaM     *kafkalog.ClientMetrics
	once       sync.Once
	closeErr   error

	// consoleMu guards consoleClosed: Close waits for a console read in
	// flight, and none starts after it (console.go).
	consoleMu     sync.RWMutex
	consoleClosed bool

	draining     atomic.Bool
	readyMu      sync.Mutex
	readyChecks  []ReadyCheck
	readyFailing map[string]bool
}

// storageReady fails while the store cannot write, so a load balancer sends
// writes elsewhere; reads still serve.
func (r *Region) storageReady(context.Context) error {
	if r.Store != nil {
		if h := r.Store.Health(); !h.Writable {
			return fmt.Errorf("%w: %s", edge.ErrStorageUnavailable, h.Reason)
		}
	}
	if r.Cassandra != nil {
		if ok, reason, _ := r.Cassandra.Health(); !ok {
			return fmt.Errorf("%w: %s", edge.ErrStorageUnavailable, reason)
		}
	}
	return r.relayFault()
}

// Engines is the region's engine choice, defaults filled in.
func (r *Region) Engines() Engines { return r.cfg.Engines }

// Name is the region's name.
func (r *Region) Name() string { return r.cfg.Name }

// Close stops the region. Idempotent.
func (r *Region) Close() error {
	r.once.Do(func() {
		r.consoleMu.Lock()
		r.consoleClosed = true
		r.consoleMu.Unlock()
		var errs []error
		add := func(err error) {
			if err != nil {
				errs = append(errs, err)
			}
		}
		if r.recon != nil {
			r.recon.Close()
		}
		if r.Eraser != nil {
			add(r.Eraser.Close())
		}
		if r.retainer != nil {
			add(r.retainer.Close())
		}
		if r.assign != nil {
			r.assign.Close() // before the aggregators and relay it restarts
		}
		r.stopAggregators()
		if r.Counts != nil {
			add(r.Counts.Close())
		}
		r.stopRelay()
		if r.KafkaLog != nil {
			add(r.KafkaLog.Close())
		}
		if r.cluster != nil {
			r.cluster.close()
		}
		if r.Backend != nil {
			add(r.Backend.Close())
		}
		if r.session != nil {
			r.session.Close()
		}
		if r.Redis != nil {
			add(r.Redis.Close())
		}
		r.closeErr = errors.Join(errs...)
		if r.closeErr != nil {
			r.closeErr = fmt.Errorf("region %s: close: %w", r.cfg.Name, r.closeErr)
		}
	})
	return r.closeErr
}

// sessionKeyOf is the key of Likes-Session tokens, the same in every region of
// a cluster: derived from the token signing secret, else from the gossip key
// (both shared cluster-wide and secret), else random (a region alone, whose
// tokens only it reads).
func sessionKeyOf(cfg Config) ([]byte, error) {
	var material []byte
	switch {
	case len(cfg.Secret) > 0:
		material = cfg.Secret
	case len(cfg.Auth.Secret) > 0:
		material = cfg.Auth.Secret
	case cfg.Cluster != nil && len(cfg.Cluster.GossipKey) > 0:
		material = cfg.Cluster.GossipKey
	default:
		material = make([]byte, 32)
		if _, err := rand.Read(material); err != nil {
			return nil, err
		}
	}
	m := hmac.New(sha256.New, material)
	m.Write([]byte("likes session token key v1"))
	return m.Sum(nil), nil
}
