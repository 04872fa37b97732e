package region

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/gocql/gocql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/cache/inproc"
	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/store/cassandra"
	"github.com/likes-dev/likes/store/pebblestore"
	"github.com/likes-dev/likes/stream/kafkalog"
)

// Engine names (Engines.Store, Engines.Log, Engines.Cache).
const (
	StorePebble    = "pebble"
	StoreCassandra = "cassandra"
	LogStore       = "store"
	LogKafka       = "kafka"
	CacheInproc    = "inproc"
	CacheRedis     = "redis"
)

// Engines chooses the backend of each role of a region (DESIGN section 7). The
// zero value is the embedded default: Pebble under DataDir for edges, the
// committed log and cells; the aggregators tail that log in process; the count
// cache, session overlay and rate limiters are in process. Every other choice
// implements the same contracts (edge/edgetest, pipeline/pipelinetest,
// cache/cachetest).
//
// The roles are independent:
//
//   - Store "cassandra": edges, idempotency records, erasure jobs, the
//     committed log (an outbox) and cells live in a Cassandra keyspace (created
//     beforehand by `likectl migrate --keyspace K`; Open checks the schema).
//   - Log "kafka": a kafkalog.Relay publishes the store's committed log to a
//     Kafka topic with the same partitions, and the aggregators read that topic
//     (kafkalog.Log); cells, dedupe state and positions stay in the store. A
//     region's cell positions are then Kafka offsets, so the log choice is fixed
//     when the region's cells are created: switching an existing region between
//     "store" and "kafka" needs fresh cells.
//   - Cache "redis": the count cache, the session overlay and the user and IP
//     limiters are in Redis (rediscache). A dead Redis degrades to the store.
//
// A multi-region Cluster works on every engine, and may mix them: replication
// ships the store's own log (the outbox on Cassandra) and cells, and applies
// peers' events through edge.ApplyRemoteEvent, on Pebble or on Cassandra
// (both pass edgetest.RunReplica), whether the aggregators read the store's
// log or Kafka (then a region's cell positions are Kafka offsets: a cell's
// single writer still only moves its hwm forward, which is all a peer's merge
// needs). A peerless Cluster (Cluster.Peerless) takes its pins, epochs and
// lease from etcd and replicates with nobody.
type Engines struct {
	// Store is "pebble" (default) or "cassandra".
	Store string
	// Cassandra configures Store "cassandra".
	Cassandra CassandraEngine
	// Log is what the aggregators read: "store" (default, the store's own log)
	// or "kafka".
	Log string
	// Kafka configures Log "kafka".
	Kafka KafkaEngine
	// Cache is "inproc" (default) or "redis".
	Cache string
	// Redis configures Cache "redis": Addr is required; Prefix defaults to
	// "likes:" + region + ":" (so regions may share one Redis); the rest take
	// rediscache's defaults (100ms per call, cache TTL 1m, overlay TTL 30s).
	Redis rediscache.Config
}

// CassandraEngine configures the Cassandra store.
type CassandraEngine struct {
	// Hosts are contact points, host[:port] (required).
	Hosts []string
	// Keyspace is the region's keyspace (default "likes_" + region name, which
	// must then be a valid keyspace name).
	Keyspace string
	// Consistency of ordinary reads and writes: "LOCAL_QUORUM" (default),
	// "QUORUM", "ONE", "LOCAL_ONE", "ALL", …
	Consistency string
	// Serial is the lightweight transactions' consistency: "SERIAL" (default)
	// or "LOCAL_SERIAL".
	Serial string
	// LocalDC, when set, routes requests to that datacenter first.
	LocalDC string
	// Username and Password authenticate when Username is set.
	Username, Password string
	// TLS, when set, encrypts every connection (the server's name verified).
	TLS *tls.Config
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
	// SequenceGroups is how many sequence groups a keyspace this region
	// creates gets (cassandra.Options.SequenceGroups). 0: one when the
	// region is one process (Cluster.Node empty), so one transaction issues
	// the positions of every log partition; one per log partition when it
	// may run on several nodes (Cluster.Node set), since nodes appending to
	// one group contend on its Cassandra partition (BENCHMARKS.md: two
	// nodes on one group wrote 0.45–0.7 times as fast as on one group each).
	// Fixed when the region's store row is created; ignored afterwards.
	SequenceGroups int
}

