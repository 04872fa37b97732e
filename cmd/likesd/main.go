// Command likesd runs likes regions.
//
//	likesd dev [--regions us,eu,ap] [--http-port 8080] [--data ./likes-data]
//	likesd run --region us --regions us,eu,ap --etcd http://127.0.0.1:2379 [...]
//	likesd run --region us --store cassandra --cassandra 127.0.0.1:9042 --log kafka --kafka 127.0.0.1:9092 --cache redis --redis 127.0.0.1:6379
//	likesd etcd [--client-port 2379] [--data ./likes-data/etcd]
//
// dev starts every region of the embedded default (Pebble per region, one
// embedded etcd, no servers) on loopback in one process. Ctrl-C shuts down
// cleanly; a restart on the same --data keeps every acknowledged like.
//
// run starts one region. With --etcd it joins a multi-region cluster (pins,
// leases, replication; embedded default store and log only), or, on the
// production engines, takes its write authority (pins, lease) from etcd alone. Without --etcd
// it runs standalone, owning every user range; the production engines are
// chosen by flags: --store cassandra (edges, log, cells in a keyspace created
// by `likectl migrate`), --log kafka (a relay publishes the log to a topic the
// aggregators read), --cache redis (count cache, overlay, rate limits).
//
// Every command takes --config FILE.yaml (keys: its flag names) and a
// LIKES_<FLAG> variable per flag; precedence flag > env > file > default
// (config.go). Each command parses into a plan that validates everything
// before anything listens or dials (devCmd.plan, runCmd.plan, etcdCmd.plan),
// then starts it. -h prints to stdout and exits 0; a usage error exits 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdembed"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/buildinfo"
	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/pebblestore"
)

func main() {
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode reports err and returns the process's exit status: 0 for success
// and for help, 2 for a usage error (with a pointer to -h) and for a failure.
func exitCode(err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\nrun '%s -h' for its flags\n", ue.cmd, ue.err, ue.cmd)
	default:
		fmt.Fprintln(stderr, "likesd:", err)
	}
	return 2
}

