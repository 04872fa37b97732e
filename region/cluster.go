package region

import (
	"context"
	"errors"
	"fmt"
	"github.com/likes-dev/likes/catchup"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/peertls"
	"github.com/likes-dev/likes/internal/tracing"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/cassandra"
	"github.com/likes-dev/likes/store/pebblestore"
)

// Cluster configures the multi-region parts of a region (DESIGN section 5). A
// region without a Cluster owns every range itself (epoch 1).
type Cluster struct {
	// Etcd is the client of the global etcd cluster holding pins and leases. Required.
	Etcd *clientv3.Client
	// Epoch configures pins and leases (ranges, TTL, margin, max clock skew).
	Epoch epoch.Config
	// Regions, when set, initializes the pins (round-robin) if none exist.
	Regions []string
	// Preference orders failover and hand-off targets (default: Regions).
	Preference []string
	// FailbackAfter is how long a range's home region (its place in Regions,
	// as Init pinned it) must be registered and not draining before the range
	// moves back to it as a planned move (default 30s; negative disables).
	// FailbackRate bounds those moves per second (default 10).
	FailbackAfter time.Duration
	FailbackRate  float64
	// MaxProtocol limits the region-to-region protocol this region speaks
	// (0: the newest, replication.MaxProtocol); 1 makes it behave as a region
	// of the previous release during a rolling upgrade.
	MaxProtocol int
	// GRPCListen is the replication + forwarding listen address (default 127.0.0.1:0).
	GRPCListen string
	// GRPCAdvertise is the gRPC address (host:port) peers are told, through
	// gossip and the region's etcd registration (default: GRPCListen's
	// listener address).
	GRPCAdvertise string
	// HTTPAdvertise is this region's public HTTP address, for tools.
	HTTPAdvertise string
	// GossipBind/GossipPort are the memberlist address (default 127.0.0.1:0).
	GossipBind string
	GossipPort int
	// GossipAdvertise is the memberlist address (host:port) other regions are
	// told (default: the bind address and port).
	GossipAdvertise string
	// Seeds are memberlist addresses of other regions to join.
	Seeds []string
	// AntiEntropy is the digest interval (default 30s).
	AntiEntropy time.Duration
	// PeerAddrs overrides the gRPC address used to reach a region (region →
	// host:port), e.g. to send a link through a fault-injecting proxy in the
	// chaos suite. Regions not listed use the address they gossip.
	PeerAddrs map[string]string
	// TLS is this region's identity on the region-to-region plane: its gRPC
	// listener requires a client certificate of the same CA, every call to a
	// peer verifies that the server's certificate names the region meant, and
	// every message's claimed sender must be the caller's certificate's region
	// (one of Regions). Nil: plaintext, which only an operator's explicit
	// --insecure-plaintext-peers (and tests) may choose.
	TLS *peertls.Identity
	// GossipKey (16, 24 or 32 bytes) encrypts and authenticates memberlist
	// traffic; a node without it cannot join. Gossip only finds addresses:
	// whom to trust is decided by TLS.
	GossipKey []byte
	// GossipOldKeys are also accepted from other nodes (a key rotation in
	// progress: every region first accepts the new key, then sends with it,
	// then drops the old one).
	GossipOldKeys [][]byte
	// Node names this process within its region (likesd --node). Set, the
	// region may run on several nodes sharing its engines (the Cassandra
	// store): one lease kept alive by every node, the log partitions'
	// aggregators and relay split over the live nodes, one shipper and one
	// planned-move barrier elected among them (nodes.go). Empty: the region
	// is this one process, as on the embedded store.
	Node string

	// tracer is Config.Tracer (set by Open on its copy of the Cluster).
	tracer trace.TracerProvider
	// storeRequest bounds one request to the shared store (the Cassandra
	// timeout; set by Open): part of a multi-node Fencer's settle time.
	storeRequest time.Duration
}

// overridePeers is a replication.PeerSource that rewrites peers' addresses.
type overridePeers struct {
	src   replication.PeerSource
	addrs map[string]string
	// skip drops peers (retired regions: nothing is shipped to them).
	skip func(region string) bool
}