// KafkaEngine configures the Kafka log.
type KafkaEngine struct {
	// Brokers are seed brokers, host:port (required).
	Brokers []string
	// Topic is the region's log topic (default "likes." + region + ".log"); its
	// dead-letter topic is Topic + ".dlq".
	Topic string
	// ReplicationFactor of topics the region creates (default 1; 3 in
	// production, with min.insync.replicas=2).
	ReplicationFactor int16
	// TLS, when set, encrypts every broker connection.
	TLS *tls.Config
	// PollInterval is how often the relay looks at a log partition nobody
	// wrote to (default 100ms: the region wakes a partition's relay as soon as
	// a write appends to it, so polling only carries idle watermarks and
	// events of other processes); HeartbeatInterval bounds how often an idle
	// partition's watermark is published (default 250ms).
	PollInterval, HeartbeatInterval time.Duration
	// Linger is the least time between two looks at one partition when
	// writes wake its relay (default 50ms; negative: none), so that a busy
	// partition's events go to Kafka in one store read and one produce per
	// linger rather than one per write (kafkalog.Config.Linger). It adds at
	// most that much to staleness.
	Linger time.Duration
}

// normalize fills the defaults in and checks the combination.
func (e *Engines) normalize(region string, cluster bool) error {
	if e.Store == "" {
		e.Store = StorePebble
	}
	if e.Log == "" {
		e.Log = LogStore
	}
	if e.Cache == "" {
		e.Cache = CacheInproc
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch e.Store {
	case StorePebble:
		if c := e.Cassandra; len(c.Hosts) > 0 || c.Keyspace != "" {
			bad("Cassandra hosts/keyspace are set but Store is %q (set Store %q)", e.Store, StoreCassandra)
		}
	case StoreCassandra:
		c := &e.Cassandra
		if len(c.Hosts) == 0 {
			bad("Store %q needs Cassandra.Hosts", StoreCassandra)
		}
		if c.Keyspace == "" {
			c.Keyspace = "likes_" + region
		}
		if !cassandra.ValidKeyspace(c.Keyspace) {
			bad("invalid Cassandra keyspace %q (letters, digits and '_', starting with a letter, at most 48)", c.Keyspace)
		}
		if c.Consistency == "" {
			c.Consistency = "LOCAL_QUORUM"
		}
		if _, err := gocql.ParseConsistencyWrapper(c.Consistency); err != nil {
			bad("Cassandra consistency %q: %v", c.Consistency, err)
		}
		if c.Serial == "" {
			c.Serial = "SERIAL"
		}
		if _, err := parseSerial(c.Serial); err != nil {
			bad("%v", err)
		}
		if c.Timeout < 0 {
			bad("Cassandra timeout must not be negative, got %v", c.Timeout)
		}
	default:
		bad("unknown Store %q (want %q or %q)", e.Store, StorePebble, StoreCassandra)
	}
	switch e.Log {
	case LogStore:
		if len(e.Kafka.Brokers) > 0 || e.Kafka.Topic != "" {
			bad("Kafka brokers/topic are set but Log is %q (set Log %q)", e.Log, LogKafka)
		}
	case LogKafka:
		k := &e.Kafka
		if len(k.Brokers) == 0 {
			bad("Log %q needs Kafka.Brokers", LogKafka)
		}
		if k.Topic == "" {
			k.Topic = "likes." + region + ".log"
		}
		if k.HeartbeatInterval == 0 {
			k.HeartbeatInterval = 250 * time.Millisecond
		}
		if k.PollInterval == 0 {
			k.PollInterval = 100 * time.Millisecond
		}
		switch {
		case k.Linger == 0:
			k.Linger = 50 * time.Millisecond
		case k.Linger < 0:
			k.Linger = 0
		case k.Linger > time.Second:
			bad("Kafka linger must be at most 1s, got %v", k.Linger)
		}
	default:
		bad("unknown Log %q (want %q or %q)", e.Log, LogStore, LogKafka)
	}
	switch e.Cache {
	case CacheInproc:
		if e.Redis.Addr != "" {
			bad("Redis address is set but Cache is %q (set Cache %q)", e.Cache, CacheRedis)
		}
	case CacheRedis:
		if strings.TrimSpace(e.Redis.Addr) == "" {
			bad("Cache %q needs Redis.Addr", CacheRedis)
		}
		if e.Redis.Prefix == "" {
			e.Redis.Prefix = "likes:" + region + ":"
		}
	default:
		bad("unknown Cache %q (want %q or %q)", e.Cache, CacheInproc, CacheRedis)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("region: Engines: %w", err)
	}
	return nil
}

// Validate checks an Engines choice for a region named region (cluster: the
// region is one of several; every engine may be, so it changes nothing now),
// filling the defaults in.
func (e *Engines) Validate(region string, cluster bool) error { return e.normalize(region, cluster) }

// String describes the choice, e.g. "store=cassandra(likes_us) log=kafka(likes.us.log) cache=redis".
func (e Engines) String() string {
	s := "store=" + e.Store
	if e.Store == StoreCassandra {
		s += "(" + e.Cassandra.Keyspace + ")"
	}
	s += " log=" + e.Log
	if e.Log == LogKafka {
		s += "(" + e.Kafka.Topic + ")"
	}
	return s + " cache=" + e.Cache
}

func parseSerial(s string) (gocql.SerialConsistency, error) {
	switch strings.ToUpper(s) {
	case "SERIAL":
		return gocql.Serial, nil
	case "LOCAL_SERIAL":
		return gocql.LocalSerial, nil
	}
	return 0, fmt.Errorf("serial consistency %q: want SERIAL or LOCAL_SERIAL", s)
}

// Backend is what a region needs of its store, whichever engine holds it:
// edges and jobs, the committed log, cells and counts, and healing.
type Backend interface {
	edge.Store
	edge.JobStore
	pipeline.Log
	pipeline.CellStore
	counts.CountStore
	// Heal appends a reconcile event carrying delta for item to the log.
	Heal(ctx context.Context, item string, delta int64) error
	// Items lists up to limit items after `after`, in the store's order.
	Items(ctx context.Context, after string, limit int) ([]string, error)
	Close() error
}

var (
	_ Backend = (*pebblestore.Store)(nil)
	_ Backend = (*cassandra.Store)(nil)
)

// openStore opens the region's store and sets r.Backend, r.recount and, on
// the embedded default, r.Store; on Cassandra, r.Cassandra and the session.
func (r *Region) openStore(ctx context.Context) error {
	cfg := r.cfg
	switch cfg.Engines.Store {
	case StoreCassandra:
		c := cfg.Engines.Cassandra
		cons, _ := gocql.ParseConsistencyWrapper(c.Consistency)
		serial, _ := parseSerial(c.Serial)
		sess, err := cassandra.Connect(cassandra.SessionConfig{
			Hosts: c.Hosts, Timeout: c.Timeout, LocalDC: c.LocalDC, Username: c.Username, Password: c.Password,
			TLS: c.TLS,
		})
		if err != nil {
			return err
		}
		st, err := cassandra.Open(ctx, cassandra.Options{
			Session: sess, Keyspace: c.Keyspace, Region: cfg.Name, Partitions: cfg.Partitions, Clock: cfg.Clock,
			Consistency: cons, Serial: serial, IssueEvery: cassandraIssueEvery,
			ForeignPositions: cfg.Engines.Log == LogKafka, SequenceGroups: sequenceGroups(cfg),
			OnError: func(err error) { r.log.Warn("cassandra background work failed; retrying", "err", err) },
			Logger:  r.log,
		})
		if errors.Is(err, cassandra.ErrOtherKeyspace) {
			sess.Close()
			return fmt.Errorf("%w: %w", ErrIdentity, err)
		}
		if err != nil {
			sess.Close()
			return fmt.Errorf("region: open Cassandra keyspace %s (create it with `likectl migrate --hosts %s --keyspace %s`): %w",
				c.Keyspace, strings.Join(c.Hosts, ","), c.Keyspace, err)
		}
		r.session, r.Cassandra, r.Backend = sess, st, st
		r.recount = func(ctx context.Context, item string) (Recount, error) {
			rc, err := st.RecountItem(ctx, item)
			return Recount{Item: rc.Item, Liked: rc.Liked, Cells: rc.Cells, Mismatch: rc.Liked - rc.Cells}, err
		}
	default:
		po := pebblestore.Options{
			Dir: filepath.Join(cfg.DataDir, cfg.Name), Region: cfg.Name, Partitions: cfg.Partitions, Clock: cfg.Clock,
			MinFreeBytes: cfg.MinFreeBytes, MinFreeFraction: cfg.MinFreeFraction, Logger: r.log,
			ForeignPositions: cfg.Engines.Log == LogKafka,
		}
		if full := cfg.knobs().DiskFull; full != nil {
			po.MinFreeBytes = max(po.MinFreeBytes, 1)
			po.FreeSpace = func() (uint64, uint64, error) {
				du, err := vfs.Default.GetDiskUsage(po.Dir)
				if full() {
					return 0, du.TotalBytes, nil
				}
				return du.AvailBytes, du.TotalBytes, err
			}
		}
		st, err := pebblestore.Open(po)
		if err != nil {
			return err
		}
		r.Store, r.Backend, r.recount = st, st, st.RecountItem
	}
	return nil
}

// cassandraIssueEvery is how often a reader of an idle Cassandra log
// partition records its watermark with a lightweight transaction. The store's
// default (50ms) costs 20 LWTs per second per partition while the relay polls;
// on a small Cassandra that alone took over a core for 16 idle partitions.
const cassandraIssueEvery = 200 * time.Millisecond

// kickingStore wakes the relay of the partition a write appended an event to,
// so the relay publishes it at once instead of at its next poll.
type kickingStore struct {
	Backend
	r *Region
}

// relayRefuseAfter is how long the relay's produces must have failed (the
// broker refuses writes) before the region refuses writes too: a short broker
// blip only delays counts (the store's log holds the events), a long one
// would grow the unpublished backlog without bound.
const relayRefuseAfter = 5 * time.Second

// relayFault says why writes are refused because Kafka refuses the relay's
// writes, or nil.
func (r *Region) relayFault() error {
	r.pmu.Lock()
	rl := r.Relay
	r.pmu.Unlock()
	if rl == nil {
		return nil
	}
	since, failing := rl.StuckSince()
	// The relay stamps its produces with the wall clock, so they are aged by it.
	if !failing || time.Since(since) < relayRefuseAfter {
		return nil
	}
	return fmt.Errorf("%w: Kafka has refused or not acknowledged the relay's writes since %s", edge.ErrStorageUnavailable, since.Format(time.RFC3339))
}

func (k kickingStore) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	if err := k.r.relayFault(); err != nil {
		return edge.Decision{}, err
	}
	d, err := k.Backend.Apply(ctx, req)
	if err == nil && d.Event != nil {
		k.r.pmu.Lock()
		rl := k.r.Relay
		k.r.pmu.Unlock()
		if rl != nil {
			rl.Kick(edge.PartitionOf(req.Item, edge.BucketOf(req.User), k.Backend.Partitions()))
		}
	}
	return d, err
}