const usage = `usage: likesd <command> [flags]

commands:
  dev      run all regions of the embedded default (Pebble + embedded etcd, no servers) on loopback
  run      run one region of a real deployment (its own process): with --etcd one of several regions,
           without it a standalone region, optionally on --store cassandra --log kafka --cache redis
  etcd     run a standalone embedded etcd for local multi-process use
  version  print the build (module version, VCS revision, Go version)

Every command takes --config FILE.yaml (keys: its flag names) and $LIKES_<FLAG>
variables; the command line wins over the environment, which wins over the file.
'likesd <command> -h' lists a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &usageError{cmd: "likesd", err: errors.New("missing command")}
	}
	switch args[0] {
	case "dev":
		return dev(ctx, args[1:], stdout, stderr)
	case "run":
		return runRegion(ctx, args[1:], stdout, stderr)
	case "etcd":
		return runEtcd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		if len(args) > 1 {
			if args[1] == "-h" || args[1] == "--help" {
				fmt.Fprintln(stdout, "usage: likesd version\n\nPrints the build: module version, VCS revision, Go version (also exported as likes_build_info).")
				return nil
			}
			return &usageError{cmd: "likesd", err: fmt.Errorf("version: unexpected argument %q", args[1])}
		}
		fmt.Fprintln(stdout, buildinfo.Get())
		return nil
	case "-h", "--help", "help":
		if len(args) > 1 && args[0] == "help" { // likesd help run
			switch args[1] {
			case "dev", "run", "etcd", "version":
				return run(ctx, []string{args[1], "-h"}, stdout, stderr)
			}
			return &usageError{cmd: "likesd", err: fmt.Errorf("help: unknown command %q (commands: dev, run, etcd, version)", args[1])}
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	return &usageError{cmd: "likesd", err: fmt.Errorf("unknown command %q (commands: dev, run, etcd, version)", args[0])}
}

// common holds the flags every region-running command shares.
type common struct {
	data       string
	partitions int
	window     time.Duration
	inflight   int
	userRate   float64
	reconRate  float64
	ipRate     float64
	ttl        time.Duration
	skew       time.Duration
	ranges     int
	minFree    minFreeFlag
	engines    engineFlags
	sec        publicFlags
	life       lifecycleFlags // retention.go
	obs        obsFlags       // logging, tracing, admin listener (obs.go, admin.go)
}

// minFreeFlag is --min-free-space, parsed by pebblestore.ParseMinFree.
type minFreeFlag struct {
	text     string
	bytes    uint64
	fraction float64
}

func (m *minFreeFlag) String() string { return m.text }

func (m *minFreeFlag) Set(v string) error {
	b, f, err := pebblestore.ParseMinFree(v)
	if err != nil {
		return err
	}
	m.text, m.bytes, m.fraction = v, b, f
	return nil
}

// engineFlags choose the production engines (region.Engines).
type engineFlags struct {
	store, cassandra, keyspace, consistency, serial, dc string
	log, kafka, topic                                   string
	kafkaRF, seqGroups                                  int
	cache, redis, redisPrefix                           string
	redisDB                                             int
	cassTLS, kafkaTLS, redisTLS                         tlsFiles
}

func (e *engineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.store, "store", region.StorePebble, "edges, log and cells: pebble (embedded, under --data) or cassandra")
	fs.StringVar(&e.cassandra, "cassandra", "", "Cassandra contact points, comma-separated host[:port] (--store cassandra); $LIKES_CASSANDRA_USER/$LIKES_CASSANDRA_PASSWORD authenticate")
	fs.StringVar(&e.keyspace, "keyspace", "", "the region's Cassandra keyspace, created by `likectl migrate` (default likes_<region>)")
	fs.StringVar(&e.consistency, "consistency", "LOCAL_QUORUM", "Cassandra consistency of ordinary reads and writes")
	fs.StringVar(&e.serial, "serial", "SERIAL", "Cassandra lightweight-transaction consistency: SERIAL or LOCAL_SERIAL")
	fs.StringVar(&e.dc, "cassandra-dc", "", "Cassandra datacenter to route requests to first")
	fs.IntVar(&e.seqGroups, "cassandra-sequence-groups", 0, "sequence groups of a keyspace this region creates (default: 1 without --node, one transaction issuing the positions of every log partition; one per log partition with --node, where nodes would contend on a shared group); fixed at creation")
	fs.StringVar(&e.log, "log", region.LogStore, "what the aggregators read: store (the store's own log) or kafka (a relay publishes it to Kafka)")
	fs.StringVar(&e.kafka, "kafka", "", "Kafka seed brokers, comma-separated host:port (--log kafka)")
	fs.StringVar(&e.topic, "topic", "", "the region's Kafka log topic (default likes.<region>.log; dead letters in <topic>.dlq)")
	fs.IntVar(&e.kafkaRF, "kafka-replication", 1, "replication factor of the topics likesd creates (3 in production)")
	fs.StringVar(&e.cache, "cache", region.CacheInproc, "count cache, session overlay and rate limits: inproc or redis")
	fs.StringVar(&e.redis, "redis", "", "Redis host:port (--cache redis); $LIKES_REDIS_PASSWORD authenticates")
	fs.StringVar(&e.redisPrefix, "redis-prefix", "", "prefix of every Redis key (default likes:<region>:)")
	fs.IntVar(&e.redisDB, "redis-db", 0, "Redis database number")
	e.cassTLS.register(fs, "cassandra", "Cassandra")
	e.kafkaTLS.register(fs, "kafka", "the Kafka brokers")
	e.redisTLS.register(fs, "redis", "Redis")
}

// build turns the flags into a region.Engines; flags of an engine that is not
// chosen are refused rather than ignored.
func (e *engineFlags) build(name string) (region.Engines, error) {
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	var errs []error
	if e.store != region.StoreCassandra && (e.cassandra != "" || e.keyspace != "" || e.dc != "" || e.seqGroups != 0) {
		errs = append(errs, fmt.Errorf("--cassandra, --keyspace, --cassandra-dc and --cassandra-sequence-groups need --store cassandra (got --store %s)", e.store))
	}
	if e.seqGroups < 0 || e.seqGroups > 4096 {
		errs = append(errs, fmt.Errorf("--cassandra-sequence-groups %d out of range [1, --partitions]", e.seqGroups))
	}
	if e.log != region.LogKafka && (e.kafka != "" || e.topic != "") {
		errs = append(errs, fmt.Errorf("--kafka and --topic need --log kafka (got --log %s)", e.log))
	}
	if e.cache != region.CacheRedis && (e.redis != "" || e.redisPrefix != "") {
		errs = append(errs, fmt.Errorf("--redis and --redis-prefix need --cache redis (got --cache %s)", e.cache))
	}
	if e.store == region.StoreCassandra && e.cassandra == "" {
		errs = append(errs, errors.New("--store cassandra needs --cassandra HOST[:PORT],…"))
	}
	if e.log == region.LogKafka && e.kafka == "" {
		errs = append(errs, errors.New("--log kafka needs --kafka HOST:PORT,…"))
	}
	if e.cache == region.CacheRedis && e.redis == "" {
		errs = append(errs, errors.New("--cache redis needs --redis HOST:PORT"))
	}
	if e.kafkaRF < 1 || e.kafkaRF > 32767 {
		errs = append(errs, fmt.Errorf("--kafka-replication %d out of range", e.kafkaRF))
	}
	cassTLS, kafkaTLS, redisTLS, err := e.engineTLS(e.store == region.StoreCassandra, e.log == region.LogKafka, e.cache == region.CacheRedis)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return region.Engines{}, err
	}
	eng := region.Engines{Store: e.store, Log: e.log, Cache: e.cache}
	if e.store == region.StoreCassandra {
		eng.Cassandra = region.CassandraEngine{
			Hosts: split(e.cassandra), Keyspace: e.keyspace, Consistency: e.consistency, Serial: e.serial, LocalDC: e.dc,
			SequenceGroups: e.seqGroups,
			Username:       os.Getenv("LIKES_CASSANDRA_USER"), Password: os.Getenv("LIKES_CASSANDRA_PASSWORD"),
			TLS: cassTLS,
		}
	}
	if e.log == region.LogKafka {
		eng.Kafka = region.KafkaEngine{Brokers: split(e.kafka), Topic: e.topic, ReplicationFactor: int16(e.kafkaRF), TLS: kafkaTLS}
	}
	if e.cache == region.CacheRedis {
		eng.Redis = rediscache.Config{Addr: e.redis, Prefix: e.redisPrefix, DB: e.redisDB, Password: os.Getenv("LIKES_REDIS_PASSWORD"), TLS: redisTLS}
	}
	check := eng // Validate fills defaults in: keep the flags' values as given
	if err := check.Validate(name, false); err != nil {
		return region.Engines{}, err
	}
	return eng, nil
}

// embedded reports whether the flags choose the embedded default store and log.
func (e *engineFlags) embedded() bool {
	return e.store == region.StorePebble && e.log == region.LogStore
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.data, "data", "./likes-data", "data folder (one subfolder per region)")
	fs.IntVar(&c.partitions, "partitions", 16, "log partitions per region (fixed when the data folder is created; the same in every region)")
	fs.DurationVar(&c.window, "window", 250*time.Millisecond, "aggregator window")
	fs.IntVar(&c.inflight, "max-inflight-writes", 1024, "writes admitted at once; more get 503 + Retry-After")
	fs.Float64Var(&c.userRate, "user-rate", 20, "writes per second per user (negative: unlimited)")
	fs.Float64Var(&c.reconRate, "reconcile-rate", region.DefaultReconcileRate, "items per second the background reconciler recounts from edges (keeps likes_reconcile_mismatch_items true; negative: off)")
	fs.Float64Var(&c.ipRate, "ip-rate", 0, "requests per second per client IP (0: unlimited)")
	fs.DurationVar(&c.ttl, "lease-ttl", 5*time.Second, "region lease TTL (whole seconds; failover happens after it expires)")
	fs.DurationVar(&c.skew, "max-skew", 500*time.Millisecond, "assumed bound on clock skew between regions (a moved pin is writable after TTL + skew)")
	fs.IntVar(&c.ranges, "ranges", 256, "user ranges (units of write authority; fixed at cluster creation)")
	_ = c.minFree.Set(defaultMinFree)
	fs.Var(&c.minFree, "min-free-space", "low-disk watermark of the Pebble store: below it writes get 503 storage_unavailable and /readyz fails, before the disk is full (a share like 3%, a size like 64MiB, or both: the larger applies; 0: off)")
	c.engines.register(fs)
	c.life.register(fs)
}

// checkCommon validates the shared flags that region.Open would refuse
// later (or never).
func (c *common) checkCommon() error {
	switch {
	case c.partitions < 1:
		return fmt.Errorf("--partitions must be at least 1, got %d", c.partitions)
	case c.window <= 0:
		return fmt.Errorf("--window must be positive, got %v", c.window)
	case c.inflight < 1:
		return fmt.Errorf("--max-inflight-writes must be at least 1, got %d", c.inflight)
	case c.ipRate < 0:
		return fmt.Errorf("--ip-rate must not be negative, got %v", c.ipRate)
	case c.reconRate == 0 || c.reconRate > 10000 || math.IsNaN(c.reconRate):
		return fmt.Errorf("--reconcile-rate must be in (0, 10000] items per second, or negative for off, got %v", c.reconRate)
	case c.ranges < 1:
		return fmt.Errorf("--ranges must be at least 1, got %d", c.ranges)
	case c.ttl < time.Second || c.ttl%time.Second != 0:
		return fmt.Errorf("--lease-ttl must be whole seconds, at least 1s, got %v", c.ttl)
	case c.skew < 0:
		return fmt.Errorf("--max-skew must not be negative, got %v", c.skew)
	case c.data == "":
		return errors.New("--data must name a folder")
	}
	return nil
}

// regionConfig is the region.Config of the shared flags.
func (c *common) regionConfig(name string, ver verification, eng region.Engines, logger *slog.Logger) region.Config {
	return region.Config{
		Name: name, DataDir: c.data, Partitions: c.partitions, Window: c.window, Secret: ver.secret, Auth: ver.auth,
		MaxInFlightWrites: c.inflight, UserRate: c.userRate, IPRate: c.ipRate, ReconcileRate: c.reconRate, Logger: logger, Engines: eng,
		MinFreeBytes: c.minFree.bytes, MinFreeFraction: c.minFree.fraction, Lifecycle: c.life.config(), Tracer: c.obs.tracer(),
	}
}

// defaultMinFree keeps room for the WAL, a memtable flush and compactions.
const defaultMinFree = "3%,64MiB"

// diskFullEnv names a file whose existence makes the region's store refuse
// writes as a full disk would (region.TestingKnobs.DiskFull). TESTING ONLY: the chaos
// suite sets it for the `likesd run` processes it launches (the disk-full
// nemesis); it is not a flag so that no deployment config can carry it.
const diskFullEnv = "LIKES_TESTONLY_DISK_FULL_FILE"

func testKnobs(logger *slog.Logger, brk region.Unsafe) *region.TestingKnobs {
	path := os.Getenv(diskFullEnv)
	if path == "" {
		if brk.Any() {
			return &region.TestingKnobs{Unsafe: brk}
		}
		return nil
	}
	logger.Warn("TESTING ONLY: the store refuses writes while this file exists", "env", diskFullEnv, "file", path)
	return &region.TestingKnobs{Unsafe: brk, DiskFull: func() bool {
		_, err := os.Stat(path)
		return err == nil
	}}
}

func parseRegions(list string) ([]string, error) {
	names := strings.Split(list, ",")
	seen := map[string]bool{}
	for _, n := range names {
		if err := api.ValidateID("region", n); err != nil || strings.ContainsAny(n, "/\\ :") || len(n) > 32 {
			return nil, fmt.Errorf("bad region name %q (1-32 characters, no '/', '\\', ':' or spaces)", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("region %q listed twice", n)
		}
		seen[n] = true
	}
	return names, nil
}

func checkPort(name string, p int) error {
	if p < 0 || p > 65535 {
		return fmt.Errorf("--%s %d out of range", name, p)
	}
	return nil
}

// served is one region with its HTTP server.
type served struct {
	r    *region.Region
	srv  *http.Server
	errc chan error
	url  string
	// handoff bounds the graceful stop's hand-off of the region's ranges
	// (Region.Handoff) before HTTP shuts down; 0 skips it.
	handoff time.Duration
}

func serveHTTP(r *region.Region, ln net.Listener, hs httpSettings) *served {
	s := &served{r: r, errc: make(chan error, 1), url: hs.scheme() + "://" + ln.Addr().String()}
	s.srv, ln = hs.server(r.API, ln)
	go func() { s.errc <- s.srv.Serve(ln) }()
	return s
}

// waitAndStop blocks until ctx ends or a server fails, then shuts everything
// down: HTTP first (drain in-flight requests), then the regions.
// errRestartRequired ends `likesd run` when its store failed inside Pebble and
// cannot be reopened in-process: a supervisor restarts the process, which
// reopens the database from what is durable.
var errRestartRequired = errors.New("likesd: the store failed and needs a process restart")

// waitAndStop serves until ctx ends or a server fails. With exitOnFatal (one
// region per process, `likesd run`) a store that asks for a restart also ends
// it; `likesd dev` keeps its other regions serving instead.
func waitAndStop(ctx context.Context, logger *slog.Logger, all []*served, after func(), exitOnFatal bool) error {
	cases := make(chan error, len(all)+1)
	for _, s := range all {
		go func() {
			err := <-s.errc
			cases <- err
		}()
	}
	if exitOnFatal {
		watchCtx, stop := context.WithCancel(ctx)
		defer stop()
		go watchRestart(watchCtx, all, cases)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-cases:
	}
	logger.Info("shutting down: readiness off, draining HTTP, then stopping replication, aggregators and stores")
	for _, s := range all {
		s.r.Drain()
	}
	handOff(logger, all)
	shutCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	for _, s := range all {
		if err := s.srv.Shutdown(shutCtx); err != nil {
			logger.Warn("http shutdown", "err", err)
		}
	}
	var errs []error
	for _, s := range all {
		errs = append(errs, s.r.Close())
	}
	if after != nil {
		after()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	err := errors.Join(errs...)
	if err == nil {
		logger.Info("stopped cleanly")
	}
	return err
}

// httpShutdownTimeout bounds the HTTP drain of a stop, after the hand-off
// (--drain-timeout): a supervisor's stop timeout must exceed their sum.
const httpShutdownTimeout = 10 * time.Second

// handOff runs each region's hand-off (a graceful stop is a planned event:
// its ranges move to other regions before it stops), bounded per region. HTTP
// keeps serving meanwhile: writes to a moved range are forwarded to its new
// owner, which answers 503 with Retry-After until it has caught up.
func handOff(logger *slog.Logger, all []*served) {
	var wg sync.WaitGroup
	for _, s := range all {
		if s.handoff <= 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.handoff)
			defer cancel()
			rep, err := s.r.Handoff(ctx)
			if err != nil {
				logger.Warn("graceful stop: hand-off incomplete; ranges not settled wait for this region to return (or likectl pins settle)",
					"err", err, "moved", rep.Moved, "settled", rep.Settled, "behind", rep.Behind)
				return
			}
			logger.Info("graceful stop: ranges handed off and log flushed", "moved", rep.Moved, "kept", rep.Kept,
				"flushed", rep.Flushed, "took", rep.Took.Round(time.Millisecond))
		}()
	}
	wg.Wait()
}

func watchRestart(ctx context.Context, all []*served, out chan<- error) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, s := range all {
			if st := s.r.Store; st != nil {
				if h := st.Health(); h.RestartRequired {
					out <- fmt.Errorf("%w: region %s: %s", errRestartRequired, s.r.Name(), h.Reason)
					return
				}
			}
		}
	}
}

// devCmd is `likesd dev`: its flags, and the plan they make.
type devCmd struct {
	fs                                   *flag.FlagSet
	c                                    common
	host, regions                        string
	port, grpcPort, gossipPort, etcdPort int
}

const devIntro = `Runs every region of the embedded default (Pebble per region, one embedded etcd,
no servers) on loopback in one process. Ctrl-C stops cleanly; a restart on the
same --data keeps every acknowledged like.`

func newDevCmd() *devCmd {
	d := &devCmd{fs: flag.NewFlagSet("likesd dev", flag.ContinueOnError)}
	fs := d.fs
	registerConfig(fs)
	fs.StringVar(&d.host, "host", "127.0.0.1", "address every region listens on (HTTP, gRPC, gossip); the embedded etcd stays on loopback")
	d.c.register(fs)
	fs.StringVar(&d.regions, "regions", "us,eu,ap", "comma-separated region names; one name runs a single region without etcd")
	fs.IntVar(&d.port, "http-port", 8080, "HTTP port of the first region (region i listens on port+i)")
	fs.IntVar(&d.grpcPort, "grpc-port", 9080, "replication/forwarding gRPC port of the first region (region i: port+i)")
	fs.IntVar(&d.gossipPort, "gossip-port", 7946, "memberlist port of the first region (region i: port+i)")
	fs.IntVar(&d.etcdPort, "etcd-port", 2379, "embedded etcd client port (its peer port is etcd-port+1)")
	d.c.sec.register(fs, false)
	d.c.obs.register(fs, true)
	return d
}

// devPlan is a validated `likesd dev`: nothing listens yet.
type devPlan struct {
	host    string
	regions []region.Config // Cluster.Etcd is filled in at start
	listen  []string        // HTTP listen address per region
	hs      httpSettings
	etcd    *etcdembed.EmbeddedConfig // nil: one region, no etcd
	logger  *slog.Logger
	ob      *observability // tracing, admin listener (obs.go)
	admin   adminFlags
}

// plan validates the flags (and writes the development certificates on the
// first start): every refusal happens here, before anything listens.
func (d *devCmd) plan(stderr io.Writer) (*devPlan, error) {
	c := &d.c
	hs, err := c.sec.httpConfig()
	if err != nil {
		return nil, err
	}
	names, err := parseRegions(d.regions)
	if err != nil {
		return nil, err
	}
	if len(names) > 1 && !c.engines.embedded() {
		return nil, fmt.Errorf("dev: --store %s --log %s run one region only (--regions %s): several regions replicate the embedded store and log only",
			c.engines.store, c.engines.log, names[0])
	}
	if _, err := c.engines.build(names[0]); err != nil {
		return nil, err
	}
	for n, p := range map[string]int{"http-port": d.port, "grpc-port": d.grpcPort, "gossip-port": d.gossipPort, "etcd-port": d.etcdPort} {
		if err := checkPort(n, p); err != nil {
			return nil, err
		}
		if p+len(names) > 65536 {
			return nil, fmt.Errorf("--%s %d leaves no room for %d regions", n, p, len(names))
		}
	}
	if err := c.checkCommon(); err != nil {
		return nil, err
	}
	ob, err := c.obs.start(stderr, "")
	if err != nil {
		return nil, err
	}
	logger := ob.logger
	ver, err := c.sec.authConfig(os.Getenv(auth.EnvSecret), true, logger)
	if err != nil {
		return nil, err
	}
	if !isLoopback(d.host) {
		logger.Warn("likesd dev is listening beyond loopback; it is a development setup (its embedded etcd stays on 127.0.0.1)", "host", d.host)
	}
	p := &devPlan{host: d.host, hs: hs, logger: logger, ob: ob, admin: c.obs.admin}
	var cluster func(i int) *region.Cluster
	if len(names) > 1 {
		ids, gossipKey, err := devPeerSecurity(c.data, names)
		if err != nil {
			return nil, err
		}
		etcdHost := etcdHostOf(d.host) // no TLS, no auth: never beyond loopback
		p.etcd = &etcdembed.EmbeddedConfig{
			Dir: filepath.Join(c.data, "etcd"), ClientAddr: net.JoinHostPort(etcdHost, fmt.Sprint(d.etcdPort)),
			PeerAddr: net.JoinHostPort(etcdHost, fmt.Sprint(d.etcdPort+1)), Logger: ob.zap("etcd"),
		}
		cluster = func(i int) *region.Cluster {
			var seeds []string
			if i > 0 {
				seeds = []string{net.JoinHostPort(d.host, fmt.Sprint(d.gossipPort))}
			}
			return &region.Cluster{
				Epoch: epoch.Config{Ranges: c.ranges, TTL: c.ttl, MaxSkew: c.skew}, Regions: names,
				GRPCListen:    net.JoinHostPort(d.host, fmt.Sprint(d.grpcPort+i)),
				HTTPAdvertise: hs.scheme() + "://" + net.JoinHostPort(d.host, fmt.Sprint(d.port+i)),
				GossipBind:    d.host, GossipPort: d.gossipPort + i, Seeds: seeds,
				TLS: ids[names[i]], GossipKey: gossipKey[0], GossipOldKeys: gossipKey[1:],
			}
		}
	}
	for i, name := range names {
		eng, err := c.engines.build(name)
		if err != nil {
			return nil, err
		}
		rc := c.regionConfig(name, ver, eng, logger)
		if cluster != nil {
			rc.Cluster = cluster(i)
		}
		p.regions = append(p.regions, rc)
		p.listen = append(p.listen, net.JoinHostPort(d.host, fmt.Sprint(d.port+i)))
	}
	return p, nil
}

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := newDevCmd()
	if err := parseCommand(d.fs, args, stdout, devIntro); err != nil {
		return err
	}
	p, err := d.plan(stderr)
	if err != nil {
		return err
	}
	return p.start(ctx, stdout)
}

func (p *devPlan) start(ctx context.Context, stdout io.Writer) error {
	logger := p.logger
	defer p.ob.close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var after func()
	if p.etcd != nil {
		logger.Info("starting embedded etcd", "client", "http://"+p.etcd.ClientAddr, "data", p.etcd.Dir)
		e, err := etcdembed.StartEmbedded(*p.etcd)
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		cli, err := etcdepoch.NewClientWith(p.ob.etcdClient(etcdepoch.ClientConfig{Endpoints: e.Endpoints()}))
		if err != nil {
			e.Close()
			return err
		}
		after = func() { _ = cli.Close(); e.Close() }
		for i := range p.regions {
			p.regions[i].Cluster.Etcd = cli
		}
	}
	var all []*served
	fail := func(err error) error {
		for _, s := range all {
			_ = s.srv.Close()
			_ = s.r.Close()
		}
		if after != nil {
			after()
		}
		return err
	}
	for i, rc := range p.regions {
		r, err := region.Open(ctx, rc)
		if err != nil {
			return fail(fmt.Errorf("region %s: %w", rc.Name, err))
		}
		ln, err := net.Listen("tcp", p.listen[i])
		if err != nil {
			_ = r.Close()
			return fail(err)
		}
		all = append(all, serveHTTP(r, ln, p.hs))
	}
	if err := p.ob.serveAdmin(p.admin, regionsOf(all), stdout); err != nil {
		return fail(err)
	}
	for i, s := range all {
		fmt.Fprintf(stdout, "likes: region %q serving %s (data %s)\n", s.r.Name(), s.url, filepath.Join(p.regions[i].DataDir, s.r.Name()))
	}
	if p.etcd != nil {
		fmt.Fprintf(stdout, "  etcd (pins, leases): http://%s   operators: likectl pins list --etcd http://%s\n", p.etcd.ClientAddr, p.etcd.ClientAddr)
	}
	base := all[0].url
	fmt.Fprintf(stdout, "  get a token:  TOKEN=$(go run ./cmd/likectl token --user alice)\n")
	fmt.Fprintf(stdout, "  like:         curl -X POST -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: k1' %s/v1/items/item1/likes\n", base)
	fmt.Fprintf(stdout, "  count:        curl %s/v1/items/item1/count   (any region answers)\n", all[len(all)-1].url)
	fmt.Fprintf(stdout, "  Ctrl-C stops cleanly.\n")
	return waitAndStop(ctx, logger, all, after, false)
}

// runCmd is `likesd run`: its flags, and the plan they make.
type runCmd struct {
	fs                                *flag.FlagSet
	c                                 common
	name, regions                     string
	httpAddr, grpcAddr, gossip        string
	advHTTP, advGRPC, advGossip       string
	node                              string
	seeds, etcd, peerAddrs            string
	antiEntropy, failbackAfter, drain time.Duration
	failbackRate                      float64
	peerProtoMax                      int
	unsafe                            string
	peerSec                           peerSecurity
}

const runIntro = `Runs one region (or, with --node, one of its nodes). With --etcd it joins a
multi-region cluster (pins, leases, replication, forwarding) on any engines.
Without --etcd it runs standalone, owning every user range; --store cassandra,
--log kafka and --cache redis choose the production engines.`

func newRunCmd() *runCmd {
	r := &runCmd{fs: flag.NewFlagSet("likesd run", flag.ContinueOnError)}
	fs := r.fs
	registerConfig(fs)
	r.c.register(fs)
	fs.StringVar(&r.name, "region", "", "this region's name (required)")
	fs.StringVar(&r.node, "node", "", "this process's name within its region, unique there (e.g. us-2): several nodes of one region share its engines behind a load balancer; needs --etcd and --store cassandra (empty: the region is this one process)")
	fs.StringVar(&r.regions, "regions", "", "all region names, comma-separated, in failover preference order (default: --region alone)")
	fs.StringVar(&r.httpAddr, "http", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&r.grpcAddr, "grpc", "127.0.0.1:9080", "replication/forwarding gRPC listen address")
	fs.StringVar(&r.gossip, "gossip", "127.0.0.1:7946", "memberlist bind address")
	fs.StringVar(&r.advHTTP, "advertise-http", "", "the HTTP address clients and tools are told (host:port or an http(s):// URL; registered in etcd, shown by likectl regions; default: --http's)")
	fs.StringVar(&r.advGRPC, "advertise-grpc", "", "the gRPC address (host:port) other regions are told, through gossip and etcd (default: --grpc's; required when --grpc listens on 0.0.0.0 or ::)")
	fs.StringVar(&r.advGossip, "advertise-gossip", "", "the memberlist address (host[:port]) other regions are told (default: --gossip's; required when --gossip binds 0.0.0.0 or ::)")
	fs.StringVar(&r.seeds, "seeds", "", "comma-separated memberlist addresses of other regions")
	fs.StringVar(&r.etcd, "etcd", "", "comma-separated etcd endpoints, e.g. http://127.0.0.1:2379 (required with several --regions; empty: a standalone region)")
	fs.StringVar(&r.peerAddrs, "peer-addrs", "", "comma-separated region=host:port overriding the gRPC address used to reach a peer (e.g. through a proxy)")
	fs.DurationVar(&r.antiEntropy, "anti-entropy", 30*time.Second, "replication anti-entropy digest interval")
	fs.DurationVar(&r.failbackAfter, "failback-after", 30*time.Second, "how long a region must be back (registered, not draining) before the ranges it is home to move back to it as planned moves (negative: never)")
	fs.Float64Var(&r.failbackRate, "failback-rate", 10, "failback moves per second over the cluster")
	fs.IntVar(&r.peerProtoMax, "peer-protocol-max", 0, "highest region-to-region protocol version to speak (0: the newest; 1 during a rolling upgrade from a release that speaks only 1)")
	fs.DurationVar(&r.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long to wait for the hand-off of this region's ranges (planned moves) and the shipper's flush before stopping anyway (0: stop at once, the ranges fail over); the HTTP drain after it takes up to "+httpShutdownTimeout.String()+" more")
	fs.StringVar(&r.unsafe, "unsafe-break", "", "TESTING ONLY: switch guarantees off (fence,idempotency,lease) to prove the chaos checker fails")
	r.c.sec.register(fs, true)
	r.c.obs.register(fs, false)
	r.peerSec.register(fs)
	return r
}

// clusterOnlyFlags do something only in a clustered region (--etcd); a
// standalone region refuses them rather than ignoring them.
var clusterOnlyFlags = []string{
	"node", "grpc", "gossip", "advertise-grpc", "advertise-gossip", "seeds", "peer-addrs", "anti-entropy", "failback-after", "failback-rate",
	"peer-protocol-max", "drain-timeout", "lease-ttl", "max-skew", "ranges",
	"tls-cert", "tls-key", "tls-ca", "gossip-key-file", "insecure-plaintext-peers",
	"etcd-cacert", "etcd-cert", "etcd-key", "etcd-user",
}

// runPlan is a validated `likesd run`: nothing listens and nothing is dialed yet.
type runPlan struct {
	rc         region.Config // Cluster != nil: clustered; its Etcd is dialed at start
	etcd       etcdepoch.ClientConfig
	httpListen string
	// httpAdvertise is the URL clients are told; "" until the listener is up
	// when it is the listen address (a port 0 is resolved then).
	httpAdvertise string
	hs            httpSettings
	drain         time.Duration
	logger        *slog.Logger
	ob            *observability // tracing, admin listener (obs.go)
	admin         adminFlags
}

// plan validates every flag: every refusal happens here, before anything
// listens or dials.
func (rc *runCmd) plan(stderr io.Writer) (*runPlan, error) {
	c := &rc.c
	set := map[string]bool{}
	rc.fs.Visit(func(f *flag.Flag) { set[f.Name] = true }) // the command line, the environment or the file
	brk, err := region.ParseUnsafe(rc.unsafe)
	if err != nil {
		return nil, fmt.Errorf("--unsafe-break: %w", err)
	}
	overrides := map[string]string{}
	if rc.peerAddrs != "" {
		for _, kv := range strings.Split(rc.peerAddrs, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("--peer-addrs: want region=host:port, got %q", kv)
			}
			overrides[k] = v
		}
	}
	if rc.name == "" {
		return nil, errors.New("run: --region is required")
	}
	regions := rc.regions
	if regions == "" {
		regions = rc.name
	}
	names, err := parseRegions(regions)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(names, rc.name) {
		return nil, fmt.Errorf("run: --region %q is not in --regions %s", rc.name, regions)
	}
	eng, err := c.engines.build(rc.name)
	if err != nil {
		return nil, err
	}
	standalone := rc.etcd == ""
	switch {
	case standalone && len(names) > 1:
		return nil, errors.New("run: --etcd is required with several --regions (pins and leases live in etcd)")
	case standalone && (rc.seeds != "" || rc.peerAddrs != ""):
		return nil, errors.New("run: --seeds and --peer-addrs need --etcd (a standalone region has no peers)")
	}
	if standalone {
		var extra []string
		for _, n := range clusterOnlyFlags {
			if set[n] {
				extra = append(extra, "--"+n)
			}
		}
		if len(extra) > 0 {
			return nil, fmt.Errorf("run: %s need --etcd (a standalone region has no peers, pins or lease); remove them or give --etcd", strings.Join(extra, ", "))
		}
	}
	ecfg := c.sec.etcdConfig(rc.etcd)
	if !standalone && len(ecfg.Endpoints) == 0 {
		return nil, errors.New("run: --etcd names no endpoint")
	}
	if err := c.checkCommon(); err != nil {
		return nil, err
	}
	hs, err := c.sec.httpConfig()
	if err != nil {
		return nil, err
	}
	httpAdv, err := advertiseHTTP(rc.httpAddr, rc.advHTTP, hs.scheme(), !standalone)
	if err != nil {
		return nil, err
	}
	ob, err := c.obs.start(stderr, rc.name)
	if err != nil {
		return nil, err
	}
	logger := ob.logger
	ver, err := c.sec.authConfig(os.Getenv(auth.EnvSecret), false, logger)
	if err != nil {
		return nil, err
	}
	p := &runPlan{etcd: ob.etcdClient(ecfg), httpListen: rc.httpAddr, httpAdvertise: httpAdv, hs: hs, logger: logger, drain: rc.drain, ob: ob, admin: c.obs.admin}
	p.rc = c.regionConfig(rc.name, ver, eng, logger)
	p.rc.Knobs = testKnobs(logger, brk)
	if standalone {
		p.drain = 0
		return p, nil
	}
	gHost, gPort, err := splitPort("gossip", rc.gossip)
	if err != nil {
		return nil, err
	}
	if _, _, err := splitPort("grpc", rc.grpcAddr); err != nil {
		return nil, err
	}
	grpcAdv, err := advertiseAddr("grpc", rc.grpcAddr, rc.advGRPC, true)
	if err != nil {
		return nil, err
	}
	gossipAdv, err := advertiseAddr("gossip", rc.gossip, rc.advGossip, false)
	if err != nil {
		return nil, err
	}
	if rc.drain < 0 {
		return nil, fmt.Errorf("--drain-timeout %v is negative", rc.drain)
	}
	if rc.antiEntropy <= 0 {
		return nil, fmt.Errorf("--anti-entropy must be positive, got %v", rc.antiEntropy)
	}
	if rc.failbackRate <= 0 {
		return nil, fmt.Errorf("--failback-rate must be positive, got %v", rc.failbackRate)
	}
	peerID, gossipKey, err := rc.peerSec.load(rc.name, logger)
	if err != nil {
		return nil, err
	}
	var seedList []string
	if rc.seeds != "" {
		seedList = strings.Split(rc.seeds, ",")
	}
	p.rc.Cluster = &region.Cluster{
		Epoch: epoch.Config{Ranges: c.ranges, TTL: c.ttl, MaxSkew: c.skew}, Regions: names,
		GRPCListen: rc.grpcAddr, GRPCAdvertise: grpcAdv, HTTPAdvertise: httpAdv,
		GossipBind: gHost, GossipPort: gPort, GossipAdvertise: gossipAdv, Seeds: seedList,
		PeerAddrs: overrides, AntiEntropy: rc.antiEntropy,
		FailbackAfter: rc.failbackAfter, FailbackRate: rc.failbackRate, MaxProtocol: rc.peerProtoMax,
		TLS: peerID, GossipKey: first(gossipKey), GossipOldKeys: rest(gossipKey),
		Node: rc.node,
	}
	if rc.node != "" {
		if err := etcdepoch.ValidNode(rc.node); err != nil {
			return nil, fmt.Errorf("--node: %w", err)
		}
		if eng.Store != region.StoreCassandra {
			return nil, fmt.Errorf("--node %s: several nodes per region need --store cassandra (a region on the embedded store is one process)", rc.node)
		}
	}
	return p, nil
}

func runRegion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rc := newRunCmd()
	if err := parseCommand(rc.fs, args, stdout, runIntro); err != nil {
		return err
	}
	p, err := rc.plan(stderr)
	if err != nil {
		return err
	}
	return p.start(ctx, stdout)
}

func (p *runPlan) start(ctx context.Context, stdout io.Writer) error {
	defer p.ob.close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl := p.rc.Cluster
	if cl != nil {
		cli, err := etcdepoch.NewClientWith(p.etcd)
		if err != nil {
			return fmt.Errorf("etcd %s: %w", strings.Join(p.etcd.Endpoints, ","), err)
		}
		defer cli.Close()
		cl.Etcd = cli
	}
	ln, err := net.Listen("tcp", p.httpListen)
	if err != nil {
		return err
	}
	adv := p.httpAdvertise
	if adv == "" {
		adv = p.hs.scheme() + "://" + ln.Addr().String()
	}
	if cl != nil {
		cl.HTTPAdvertise = adv
	}
	r, err := region.Open(ctx, p.rc)
	if err != nil {
		_ = ln.Close()
		return err
	}
	s := serveHTTP(r, ln, p.hs)
	s.handoff = p.drain
	if err := p.ob.serveAdmin(p.admin, []*region.Region{r}, stdout); err != nil {
		_ = s.srv.Close()
		_ = r.Close()
		return err
	}
	if cl == nil {
		fmt.Fprintf(stdout, "likes: region %q serving %s standalone (%s; advertised %s)\n", p.rc.Name, s.url, r.Engines().String(), adv)
	} else {
		fmt.Fprintf(stdout, "likes: region %q serving %s (advertised %s; gRPC %s advertised %s; gossip %s advertised %s; etcd %s)\n",
			p.rc.Name, s.url, adv, r.GRPCAddr(), orDefault(cl.GRPCAdvertise, r.GRPCAddr()),
			net.JoinHostPort(cl.GossipBind, strconv.Itoa(cl.GossipPort)), r.GossipAddr(), strings.Join(p.etcd.Endpoints, ","))
	}
	return waitAndStop(ctx, p.logger, []*served{s}, nil, true)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// splitPort splits a --name host:port flag.
func splitPort(name, addr string) (string, int, error) {
	h, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("--%s %q: %w", name, addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("--%s %q: bad port %q", name, addr, ps)
	}
	return h, port, nil
}

// unspecifiedHost reports whether host binds every interface (0.0.0.0, ::
// or empty), an address no peer can dial.
func unspecifiedHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// errAdvertise prefixes a refused or missing advertised address.
var errAdvertise = errors.New("advertise")

// advertiseAddr is the address of --advertise-<name>: adv checked, or ""
// (the listener's own address, resolved once it listens) when the listen
// host is one a peer can dial. needPort: adv must be host:port; otherwise a
// bare host takes the listen port.
func advertiseAddr(name, listen, adv string, needPort bool) (string, error) {
	lh, lp, err := splitPort(name, listen)
	if err != nil {
		return "", err
	}
	if adv == "" {
		if unspecifiedHost(lh) {
			return "", fmt.Errorf("%w: --%s %s listens on every interface, an address no peer can dial: give --advertise-%s HOST:PORT, the address other regions reach this one at (e.g. the pod's DNS name or the host's private IP)",
				errAdvertise, name, listen, name)
		}
		return "", nil
	}
	h, ps, err := net.SplitHostPort(adv)
	if err != nil {
		if needPort || strings.Contains(adv, "]:") {
			return "", fmt.Errorf("%w: --advertise-%s %q: want host:port: %w", errAdvertise, name, adv, err)
		}
		h, ps = strings.Trim(adv, "[]"), strconv.Itoa(lp)
	}
	port, perr := strconv.Atoi(ps)
	switch {
	case h == "" || unspecifiedHost(h):
		return "", fmt.Errorf("%w: --advertise-%s %q: the host must be one peers can dial, not empty, 0.0.0.0 or the IPv6 any-address", errAdvertise, name, adv)
	case strings.ContainsAny(h, "/ ,"):
		return "", fmt.Errorf("%w: --advertise-%s %q: bad host", errAdvertise, name, adv)
	case perr != nil || port < 1 || port > 65535:
		return "", fmt.Errorf("%w: --advertise-%s %q: bad port", errAdvertise, name, adv)
	}
	return net.JoinHostPort(h, strconv.Itoa(port)), nil
}

// advertiseHTTP is the URL of --advertise-http (host:port or http(s)://…),
// or "" for the listener's own address. A clustered region (cluster)
// refuses an unspecified listen host without it; a standalone one only
// prints the address.
func advertiseHTTP(listen, adv, scheme string, cluster bool) (string, error) {
	lh, _, err := splitPort("http", listen)
	if err != nil {
		return "", err
	}
	if adv == "" {
		if cluster && unspecifiedHost(lh) {
			return "", fmt.Errorf("%w: --http %s listens on every interface, an address no client or tool can use: give --advertise-http HOST:PORT or URL, the address this region is reached at (e.g. https://us.likes.example)",
				errAdvertise, listen)
		}
		return "", nil
	}
	if strings.Contains(adv, "://") {
		u, err := url.Parse(adv)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || unspecifiedHost(u.Hostname()) ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
			return "", fmt.Errorf("%w: --advertise-http %q: want host:port or an http(s)://host[:port] URL with no path", errAdvertise, adv)
		}
		return strings.TrimSuffix(adv, "/"), nil
	}
	hp, err := advertiseAddr("http", "localhost:1", adv, true)
	if err != nil {
		return "", err
	}
	return scheme + "://" + hp, nil
}

// etcdCmd is `likesd etcd`.
type etcdCmd struct {
	fs            *flag.FlagSet
	host, data    string
	port          int
	cert, key, ca string
	insecure      bool
}

const etcdIntro = `Runs a standalone embedded etcd (pins, epochs, leases) for local multi-process use.`

func newEtcdCmd() *etcdCmd {
	e := &etcdCmd{fs: flag.NewFlagSet("likesd etcd", flag.ContinueOnError)}
	fs := e.fs
	registerConfig(fs)
	fs.StringVar(&e.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&e.port, "client-port", 2379, "client port (peer port is client-port+1)")
	fs.StringVar(&e.data, "data", "./likes-data/etcd", "data folder")
	fs.StringVar(&e.cert, "tls-cert", "", "serve clients over TLS with this certificate (PEM)")
	fs.StringVar(&e.key, "tls-key", "", "the certificate's key (PEM)")
	fs.StringVar(&e.ca, "tls-ca", "", "require client certificates signed by this CA (PEM; with --tls-cert)")
	fs.BoolVar(&e.insecure, "insecure-plaintext", false, "INSECURE: serve plaintext beyond loopback")
	return e
}

// plan validates the flags.
func (e *etcdCmd) plan() (*etcdembed.EmbeddedConfig, error) {
	if err := checkPort("client-port", e.port); err != nil {
		return nil, err
	}
	if e.port == 65535 {
		return nil, errors.New("etcd: --client-port 65535 leaves no peer port (client-port+1)")
	}
	if (e.cert == "") != (e.key == "") || (e.ca != "" && e.cert == "") {
		return nil, errors.New("etcd: --tls-cert and --tls-key go together, and --tls-ca needs them")
	}
	if e.insecure && e.cert != "" {
		return nil, errors.New("etcd: --insecure-plaintext cannot be combined with --tls-cert")
	}
	if e.cert == "" && !isLoopback(e.host) && !e.insecure {
		return nil, fmt.Errorf("etcd: --host %s is beyond loopback: give --tls-cert/--tls-key (and --tls-ca for client certificates), or --insecure-plaintext on a trusted network", e.host)
	}
	return &etcdembed.EmbeddedConfig{
		Dir: e.data, ClientAddr: net.JoinHostPort(e.host, fmt.Sprint(e.port)), PeerAddr: net.JoinHostPort(e.host, fmt.Sprint(e.port+1)),
		ClientTLS: etcdembed.EmbeddedTLS{CertFile: e.cert, KeyFile: e.key, TrustedCAFile: e.ca, ClientCertAuth: e.ca != ""},
	}, nil
}

func runEtcd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ec := newEtcdCmd()
	if err := parseCommand(ec.fs, args, stdout, etcdIntro); err != nil {
		return err
	}
	cfg, err := ec.plan()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := etcdembed.StartEmbedded(*cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(stdout, "likes: embedded etcd serving %s (data %s); Ctrl-C stops\n", strings.Join(e.Endpoints(), ","), cfg.Dir)
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// commandFlagSets are the flag sets of every command, for hints and tests.
func commandFlagSets() []*flag.FlagSet {
	return []*flag.FlagSet{newDevCmd().fs, newRunCmd().fs, newEtcdCmd().fs}
}

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// etcdHostOf is the address dev's embedded etcd listens on: host when it is
// loopback, else 127.0.0.1.
func etcdHostOf(host string) string {
	if isLoopback(host) {
		return host
	}
	return "127.0.0.1"
}