func (o overridePeers) Peers() []replication.Peer {
	ps := o.src.Peers()
	out := ps[:0]
	for _, p := range ps {
		if o.skip != nil && o.skip(p.Region) {
			continue
		}
		if a, ok := o.addrs[p.Region]; ok {
			p.GRPCAddr = a
		}
		out = append(out, p)
	}
	return out
}

func (o overridePeers) Changes() <-chan struct{} { return o.src.Changes() }

// grpcStopGrace bounds how long a closing region waits for its gRPC calls in
// flight before it cuts them.
const grpcStopGrace = 5 * time.Second

// clusterParts are the running multi-region components, closed in reverse.
type clusterParts struct {
	regions     []string
	store       replicaStore // what replication ships from and applies to (nil: peerless on the engines)
	jobs        edge.JobStore
	health      *health.Server              // grpc.health.v1 on the gRPC port
	eraser      atomic.Pointer[edge.Eraser] // set once the region's eraser runs
	keepalive   *etcdepoch.KeepAlive
	authority   *etcdepoch.Authority
	controller  *etcdepoch.Controller
	grpcSrv     *grpc.Server
	grpcLn      net.Listener
	grpcDone    chan struct{}
	member      *replication.Membership
	peers       overridePeers
	transport   *replication.GRPCTransport
	shipperRef  atomic.Pointer[replication.Shipper] // the running shipper (on one node of several: while elected)
	nodes       *etcdepoch.Nodes                    // Cluster.Node set: the region's live nodes
	singletons  []*etcdepoch.Singleton              // the shipper's and the barrier's elections (Cluster.Node set)
	direct      []io.Closer                         // the same, started directly (one process per region)
	crash       bool                                // close as if killed: leases expire, nothing resigns (tests only)
	erasing     atomic.Bool                         // Cluster.Node set: this node is elected to step erasure jobs
	forwarder   *api.Forwarder
	registry    *registryView // the region registry (registry.go)
	replServer  *replication.Server
	maxProtocol int                  // Cluster.MaxProtocol, for the forwarding service
	liveDir     *etcdepoch.Directory // pins and live regions (the heal's inbound check, the hand-off)
	pref        []string             // hand-off targets in order
	ecfg        epoch.Config         // Cluster.Epoch with its defaults (TTL and skew for notBefore)
	svc         *edge.Service        // set by serve, before the gRPC server starts
	serving     bool
	once        sync.Once

	grpcMetrics *replication.GRPCMetrics // both sides of the gRPC plane
}

// Peerless reports whether the cluster names no region but self: no Regions
// other than self, no Seeds, no PeerAddrs. Such a region takes its write
// authority from etcd (pins, epochs, its lease) but replicates with nobody,
// so it may run on any engines.
func (c *Cluster) Peerless(self string) bool {
	for _, r := range c.Regions {
		if r != self {
			return false
		}
	}
	return len(c.Seeds) == 0 && len(c.PeerAddrs) == 0
}

// replicaStore is a region's store as replication ships from and applies to
// it: the embedded store, or Cassandra (both pass edgetest.RunReplica).
type replicaStore interface {
	replica.Source
	replica.Sink
	edge.JobStore
}

var (
	_ replicaStore = (*pebblestore.Store)(nil)
	_ replicaStore = (*cassandra.Store)(nil)
)