// openLog opens what the aggregators read: the store's own log, or the Kafka
// topic with the relay that fills it from the store's log.
func (r *Region) openLog(ctx context.Context) error {
	if r.cfg.Engines.Log != LogKafka {
		r.aggLog = r.Backend
		return nil
	}
	if err := r.openKafkaLog(ctx); err != nil {
		return err
	}
	r.aggLog = r.KafkaLog
	return r.startRelay(ctx)
}

// openKafkaLog opens the Kafka topic the aggregators read (once: a rebuild
// opens it before the pipeline, raiseRebuildBase).
func (r *Region) openKafkaLog(ctx context.Context) error {
	if r.KafkaLog != nil {
		return nil
	}
	kc := r.kafkaConfig()
	l, err := kafkalog.NewLog(ctx, kc)
	if err != nil {
		return fmt.Errorf("region: Kafka log %s at %s: %w", kc.Topic, strings.Join(kc.Brokers, ","), err)
	}
	r.KafkaLog = l
	return nil
}

func (r *Region) kafkaConfig() kafkalog.Config {
	k := r.cfg.Engines.Kafka
	return kafkalog.Config{
		Brokers: k.Brokers, Topic: k.Topic, Partitions: r.Backend.Partitions(), ReplicationFactor: k.ReplicationFactor,
		RelayPartitions: r.ownedParts(),
		PositionBase:    r.identity.Identity.PositionBase,
		ClientID:        "likes-" + r.cfg.Name,
		PollInterval:    k.PollInterval, HeartbeatInterval: k.HeartbeatInterval, Linger: k.Linger,
		Opts:    append(kafkaTLS(k.TLS), r.kafkaM.Opt()),
		OnError: func(p uint32, err error) { r.log.Warn("kafka relay failed; retrying", "partition", p, "err", err) },
		OnPoison: func(p uint32, off int64, err error) {
			r.log.Error("kafka log: undecodable record parked in the dead-letter topic", "partition", p, "offset", off, "err", err)
		},
	}
}

