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
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "likesd:", err)
		os.Exit(2)
	}
}

const usage = `usage: likesd <command> [flags]

commands:
  dev    run all regions of the embedded default (Pebble + embedded etcd, no servers) on loopback
  run    run one region of a real deployment (its own process): with --etcd one of several regions,
         without it a standalone region, optionally on --store cassandra --log kafka --cache redis
  etcd   run a standalone embedded etcd for local multi-process use
  version  print the build (module version, VCS revision, Go version)
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "dev":
		return dev(ctx, args[1:], stdout, stderr)
	case "run":
		return runRegion(ctx, args[1:], stdout, stderr)
	case "etcd":
		return runEtcd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, buildinfo.Get())
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// common holds the flags every region-running command shares.
type common struct {
	host       string
	data       string
	partitions int
	window     time.Duration
	inflight   int
	userRate   float64
	ipRate     float64
	ttl        time.Duration
	skew       time.Duration
	ranges     int
	minFree    minFreeFlag
	engines    engineFlags
	sec        publicFlags
	obs        obsFlags // logging, tracing, admin listener (obs.go, admin.go)
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
	kafkaRF                                             int
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
	if e.store != region.StoreCassandra && (e.cassandra != "" || e.keyspace != "" || e.dc != "") {
		errs = append(errs, fmt.Errorf("--cassandra, --keyspace and --cassandra-dc need --store cassandra (got --store %s)", e.store))
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
			Username: os.Getenv("LIKES_CASSANDRA_USER"), Password: os.Getenv("LIKES_CASSANDRA_PASSWORD"),
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
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	fs.StringVar(&c.data, "data", "./likes-data", "data folder (one subfolder per region)")
	fs.IntVar(&c.partitions, "partitions", 16, "log partitions per region (fixed when the data folder is created; the same in every region)")
	fs.DurationVar(&c.window, "window", 250*time.Millisecond, "aggregator window")
	fs.IntVar(&c.inflight, "max-inflight-writes", 1024, "writes admitted at once; more get 503 + Retry-After")
	fs.Float64Var(&c.userRate, "user-rate", 20, "writes per second per user (negative: unlimited)")
	fs.Float64Var(&c.ipRate, "ip-rate", 0, "requests per second per client IP (0: unlimited)")
	fs.DurationVar(&c.ttl, "lease-ttl", 5*time.Second, "region lease TTL (whole seconds; failover happens after it expires)")
	fs.DurationVar(&c.skew, "max-skew", 500*time.Millisecond, "assumed bound on clock skew between regions (a moved pin is writable after TTL + skew)")
	fs.IntVar(&c.ranges, "ranges", 256, "user ranges (units of write authority; fixed at cluster creation)")
	_ = c.minFree.Set(defaultMinFree)
	fs.Var(&c.minFree, "min-free-space", "low-disk watermark of the Pebble store: below it writes get 503 storage_unavailable and /readyz fails, before the disk is full (a share like 3%, a size like 64MiB, or both: the larger applies; 0: off)")
	c.engines.register(fs)
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
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likesd dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	regions := fs.String("regions", "us,eu,ap", "comma-separated region names; one name runs a single region without etcd")
	port := fs.Int("http-port", 8080, "HTTP port of the first region (region i listens on port+i)")
	grpcPort := fs.Int("grpc-port", 9080, "replication/forwarding gRPC port of the first region (region i: port+i)")
	gossipPort := fs.Int("gossip-port", 7946, "memberlist port of the first region (region i: port+i)")
	etcdPort := fs.Int("etcd-port", 2379, "embedded etcd client port (its peer port is etcd-port+1)")
	c.sec.register(fs, false)
	c.obs.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return err
	}
	hs, err := c.sec.httpConfig()
	if err != nil {
		return err
	}
	names, err := parseRegions(*regions)
	if err != nil {
		return err
	}
	if len(names) > 1 && !c.engines.embedded() {
		return fmt.Errorf("dev: --store %s --log %s run one region only (--regions %s): several regions replicate the embedded store and log only",
			c.engines.store, c.engines.log, names[0])
	}
	if _, err := c.engines.build(names[0]); err != nil {
		return err
	}
	for n, p := range map[string]int{"http-port": *port, "grpc-port": *grpcPort, "gossip-port": *gossipPort, "etcd-port": *etcdPort} {
		if err := checkPort(n, p); err != nil {
			return err
		}
	}
	ob, err := c.obs.start(ctx, stderr, "")
	if err != nil {
		return err
	}
	defer ob.close()
	logger := ob.logger
	ver, err := c.sec.authConfig(os.Getenv(auth.EnvSecret), true, logger)
	if err != nil {
		return err
	}
	if !isLoopback(c.host) {
		logger.Warn("likesd dev is listening beyond loopback; it is a development setup (its embedded etcd stays on 127.0.0.1)", "host", c.host)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cluster func(i int) *region.Cluster
	var after func()
	if len(names) > 1 {
		ids, gossipKey, err := devPeerSecurity(c.data, names)
		if err != nil {
			return err
		}
		etcdHost := etcdHostOf(c.host) // no TLS, no auth: never beyond loopback
		etcdAddr := net.JoinHostPort(etcdHost, fmt.Sprint(*etcdPort))
		logger.Info("starting embedded etcd", "client", "http://"+etcdAddr, "data", filepath.Join(c.data, "etcd"))
		e, err := etcdembed.StartEmbedded(etcdembed.EmbeddedConfig{
			Dir: filepath.Join(c.data, "etcd"), ClientAddr: etcdAddr, PeerAddr: net.JoinHostPort(etcdHost, fmt.Sprint(*etcdPort+1)),
			Logger: ob.zap("etcd"),
		})
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		cli, err := etcdepoch.NewClientWith(etcdepoch.ClientConfig{Endpoints: e.Endpoints(), Logger: ob.zap("etcd-client")})
		if err != nil {
			e.Close()
			return err
		}
		after = func() { _ = cli.Close(); e.Close() }
		cluster = func(i int) *region.Cluster {
			var seeds []string
			if i > 0 {
				seeds = []string{net.JoinHostPort(c.host, fmt.Sprint(*gossipPort))}
			}
			return &region.Cluster{
				Etcd: cli, Epoch: epoch.Config{Ranges: c.ranges, TTL: c.ttl, MaxSkew: c.skew}, Regions: names,
				GRPCListen:    net.JoinHostPort(c.host, fmt.Sprint(*grpcPort+i)),
				HTTPAdvertise: hs.scheme() + "://" + net.JoinHostPort(c.host, fmt.Sprint(*port+i)),
				GossipBind:    c.host, GossipPort: *gossipPort + i, Seeds: seeds,
				TLS: ids[names[i]], GossipKey: gossipKey[0], GossipOldKeys: gossipKey[1:],
			}
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
	for i, name := range names {
		eng, err := c.engines.build(name)
		if err != nil {
			return fail(err)
		}
		rc := region.Config{
			Name: name, DataDir: c.data, Partitions: c.partitions, Window: c.window, Secret: ver.secret, Auth: ver.auth,
			MaxInFlightWrites: c.inflight, UserRate: c.userRate, IPRate: c.ipRate, Logger: logger, Engines: eng,
			MinFreeBytes: c.minFree.bytes, MinFreeFraction: c.minFree.fraction, Tracer: ob.tracer(),
		}
		if cluster != nil {
			rc.Cluster = cluster(i)
		}
		r, err := region.Open(ctx, rc)
		if err != nil {
			return fail(fmt.Errorf("region %s: %w", name, err))
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(c.host, fmt.Sprint(*port+i)))
		if err != nil {
			_ = r.Close()
			return fail(err)
		}
		all = append(all, serveHTTP(r, ln, hs))
	}
	if err := ob.serveAdmin(c.obs.admin, regionsOf(all), stdout); err != nil {
		return fail(err)
	}
	for _, s := range all {
		fmt.Fprintf(stdout, "likes: region %q serving %s (data %s)\n", s.r.Name(), s.url, filepath.Join(c.data, s.r.Name()))
	}
	if len(names) > 1 {
		fmt.Fprintf(stdout, "  etcd (pins, leases): http://%s   operators: likectl pins list --etcd http://%s\n",
			net.JoinHostPort(etcdHostOf(c.host), fmt.Sprint(*etcdPort)), net.JoinHostPort(etcdHostOf(c.host), fmt.Sprint(*etcdPort)))
	}
	base := all[0].url
	fmt.Fprintf(stdout, "  get a token:  TOKEN=$(go run ./cmd/likectl token --user alice)\n")
	fmt.Fprintf(stdout, "  like:         curl -X POST -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: k1' %s/v1/items/item1/likes\n", base)
	fmt.Fprintf(stdout, "  count:        curl %s/v1/items/item1/count   (any region answers)\n", all[len(all)-1].url)
	fmt.Fprintf(stdout, "  Ctrl-C stops cleanly.\n")
	return waitAndStop(ctx, logger, all, after, false)
}

func runRegion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likesd run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	name := fs.String("region", "", "this region's name (required)")
	regions := fs.String("regions", "", "all region names, comma-separated, in failover preference order (default: --region alone)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "HTTP listen address")
	grpcAddr := fs.String("grpc", "127.0.0.1:9080", "replication/forwarding gRPC listen address")
	gossip := fs.String("gossip", "127.0.0.1:7946", "memberlist bind address")
	seeds := fs.String("seeds", "", "comma-separated memberlist addresses of other regions")
	etcd := fs.String("etcd", "", "comma-separated etcd endpoints, e.g. http://127.0.0.1:2379 (required with several --regions; empty: a standalone region)")
	peerAddrs := fs.String("peer-addrs", "", "region=host:port,… overriding the gRPC address used to reach a peer (e.g. through a proxy)")
	antiEntropy := fs.Duration("anti-entropy", 30*time.Second, "replication anti-entropy digest interval")
	failbackAfter := fs.Duration("failback-after", 30*time.Second, "how long a region must be back (registered, not draining) before the ranges it is home to move back to it as planned moves (negative: never)")
	failbackRate := fs.Float64("failback-rate", 10, "failback moves per second over the cluster")
	peerProtoMax := fs.Int("peer-protocol-max", 0, "highest region-to-region protocol version to speak (0: the newest; 1 during a rolling upgrade from a release that speaks only 1)")
	drainTimeout := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long to wait for the hand-off of this region's ranges (planned moves) and the shipper's flush before stopping anyway (0: stop at once, the ranges fail over)")
	unsafe := fs.String("unsafe-break", "", "TESTING ONLY: switch guarantees off (fence,idempotency,lease) to prove the chaos checker fails")
	c.sec.register(fs, true)
	c.obs.register(fs, false)
	var peerSec peerSecurity
	peerSec.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	brk, err := region.ParseUnsafe(*unsafe)
	if err != nil {
		return fmt.Errorf("--unsafe-break: %w", err)
	}
	overrides := map[string]string{}
	if *peerAddrs != "" {
		for _, kv := range strings.Split(*peerAddrs, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || v == "" {
				return fmt.Errorf("--peer-addrs: want region=host:port, got %q", kv)
			}
			overrides[k] = v
		}
	}
	if *name == "" {
		return errors.New("run: --region is required")
	}
	if *regions == "" {
		*regions = *name
	}
	names, err := parseRegions(*regions)
	if err != nil {
		return err
	}
	if !slices.Contains(names, *name) {
		return fmt.Errorf("run: --region %q is not in --regions %s", *name, *regions)
	}
	eng, err := c.engines.build(*name)
	if err != nil {
		return err
	}
	standalone := *etcd == ""
	switch {
	case standalone && len(names) > 1:
		return errors.New("run: --etcd is required with several --regions (pins and leases live in etcd)")
	case !standalone && !c.engines.embedded() && (len(names) > 1 || *seeds != "" || *peerAddrs != ""):
		return fmt.Errorf("run: --store %s --log %s replicate with no other region: with --etcd such a region takes its pins and lease from etcd alone (--regions only itself, no --seeds or --peer-addrs); a multi-region cluster replicates the embedded store and log only (Cassandra has no replication source or sink yet)",
			c.engines.store, c.engines.log)
	case standalone && (*seeds != "" || *peerAddrs != ""):
		return errors.New("run: --seeds and --peer-addrs need --etcd (a standalone region has no peers)")
	}
	if !standalone && len(c.sec.etcdConfig(*etcd).Endpoints) == 0 {
		return errors.New("run: --etcd names no endpoint")
	}
	if standalone && (c.sec.etcdCA != "" || c.sec.etcdCert != "" || c.sec.etcdKey != "" || c.sec.etcdUser != "") {
		return errors.New("run: --etcd-cacert, --etcd-cert, --etcd-key and --etcd-user need --etcd")
	}
	hs, err := c.sec.httpConfig()
	if err != nil {
		return err
	}
	ob, err := c.obs.start(ctx, stderr, *name)
	if err != nil {
		return err
	}
	defer ob.close()
	logger := ob.logger
	ver, err := c.sec.authConfig(os.Getenv(auth.EnvSecret), false, logger)
	if err != nil {
		return err
	}
	if standalone {
		return runStandalone(ctx, c, *name, *httpAddr, eng, brk, ver, hs, logger, stdout)
	}
	gHost, gPortS, err := net.SplitHostPort(*gossip)
	if err != nil {
		return fmt.Errorf("--gossip: %w", err)
	}
	gPort, err := strconv.Atoi(gPortS)
	if err != nil {
		return fmt.Errorf("--gossip port: %w", err)
	}
	peerID, gossipKey, err := peerSec.load(*name, logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := etcdepoch.NewClientWith(ob.etcdClient(c.sec.etcdConfig(*etcd)))
	if err != nil {
		return fmt.Errorf("etcd %s: %w", *etcd, err)
	}
	defer cli.Close()
	var seedList []string
	if *seeds != "" {
		seedList = strings.Split(*seeds, ",")
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	r, err := region.Open(ctx, region.Config{
		Name: *name, DataDir: c.data, Partitions: c.partitions, Window: c.window, Secret: ver.secret, Auth: ver.auth,
		MaxInFlightWrites: c.inflight, UserRate: c.userRate, IPRate: c.ipRate, Logger: logger, Engines: eng,
		MinFreeBytes: c.minFree.bytes, MinFreeFraction: c.minFree.fraction, Knobs: testKnobs(logger, brk), Tracer: ob.tracer(),
		Cluster: &region.Cluster{
			Etcd: cli, Epoch: epoch.Config{Ranges: c.ranges, TTL: c.ttl, MaxSkew: c.skew}, Regions: names,
			GRPCListen: *grpcAddr, HTTPAdvertise: hs.scheme() + "://" + ln.Addr().String(),
			GossipBind: gHost, GossipPort: gPort, Seeds: seedList,
			PeerAddrs: overrides, AntiEntropy: *antiEntropy,
			FailbackAfter: *failbackAfter, FailbackRate: *failbackRate, MaxProtocol: *peerProtoMax,
			TLS: peerID, GossipKey: first(gossipKey), GossipOldKeys: rest(gossipKey),
		},
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	s := serveHTTP(r, ln, hs)
	s.handoff = *drainTimeout
	if err := ob.serveAdmin(c.obs.admin, []*region.Region{r}, stdout); err != nil {
		_ = s.srv.Close()
		_ = r.Close()
		return err
	}
	fmt.Fprintf(stdout, "likes: region %q serving %s (gRPC %s, gossip %s, etcd %s)\n", *name, s.url, *grpcAddr, *gossip, *etcd)
	return waitAndStop(ctx, logger, []*served{s}, nil, true)
}

// runStandalone runs one region without a cluster: it owns every user range.
func runStandalone(ctx context.Context, c common, name, httpAddr string, eng region.Engines, brk region.Unsafe,
	ver verification, hs httpSettings, logger *slog.Logger, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return err
	}
	r, err := region.Open(ctx, region.Config{
		Name: name, DataDir: c.data, Partitions: c.partitions, Window: c.window, Secret: ver.secret, Auth: ver.auth,
		MaxInFlightWrites: c.inflight, UserRate: c.userRate, IPRate: c.ipRate, Logger: logger, Engines: eng,
		MinFreeBytes: c.minFree.bytes, MinFreeFraction: c.minFree.fraction, Knobs: testKnobs(logger, brk), Tracer: c.obs.started.tracer(),
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	s := serveHTTP(r, ln, hs)
	if err := c.obs.started.serveAdmin(c.obs.admin, []*region.Region{r}, stdout); err != nil {
		_ = s.srv.Close()
		_ = r.Close()
		return err
	}
	fmt.Fprintf(stdout, "likes: region %q serving %s standalone (%s)\n", name, s.url, r.Engines().String())
	return waitAndStop(ctx, logger, []*served{s}, nil, true)
}

func runEtcd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likesd etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("client-port", 2379, "client port (peer port is client-port+1)")
	data := fs.String("data", "./likes-data/etcd", "data folder")
	cert := fs.String("tls-cert", "", "serve clients over TLS with this certificate (PEM)")
	key := fs.String("tls-key", "", "the certificate's key (PEM)")
	ca := fs.String("tls-ca", "", "require client certificates signed by this CA (PEM; with --tls-cert)")
	insecure := fs.Bool("insecure-plaintext", false, "INSECURE: serve plaintext beyond loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkPort("client-port", *port); err != nil {
		return err
	}
	if (*cert == "") != (*key == "") || (*ca != "" && *cert == "") {
		return errors.New("etcd: --tls-cert and --tls-key go together, and --tls-ca needs them")
	}
	if *cert == "" && !isLoopback(*host) && !*insecure {
		return fmt.Errorf("etcd: --host %s is beyond loopback: give --tls-cert/--tls-key (and --tls-ca for client certificates), or --insecure-plaintext on a trusted network", *host)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := etcdembed.StartEmbedded(etcdembed.EmbeddedConfig{
		Dir: *data, ClientAddr: net.JoinHostPort(*host, fmt.Sprint(*port)), PeerAddr: net.JoinHostPort(*host, fmt.Sprint(*port+1)),
		ClientTLS: etcdembed.EmbeddedTLS{CertFile: *cert, KeyFile: *key, TrustedCAFile: *ca, ClientCertAuth: *ca != ""},
	})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(stdout, "likes: embedded etcd serving %s (data %s); Ctrl-C stops\n", strings.Join(e.Endpoints(), ","), *data)
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
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