// startCluster brings up leases, the authority, the controller, the gRPC
// services, membership and the shipper. The service is wired by the caller.
// With st nil (a region on the production engines, Peerless) it starts only
// the lease and the authority: pins and epochs in etcd, no replication.
func startCluster(ctx context.Context, name string, c *Cluster, st replicaStore, clk clock.Clock, log *slog.Logger) (*clusterParts, error) {
	if c.Etcd == nil {
		return nil, errors.New("region: Cluster.Etcd is required")
	}
	ecfg, err := c.Epoch.WithDefaults()
	if err != nil {
		return nil, err
	}
	if st == nil && !c.Peerless(name) {
		return nil, fmt.Errorf("region %s: no store to replicate (only a region on the embedded store replicates, or one on Cassandra); this Cluster names other regions", name)
	}
	if c.TLS != nil && c.TLS.Region != name {
		return nil, fmt.Errorf("region %s: its certificate names region %q", name, c.TLS.Region)
	}
	for _, k := range append([][]byte{c.GossipKey}, c.GossipOldKeys...) {
		if n := len(k); n != 0 && n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("region %s: a gossip key is %d bytes; it must be 16, 24 or 32", name, n)
		}
	}
	if len(c.GossipOldKeys) > 0 && len(c.GossipKey) == 0 {
		return nil, fmt.Errorf("region %s: old gossip keys without a gossip key", name)
	}
	p := &clusterParts{grpcDone: make(chan struct{}), regions: c.Regions}
	if st != nil {
		p.jobs, p.store = st, st
	}
	fail := func(err error) (*clusterParts, error) {
		p.close()
		return nil, err
	}
	dir, err := etcdepoch.NewDirectory(c.Etcd, ecfg)
	if err != nil {
		return fail(err)
	}
	if len(c.Regions) > 0 {
		if err := dir.Init(ctx, ecfg.Ranges, c.Regions); err != nil {
			return fail(fmt.Errorf("region %s: init pins: %w", name, err))
		}
	}
	state, err := checkRegistry(ctx, dir, name)
	if err != nil {
		return fail(err)
	}
	var rebuilt func() bool
	if rb, ok := st.(interface{ Rebuilding() []string }); ok {
		rebuilt = func() bool { return len(rb.Rebuilding()) == 0 }
	}
	p.registry = startRegistryView(ctx, dir, name, state == epoch.StateJoining, rebuilt, ecfg.TTL, clk.Now, log)
	if st == nil {
		return p.startAuthority(ctx, name, c, ecfg, "", clk)
	}
	listen := c.GRPCListen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	p.grpcLn, err = net.Listen("tcp", listen)
	if err != nil {
		return fail(err)
	}
	grpcAddr := p.grpcLn.Addr().String()
	if c.GRPCAdvertise != "" {
		grpcAddr = c.GRPCAdvertise
	}
	var advHost string
	var advPort int
	if c.GossipAdvertise != "" {
		h, ps, err := net.SplitHostPort(c.GossipAdvertise)
		if err == nil {
			advPort, err = strconv.Atoi(ps)
		}
		if err != nil || h == "" {
			return fail(fmt.Errorf("region %s: GossipAdvertise %q: want host:port", name, c.GossipAdvertise))
		}
		if net.ParseIP(h) == nil { // memberlist advertises an IP: resolve a name once, at start
			ips, err := net.DefaultResolver.LookupIPAddr(ctx, h)
			if err != nil || len(ips) == 0 {
				return fail(fmt.Errorf("region %s: GossipAdvertise %q: resolve %s: %v", name, c.GossipAdvertise, h, err))
			}
			h = ips[0].IP.String()
		}
		advHost = h
	}

	if _, err := p.startAuthority(ctx, name, c, ecfg, grpcAddr, clk); err != nil {
		return nil, err // startAuthority closed p
	}
	pref := c.Preference
	if len(pref) == 0 {
		pref = c.Regions
	}
	p.pref = pref
	p.controller, err = etcdepoch.StartController(c.Etcd, etcdepoch.ControllerConfig{Config: ecfg, Name: name, Preference: pref,
		Homes: c.Regions, Clock: clk, FailbackAfter: c.FailbackAfter, FailbackRate: c.FailbackRate})
	if err != nil {
		return fail(err)
	}

	p.grpcMetrics = replication.NewGRPCMetrics(clk)
	sopts := append(replication.ServerOptions(tracing.ServerOptions(c.tracer, name, log)...), p.grpcMetrics.ServerOption())
	var creds func(string) credentials.TransportCredentials
	if c.TLS != nil {
		sopts = append(sopts, grpc.Creds(c.TLS.ServerCredentials()))
		creds = c.TLS.ClientCredentials
	}
	p.grpcSrv = grpc.NewServer(sopts...)
	p.health = health.NewServer()
	p.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(p.grpcSrv, p.health)
	rs, err := replication.NewServer(replication.ServerConfig{
		Region: name, Partitions: st.Partitions(), Sink: st, Logger: log, Regions: c.Regions,
		RegionsFunc: func() []string { return p.registry.Allowed(c.Regions) },
		MaxEpoch:    p.maxEpoch, MaxProtocol: c.MaxProtocol,
		Fencer: &catchup.Fencer{Pins: p.authority, Log: catchup.SourceHeads(st), Pending: pendingOf(st), Settle: p.settle(c, ecfg), SelfWrites: p.authority, Clock: clk, Writes: func() catchup.Quiescer {
			if p.svc == nil {
				return nil
			}
			return p.svc
		}},
	})
	if err != nil {
		return fail(err)
	}
	rs.Register(p.grpcSrv)
	p.replServer = rs

	nodeName := ""
	if c.Node != "" {
		nodeName = name + "/" + c.Node
	}
	p.member, err = replication.NewMembership(replication.MembershipConfig{
		Region: name, NodeName: nodeName, GRPCAddr: grpcAddr, HTTPAddr: c.HTTPAdvertise, BindAddr: c.GossipBind, BindPort: c.GossipPort,
		AdvertiseAddr: advHost, AdvertisePort: advPort,
		SecretKey: c.GossipKey, OldKeys: c.GossipOldKeys, ProtoMax: c.MaxProtocol,
	})
	if err != nil {
		return fail(err)
	}
	if len(c.Seeds) > 0 {
		if _, err := p.member.Join(c.Seeds); err != nil {
			log.Warn("memberlist join failed; will learn peers when they join us", "seeds", c.Seeds, "err", err)
		}
	}
	dialOpts := tracing.DialOptions(c.tracer, name)
	p.transport, err = replication.NewGRPCTransport(replication.TransportConfig{Credentials: creds, MaxProtocol: c.MaxProtocol,
		Interceptors: []grpc.UnaryClientInterceptor{p.grpcMetrics.ClientInterceptor()}, DialOptions: dialOpts})
	if err != nil {
		return fail(err)
	}
	p.peers = overridePeers{src: p.member, addrs: c.PeerAddrs, skip: p.registry.Retired}
	scfg := replication.ShipperConfig{
		Region: name, Source: st, Transport: p.transport, Peers: p.peers, Clock: clk, Logger: log,
		AntiEntropy: c.AntiEntropy,
	}
	startShipper := func() (io.Closer, error) {
		sh, err := replication.NewShipper(scfg)
		if err != nil {
			return nil, err
		}
		p.shipperRef.Store(sh)
		return closerFunc(func() error { p.shipperRef.CompareAndSwap(sh, nil); return sh.Close() }), nil
	}
	p.forwarder = api.NewForwarder(name, p.resolve, creds)
	p.forwarder.MaxProtocol = c.MaxProtocol
	// Forwards, erasure relays and session reads are gRPC calls to peers too:
	// the same client metrics as the shipper's.
	p.forwarder.DialOptions = append(append([]grpc.DialOption(nil), dialOpts...),
		grpc.WithChainUnaryInterceptor(p.grpcMetrics.ClientInterceptor()))
	p.maxProtocol = c.MaxProtocol
	barrier, err := catchup.NewBarrier(catchup.Config{
		Self: name, Partitions: st.Partitions(), Pins: p.authority, Dir: dir, Cursors: st,
		Asker: p.transport, Resolve: p.resolve, Clock: clk, Logger: log,
	})
	if err != nil {
		return fail(err)
	}
	p.liveDir, p.ecfg = dir, ecfg
	startBarrier := func() (io.Closer, error) {
		l := catchup.Start(barrier, clk, 0)
		return closerFunc(func() error { l.Close(); return nil }), nil
	}
	startErasing := func() (io.Closer, error) {
		p.erasing.Store(true)
		return closerFunc(func() error { p.erasing.Store(false); return nil }), nil
	}
	if err := p.runOnce(c, name, ecfg, log, []role{{"barrier", startBarrier}, {"eraser", startErasing}, {"shipper", startShipper}}); err != nil {
		return fail(err)
	}
	return p, nil
}