// startRelay starts the outbox → Kafka relay (Log "kafka").
func (r *Region) startRelay(ctx context.Context) error {
	rl, err := kafkalog.NewRelay(ctx, r.kafkaConfig(), r.Backend)
	if err != nil {
		return fmt.Errorf("region: Kafka relay: %w", err)
	}
	r.pmu.Lock()
	r.Relay = rl
	r.pmu.Unlock()
	return nil
}

// stopRelay closes the relay at once (a produce in flight may or may not have
// landed, as in a crash; its restart resumes from what Kafka holds).
func (r *Region) stopRelay() {
	r.pmu.Lock()
	rl := r.Relay
	r.Relay = nil
	r.pmu.Unlock()
	if rl != nil {
		_ = rl.Close()
	}
}

// startAggregators starts the aggregator group; it resumes every partition
// from the position committed in the store.
func (r *Region) startAggregators(ctx context.Context) error {
	r.pmu.Lock()
	pcfg := r.pcfg
	r.pmu.Unlock()
	g, err := pipeline.NewGroup(ctx, pcfg)
	if err != nil {
		return err
	}
	r.pmu.Lock()
	r.Aggs = g
	r.pmu.Unlock()
	return nil
}

// stopAggregators closes the aggregator group at once: windows in flight are
// canceled mid-commit, as in a crash (a Cassandra window may be half written;
// the fence makes its replay add nothing twice).
func (r *Region) stopAggregators() {
	r.pmu.Lock()
	g := r.Aggs
	r.Aggs = nil
	r.pmu.Unlock()
	if g != nil {
		_ = g.Close()
	}
}