// startAuthority starts the region's lease keepalive and its pin Authority,
// and waits for the pin table's first read.
func (p *clusterParts) startAuthority(ctx context.Context, name string, c *Cluster, ecfg epoch.Config, grpcAddr string, clk clock.Clock) (*clusterParts, error) {
	fail := func(err error) (*clusterParts, error) {
		p.close()
		return nil, err
	}
	var err error
	if c.Node != "" {
		if p.nodes, err = etcdepoch.StartNodes(ctx, c.Etcd, etcdepoch.NodesConfig{Config: ecfg, Region: name,
			Self: etcdepoch.NodeInfo{Node: c.Node, HTTP: c.HTTPAdvertise, GRPC: grpcAddr}}); err != nil {
			return fail(fmt.Errorf("region %s: %w", name, err))
		}
	}
	p.keepalive, err = etcdepoch.StartKeepAlive(ctx, c.Etcd, etcdepoch.KeepAliveConfig{
		Config: ecfg, Region: epoch.RegionInfo{Name: name, HTTP: c.HTTPAdvertise, GRPC: grpcAddr}, Clock: clk,
		Shared: c.Node != "",
	})
	if err != nil {
		return fail(err)
	}
	p.authority, err = etcdepoch.NewAuthority(c.Etcd, etcdepoch.AuthorityConfig{Config: ecfg, Self: name, Freshness: p.keepalive, Clock: clk})
	if err != nil {
		return fail(err)
	}
	syncCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = p.authority.WaitSynced(syncCtx)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("region %s: pin table did not sync: %w", name, err))
	}
	return p, nil
}

// serve registers the forwarding service for svc and starts the gRPC server.
func (p *clusterParts) serve(svc *edge.Service) {
	p.svc = svc
	if p.grpcSrv == nil {
		return // peerless: nothing to serve
	}
	api.RegisterForward(p.grpcSrv, svc, api.ForwardPolicy{Regions: p.regions, Jobs: p.jobs, Eraser: p.eraser.Load,
		RegionsFunc: func() []string { return p.registry.Allowed(p.regions) },
		MaxProtocol: p.maxProtocol})
	p.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	p.serving = true
	go func() {
		defer close(p.grpcDone)
		_ = p.grpcSrv.Serve(p.grpcLn)
	}()
}

// resolve finds a region's gRPC address: an override, else gossip.
func (p *clusterParts) resolve(region string) (string, bool) {
	if a, ok := p.peers.addrs[region]; ok {
		return a, true
	}
	for _, peer := range p.peers.Peers() {
		if peer.Region == region {
			return peer.GRPCAddr, true
		}
	}
	return "", false
}

func (p *clusterParts) close() {
	p.once.Do(func() {
		p.stopOnce()
		if p.transport != nil {
			_ = p.transport.Close()
		}
		if p.forwarder != nil {
			_ = p.forwarder.Close()
		}
		if p.member != nil {
			_ = p.member.Close()
		}
		if p.health != nil {
			p.health.Shutdown() // NOT_SERVING to every watcher, first
		}
		if p.serving {
			// Let calls in flight (a forwarded write, a push being applied)
			// finish, bounded: their callers' deadlines are seconds.
			stopped := make(chan struct{})
			go func() { p.grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(grpcStopGrace):
				p.grpcSrv.Stop()
				<-stopped
			}
			<-p.grpcDone
		} else if p.grpcLn != nil {
			_ = p.grpcLn.Close()
		}
		if p.controller != nil {
			p.controller.Close()
		}
		if p.authority != nil {
			p.authority.Close()
		}
		last := p.lastNode() && !p.crash
		if p.nodes != nil {
			if p.crash {
				p.nodes.Abandon()
			} else {
				p.nodes.Close() // the other nodes take this one's partitions at once
			}
		}
		if p.keepalive != nil {
			if last {
				_ = p.keepalive.Close()
			} else {
				p.keepalive.Abandon() // the region's lease lives on through its other nodes
			}
		}
		p.registry.close()
	})
}