// aggStats returns the aggregators' statistics (none while they are stopped).
func (r *Region) aggStats() []pipeline.Stats {
	r.pmu.Lock()
	g := r.Aggs
	r.pmu.Unlock()
	if g == nil {
		return nil
	}
	return g.Stats()
}

// aggregatorLag is how many committed log events the aggregators have not
// folded yet, summed over partitions (on the store's log: head − position).
// On Kafka the head also counts the relay's watermark heartbeats, which the
// aggregators skip without moving their position, so the events past each
// position are counted by reading them (up to lagProbe per partition, then
// head − position as an upper bound).
func (r *Region) aggregatorLag(ctx context.Context) (uint64, error) {
	const lagProbe = 1000
	var lag uint64
	for _, s := range r.aggStats() {
		p := s.Partition
		if s.Head <= s.Position {
			continue
		}
		if r.cfg.Engines.Log != LogKafka {
			lag += s.Head - s.Position
			continue
		}
		evs, head, err := r.aggLog.Read(ctx, uint32(p), s.Position, lagProbe)
		if err != nil {
			return 0, err
		}
		lag += uint64(len(evs))
		if len(evs) == lagProbe && head.Pos > evs[len(evs)-1].Pos {
			lag += head.Pos - evs[len(evs)-1].Pos
		}
	}
	return lag, nil
}

// CellWrites is the number of cell writes the aggregators have committed
// (one per touched cell per window): the write amplification of counting.
func (r *Region) CellWrites() uint64 { return r.cellWrites.Load() }

// countingCells counts the cells of every committed window.
type countingCells struct {
	pipeline.CellStore
	n *atomic.Uint64
}

func (c countingCells) Commit(ctx context.Context, w pipeline.Window) error {
	err := c.CellStore.Commit(ctx, w)
	if err == nil {
		c.n.Add(uint64(len(w.Cells)))
	}
	return err
}

// sequenceGroups is the layout a keyspace this region creates gets
// (CassandraEngine.SequenceGroups).
func sequenceGroups(cfg Config) int {
	switch {
	case cfg.Engines.Cassandra.SequenceGroups > 0:
		return cfg.Engines.Cassandra.SequenceGroups
	case cfg.Cluster != nil && cfg.Cluster.Node != "":
		return cfg.Partitions
	default:
		return 1
	}
}

// countingBaseCells is countingCells over a store that reads a window's
// base in one call (pipeline.BaseReader): the wrapper must not hide it.
type countingBaseCells struct {
	countingCells
	pipeline.BaseReader
}

// countCells wraps cs so that committed cell writes are counted in n.
func countCells(cs pipeline.CellStore, n *atomic.Uint64) pipeline.CellStore {
	c := countingCells{CellStore: cs, n: n}
	if br, ok := cs.(pipeline.BaseReader); ok {
		return countingBaseCells{c, br}
	}
	return c
}

// caching is the count cache, session overlay and limiters of a region.
type caching struct {
	cache    counts.Cache
	overlay  edge.Overlay
	user, ip api.Limiter
	redis    *rediscache.Store
}

func openCaching(cfg Config) (caching, error) {
	var c caching
	if cfg.Engines.Cache != CacheRedis {
		c.cache, c.overlay = inproc.NewCache(cfg.Clock, time.Minute), inproc.NewOverlay(cfg.Clock, 30*time.Second)
		if cfg.IPRate > 0 {
			c.ip = inproc.NewLimiter(cfg.Clock, cfg.IPRate, cfg.IPBurst)
		}
		if cfg.UserRate > 0 {
			c.user = inproc.NewLimiter(cfg.Clock, cfg.UserRate, cfg.UserBurst)
		}
		return c, nil
	}
	rc := cfg.Engines.Redis
	s, err := rediscache.Open(rc)
	if err != nil {
		return c, fmt.Errorf("region: Redis: %w", err)
	}
	c.redis, c.cache, c.overlay = s, s.Cache(), s.Overlay()
	// A fake clock (tests) drives the buckets; otherwise Redis's own clock does,
	// so processes sharing a bucket agree.
	var lclk clock.Clock
	if _, real := cfg.Clock.(clock.Real); !real {
		lclk = cfg.Clock
	}
	if cfg.IPRate > 0 {
		if c.ip, err = s.Limiter(rediscache.LimiterConfig{Name: "ip", Rate: cfg.IPRate, Burst: cfg.IPBurst, Clock: lclk}); err != nil {
			_ = s.Close()
			return c, err
		}
	}
	if cfg.UserRate > 0 {
		if c.user, err = s.Limiter(rediscache.LimiterConfig{Name: "user", Rate: cfg.UserRate, Burst: cfg.UserBurst, Clock: lclk}); err != nil {
			_ = s.Close()
			return c, err
		}
	}
	return c, nil
}

// kafkaTLS is the franz-go option that dials brokers over TLS, if any.
func kafkaTLS(c *tls.Config) []kgo.Opt {
	if c == nil {
		return nil
	}
	return []kgo.Opt{kgo.DialTLSConfig(c.Clone())}
}