// shipperStats is the shipper's per-peer state (none for a peerless region).
func (p *clusterParts) shipperStats() []replication.PeerStats {
	if sh := p.shipperRef.Load(); sh != nil {
		return sh.Stats()
	}
	return nil
}

// Stats implements replication.PeerStatser over whichever shipper runs.
func (p *clusterParts) Stats() []replication.PeerStats { return p.shipperStats() }

// GossipAddr is this region's memberlist address (host:port), to give other
// regions as a seed; "" for a region without a Cluster.
func (r *Region) GossipAddr() string {
	if r.cluster == nil || r.cluster.member == nil {
		return ""
	}
	return r.cluster.member.Addr()
}

// GRPCAddr is this region's replication and forwarding listener (host:port);
// "" for a region without one.
func (r *Region) GRPCAddr() string {
	if r.cluster == nil || r.cluster.grpcLn == nil {
		return ""
	}
	return r.cluster.grpcLn.Addr().String()
}

// noLeaseAuthority grants the pinned epoch whenever the local pin table names
// this region, ignoring lease freshness and notBefore (Unsafe.NoLeaseCheck).
type noLeaseAuthority struct {
	a    *etcdepoch.Authority
	self string
}

func (n noLeaseAuthority) Authorize(ctx context.Context, user string) (uint64, error) {
	e, err := n.a.Authorize(ctx, user)
	if err == nil || !errors.Is(err, edge.ErrFailClosed) {
		return e, err
	}
	if owner, ep := n.a.Owner(user); owner == n.self {
		return ep, nil
	}
	return e, err
}

// userHome says whether this region owns user's range, else the owner's HTTP
// base URL (from gossip).
// epochSlack is how far past this region's view of a range's pin a replicated
// edge version may be while this region cannot prove its pin table current.
// A region cut off from etcd keeps receiving its peers' writes under pins it
// has not seen (its counts must keep converging), so the bound cannot be the
// view then; no partition sees 65 536 moves of one range, while a planted
// epoch near 2^63 (which would outrank every real write of the user forever)
// is refused.
const epochSlack = 1 << 16

// maxEpoch bounds a replicated edge version of user. With a fresh proof of
// its pin table (LeaseProof) this region has read the table after every pin
// whose epoch may already be written: a new owner writes only after
// notBefore = commit + TTL + max skew, and a fresh proof is younger than
// TTL − margin. So the bound is the view itself; a version past it is
// refused retryably (the shipper sends it again once the table has caught
// up, should a read have raced the move).
func (p *clusterParts) maxEpoch(user string) uint64 {
	_, e := p.authority.Owner(user)
	if p.authority.LeaseProof() == nil {
		return e
	}
	return e + epochSlack
}

func (p *clusterParts) home(user string) (owner string, self bool, err error) {
	owner, _ = p.authority.Owner(user)
	if owner == "" {
		return "", false, fmt.Errorf("region: no pin for user's range")
	}
	if owner == p.authority.Self() {
		return owner, true, nil
	}
	if p.member == nil { // peerless: this region is the only one
		return owner, false, fmt.Errorf("region: range pinned to %s, a region this one does not replicate with", owner)
	}
	return owner, false, nil
}

// The production implementations of what the planned-move barrier consumes.
var (
	_ catchup.HeadsAsker = (*replication.GRPCTransport)(nil)
	_ catchup.PinTable   = (*etcdepoch.Authority)(nil)
	_ catchup.Directory  = (*etcdepoch.Directory)(nil)
)

// pendingOf is the store's catchup.Pending, if it has decided writes that
// can wait outside its log (Cassandra); nil for the embedded store.
func pendingOf(st any) catchup.Pending {
	if p, ok := st.(catchup.Pending); ok {
		return p
	}
	return nil
}
