package chaos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/chaos/proxy"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/peertls"
)

// BuildLikesd compiles likesd (without -race) into dir and returns the
// binary's path. It runs `go build` in the module that holds this package.
func BuildLikesd(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "likesd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/likesd")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build likesd: %w\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot finds the directory of the `likes` module from the working
// directory (the module root under `go run`, the package folder under `go test`).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the likes module: run from the repository")
	}
	return filepath.Dir(mod), nil
}

// ClusterConfig configures the processes of one chaos run.
type ClusterConfig struct {
	Binary      string // likesd
	Dir         string // data folders go under it
	LogDir      string // process logs (default Dir/logs)
	Regions     []string
	Secret      string
	LeaseTTL    time.Duration
	Window      time.Duration
	AntiEntropy time.Duration
	// FailbackAfter is likesd's --failback-after (default 3s): ranges come
	// home this long after their region is back.
	FailbackAfter time.Duration
	Partitions    int
	Ranges        int
	Unsafe        string // --unsafe-break
	// EngineArgs, when set, are a region's extra likesd flags (the engines').
	EngineArgs func(region string) []string
	// Nodes is how many likesd processes serve a region (default 1). A region
	// of several needs EngineArgs (they share its engines); its nodes are
	// REGION-1, REGION-2, …, reached through one load balancer per link.
	Nodes map[string]int
	Logf  func(format string, args ...any)
}

// Link is a directed link: From dials To ("etcd" for the etcd link).
type Link struct{ From, To string }

func (l Link) String() string { return l.From + "->" + l.To }

// EtcdNode names etcd in links.
const EtcdNode = "etcd"

// proc is one OS process (its own process group).
type proc struct {
	name string
	args []string
	env  []string
	log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // SIGSTOPped
}

func (p *proc) start(bin string) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start %s: %s %s\n", p.name, time.Now().Format(time.RFC3339Nano), bin, strings.Join(p.args, " "))
	cmd := exec.Command(bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.stopped = cmd, done, false
	p.mu.Unlock()
	return nil
}

// running reports whether the process is alive (maybe stopped).
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: not started", p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill sends SIGKILL to the group and waits for the process (bounded).
func (p *proc) kill(timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.stopped = false
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGKILL", p.name, cmd.Process.Pid, timeout)
	}
}

// Node is one likesd run process of a region and its addresses.
type Node struct {
	Name   string // the region's name when it is its only node
	HTTP   string // host:port
	GRPC   string
	Gossip string
	proc   *proc
}

// URL is the node's base URL.
func (n *Node) URL() string { return "http://" + n.HTTP }

// Region is a region's nodes and the address clients reach it on.
type Region struct {
	Name  string
	Nodes []*Node
	// HTTP is where clients reach the region: its only node's address, or
	// with several nodes a TCP load balancer over them (never faulted).
	HTTP string
	lb   *proxy.Proxy
}

// URL is the region's base URL.
func (r *Region) URL() string { return "http://" + r.HTTP }

// Node returns the named node of the region, or nil.
func (r *Region) Node(name string) *Node {
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func (r *Region) grpcAddrs() []string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, n.GRPC)
	}
	return out
}

// Cluster is etcd, the regions and the proxies of one chaos run.
type Cluster struct {
	cfg      ClusterConfig
	etcd     *proc
	etcdAddr string
	regions  map[string]*Region
	proxies  map[Link]*proxy.Proxy
	cli      *clientv3.Client
	dir      *etcdepoch.Directory
	ecfg     epoch.Config
	admin    string
	http     *http.Client
	ports    map[int]bool
}

// StartCluster starts etcd, the proxies and every region, and waits until all
// regions serve and replicate to each other. On error everything started is
// stopped.
func StartCluster(ctx context.Context, cfg ClusterConfig) (c *Cluster, err error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ecfg, err := epoch.Config{Ranges: cfg.Ranges, TTL: cfg.LeaseTTL}.WithDefaults()
	if err != nil {
		return nil, err
	}
	c = &Cluster{
		cfg: cfg, ecfg: ecfg, regions: map[string]*Region{}, proxies: map[Link]*proxy.Proxy{}, ports: map[int]bool{},
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}},
	}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	c.admin, err = auth.Sign([]byte(cfg.Secret), "chaos-admin", true, 12*time.Hour, time.Now())
	if err != nil {
		return c, err
	}
	logs := cfg.LogDir
	if logs == "" {
		logs = filepath.Join(cfg.Dir, "logs")
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return c, err
	}
	env := append(os.Environ(), auth.EnvSecret+"="+cfg.Secret)

	// etcd: client port P, peer port P+1.
	etcdPort, err := c.freePair()
	if err != nil {
		return c, err
	}
	c.etcdAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdPort))
	c.etcd = &proc{name: "etcd", env: env, log: filepath.Join(logs, "etcd.log"), args: []string{
		"etcd", "--client-port", strconv.Itoa(etcdPort), "--data", filepath.Join(cfg.Dir, "data", "etcd"),
	}}
	if err := c.etcd.start(cfg.Binary); err != nil {
		return c, err
	}
	c.cli, err = etcdepoch.NewClient([]string{"http://" + c.etcdAddr})
	if err != nil {
		return c, err
	}
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.cli.Get(cctx, "/likes/meta/ranges")
		return err
	}); err != nil {
		return c, fmt.Errorf("etcd did not come up: %w (see %s)", err, c.etcd.log)
	}
	c.dir, err = etcdepoch.NewDirectory(c.cli, ecfg)
	if err != nil {
		return c, err
	}

	for _, name := range cfg.Regions {
		k := max(cfg.Nodes[name], 1)
		if k > 1 && cfg.EngineArgs == nil {
			return c, fmt.Errorf("chaos: region %s on %d nodes needs the engines (an embedded region is one process)", name, k)
		}
		r := &Region{Name: name}
		for i := range k {
			n := &Node{Name: name}
			if k > 1 {
				n.Name = fmt.Sprintf("%s-%d", name, i+1)
			}
			for _, p := range []*string{&n.HTTP, &n.GRPC} {
				port, err := c.freePort(false)
				if err != nil {
					return c, err
				}
				*p = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			}
			gp, err := c.freePort(true)
			if err != nil {
				return c, err
			}
			n.Gossip = net.JoinHostPort("127.0.0.1", strconv.Itoa(gp))
			r.Nodes = append(r.Nodes, n)
		}
		r.HTTP = r.Nodes[0].HTTP
		if k > 1 {
			var more []string
			for _, n := range r.Nodes[1:] {
				more = append(more, n.HTTP)
			}
			if r.lb, err = proxy.New(name+"-lb", "127.0.0.1:0", r.Nodes[0].HTTP, more...); err != nil {
				return c, err
			}
			r.HTTP = r.lb.Addr()
		}
		c.regions[name] = r
	}
	// One proxy per directed link; a link to a region of several nodes
	// balances over them.
	for _, from := range cfg.Regions {
		if err := c.addProxy(Link{from, EtcdNode}, c.etcdAddr); err != nil {
			return c, err
		}
		for _, to := range cfg.Regions {
			if to != from {
				if err := c.addProxy(Link{from, to}, c.regions[to].grpcAddrs()...); err != nil {
					return c, err
				}
			}
		}
	}
	// Mutual TLS and keyed gossip between the regions, as in a deployment
	// (the proxies pass the TLS bytes through).
	certs := filepath.Join(cfg.Dir, "certs")
	if _, err := peertls.EnsureDev(certs, cfg.Regions); err != nil {
		return c, err
	}
	gossipKey := filepath.Join(certs, "gossip.key")
	if err := peertls.WriteNew(gossipKey, []byte(base64.StdEncoding.EncodeToString([]byte("likes-chaos-gossip-key-32-bytes!"))+"\n"), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return c, err
	}
	caCert, _ := peertls.Files(certs, "ca")
	for i, name := range cfg.Regions {
		r := c.regions[name]
		for j, n := range r.Nodes {
			if err := c.startNode(r, n, env, certs, caCert, gossipKey, logs); err != nil {
				return c, err
			}
			if i == 0 && j == 0 {
				// The first region creates the pins; wait for it so the others
				// do not race it with a different view.
				if err := c.waitHealthy(ctx, n, 60*time.Second); err != nil {
					return c, err
				}
			}
		}
	}
	for _, name := range cfg.Regions {
		for _, n := range c.regions[name].Nodes {
			if err := c.waitHealthy(ctx, n, 60*time.Second); err != nil {
				return c, err
			}
		}
	}
	if err := c.WaitReplicating(ctx, 60*time.Second); err != nil {
		return c, err
	}
	return c, nil
}

// startNode starts one node of region r: its flags name every other node's
// gossip address as a seed and reach every peer region through its link.
func (c *Cluster) startNode(r *Region, n *Node, env []string, certs, caCert, gossipKey, logs string) error {
	cfg, name := c.cfg, r.Name
	var seeds, peers []string
	for _, other := range cfg.Regions {
		for _, on := range c.regions[other].Nodes {
			if on != n {
				seeds = append(seeds, on.Gossip)
			}
		}
		if other != name {
			peers = append(peers, other+"="+c.proxies[Link{name, other}].Addr())
		}
	}
	args := []string{"run",
		"--region", name, "--regions", strings.Join(cfg.Regions, ","),
		"--etcd", "http://" + c.proxies[Link{name, EtcdNode}].Addr(),
		"--http", n.HTTP, "--grpc", n.GRPC, "--gossip", n.Gossip,
		"--seeds", strings.Join(seeds, ","), "--peer-addrs", strings.Join(peers, ","),
		"--data", filepath.Join(cfg.Dir, "data"),
		"--lease-ttl", cfg.LeaseTTL.String(), "--window", cfg.Window.String(),
		"--anti-entropy", cfg.AntiEntropy.String(),
		"--failback-after", failbackAfter(cfg).String(), "--failback-rate", "50", "--drain-timeout", "20s",
		"--partitions", strconv.Itoa(cfg.Partitions), "--ranges", strconv.Itoa(cfg.Ranges),
	}
	cert, key := peertls.Files(certs, name)
	args = append(args, "--tls-cert", cert, "--tls-key", key, "--tls-ca", caCert, "--gossip-key-file", gossipKey)
	if cfg.Unsafe != "" {
		args = append(args, "--unsafe-break", cfg.Unsafe)
	}
	if cfg.EngineArgs != nil {
		args = append(args, cfg.EngineArgs(name)...)
	}
	if len(r.Nodes) > 1 {
		args = append(args, "--node", n.Name)
	}
	renv := append(append([]string(nil), env...), diskFullEnv+"="+c.diskFullFile(name))
	n.proc = &proc{name: n.Name, env: renv, args: args, log: filepath.Join(logs, n.Name+".log")}
	return n.proc.start(cfg.Binary)
}

func (c *Cluster) addProxy(l Link, upstream ...string) error {
	p, err := proxy.New(l.String(), "127.0.0.1:0", upstream[0], upstream[1:]...)
	if err != nil {
		return err
	}
	c.proxies[l] = p
	return nil
}

// portBase is the low end of the kernel's ephemeral port range: ports below
// it are never handed out for outgoing connections or ":0" listeners (the
// proxies), so a port picked there stays free for a region across restarts.
func portBase() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > 12000 {
				return lo
			}
		}
	}
	return 32768
}

// freePort finds a port free on loopback (also for UDP when udp is set:
// memberlist binds both), below the ephemeral range, that this cluster has not
// handed out yet.
func (c *Cluster) freePort(udp bool) (int, error) {
	hi := portBase()
	span := hi - 10000
	start := int(time.Now().UnixNano()%int64(span)) + os.Getpid()%span
	for i := range 2000 {
		port := 10000 + (start+i*7919)%span
		if c.ports[port] || !portFree(port, udp) {
			continue
		}
		c.ports[port] = true
		return port, nil
	}
	return 0, errors.New("no free port found")
}

func portFree(port int, udp bool) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	if udp {
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		_ = u.Close()
	}
	return true
}

// freePair finds P such that P and P+1 are free.
func (c *Cluster) freePair() (int, error) {
	for range 200 {
		p, err := c.freePort(false)
		if err != nil {
			return 0, err
		}
		if p+1 >= portBase() || c.ports[p+1] || !portFree(p+1, false) {
			continue
		}
		c.ports[p+1] = true
		return p, nil
	}
	return 0, errors.New("no free port pair found")
}

// poll calls f every interval until it succeeds, ctx ends or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (c *Cluster) waitHealthy(ctx context.Context, n *Node, timeout time.Duration) error {
	err := poll(ctx, timeout, 100*time.Millisecond, func() error {
		if !n.proc.running() {
			return fmt.Errorf("%s exited", n.Name)
		}
		var h map[string]string
		return c.getJSON(ctx, n, "/healthz", false, &h)
	})
	if err != nil {
		return fmt.Errorf("%s not healthy: %w (see %s)", n.Name, err, n.proc.log)
	}
	return nil
}

// Status is the part of GET /v1/admin/status the suite reads.
type Status struct {
	Region        string            `json:"region"`
	Watermarks    map[string]string `json:"watermarks"`
	AsOf          time.Time         `json:"asOf"`
	AggregatorLag uint64            `json:"aggregatorLagEvents"`
	Partitions    int               `json:"partitions"`
	Replication   []PeerStatus      `json:"replication"`
	LastKeepalive string            `json:"lastKeepaliveAgo"`
	PinsOwned     int               `json:"pinsOwned"`
}

// PeerStatus is one replication peer in a status (replication.PeerStats).
type PeerStatus struct {
	Region        string
	Active        bool
	Handshaken    bool
	LagEvents     uint64
	CellsCaughtUp bool
	Consecutive   int
	LastError     string
}

// Status reads a region's admin status. A region of several nodes is what
// its running nodes say together: the largest aggregator lag, the earliest
// asOf, and the replication of the node that ships (one is elected).
func (c *Cluster) Status(ctx context.Context, name string) (Status, error) {
	var out Status
	seen := 0
	for _, n := range c.regions[name].Nodes {
		if len(c.regions[name].Nodes) > 1 && !n.proc.running() {
			continue // a killed node is not part of the region until it is back
		}
		var st Status
		if err := c.getJSON(ctx, n, "/v1/admin/status", true, &st); err != nil {
			return st, err
		}
		if seen++; seen == 1 {
			out = st
			continue
		}
		out.AggregatorLag = max(out.AggregatorLag, st.AggregatorLag)
		if st.AsOf.Before(out.AsOf) {
			out.AsOf = st.AsOf
		}
		if len(out.Replication) == 0 {
			out.Replication = st.Replication
		}
	}
	if seen == 0 {
		return out, fmt.Errorf("no node of region %s is running", name)
	}
	return out, nil
}

// replicatingTo checks that st ships to every other region and is caught up.
func (c *Cluster) replicatingTo(st Status) error {
	for _, other := range c.cfg.Regions {
		if other == st.Region {
			continue
		}
		found := false
		for _, p := range st.Replication {
			if p.Region == other && p.Active {
				found = true
				if !p.Handshaken || p.LagEvents > 0 || !p.CellsCaughtUp {
					return fmt.Errorf("%s→%s: handshaken %v, lag %d events, cells caught up %v (last error %q)",
						st.Region, other, p.Handshaken, p.LagEvents, p.CellsCaughtUp, p.LastError)
				}
			}
		}
		if !found {
			return fmt.Errorf("%s does not replicate to %s", st.Region, other)
		}
	}
	return nil
}

// WaitReplicating waits until every region replicates to every other one with
// no lag.
func (c *Cluster) WaitReplicating(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, 200*time.Millisecond, func() error {
		for _, name := range c.cfg.Regions {
			st, err := c.Status(ctx, name)
			if err != nil {
				return err
			}
			if err := c.replicatingTo(st); err != nil {
				return err
			}
		}
		return nil
	})
}

// Quiesce waits until, at every region, aggregators and replication have no
// lag and asOf has passed since (so every region's cells up to since are
// everywhere), twice in a row at least a second apart. It returns the last
// statuses.
func (c *Cluster) Quiesce(ctx context.Context, since time.Time, timeout time.Duration) (map[string]Status, error) {
	var last map[string]Status
	var firstOK time.Time
	said := time.Now()
	err := poll(ctx, timeout, 250*time.Millisecond, func() (err error) {
		now := time.Now()
		defer func() { // a long wait says what it waits for
			if err != nil && now.Sub(said) >= 10*time.Second {
				said = now
				c.cfg.Logf("quiescing: %v", err)
			}
		}()
		sts := map[string]Status{}
		bar := since
		if !firstOK.IsZero() {
			bar = firstOK
		}
		for _, name := range c.cfg.Regions {
			st, err := c.Status(ctx, name)
			if err != nil {
				firstOK = time.Time{}
				return err
			}
			sts[name] = st
			last = sts
			if st.AggregatorLag > 0 {
				firstOK = time.Time{}
				return fmt.Errorf("%s: aggregator lag %d events", name, st.AggregatorLag)
			}
			if err := c.replicatingTo(st); err != nil {
				firstOK = time.Time{}
				return err
			}
			if st.AsOf.Before(bar) {
				// Not yet past the first quiet moment: wait for it without
				// starting over (an asOf always trails the clock a little;
				// on the engines by more than this poll's interval).
				if !st.AsOf.Before(since) && !firstOK.IsZero() && now.Sub(firstOK) < 10*time.Second {
					return fmt.Errorf("%s: asOf %s not yet past the first quiet moment %s", name, st.AsOf.Format(time.RFC3339Nano), bar.Format(time.RFC3339Nano))
				}
				firstOK = time.Time{}
				return fmt.Errorf("%s: asOf %s is before %s", name, st.AsOf.Format(time.RFC3339Nano), bar.Format(time.RFC3339Nano))
			}
		}
		if firstOK.IsZero() {
			firstOK = now
			return errors.New("quiet once; confirming")
		}
		if now.Sub(firstOK) < time.Second {
			return errors.New("confirming")
		}
		return nil
	})
	return last, err
}

// endpoint is a region (through its load balancer) or one node.
type endpoint interface{ URL() string }

func (c *Cluster) getJSON(ctx context.Context, at endpoint, path string, admin bool, out any) error {
	return c.doJSON(ctx, http.MethodGet, at, path, "", admin, 3*time.Second, out)
}

// doJSON sends one request (body: a JSON document, "" for none) and decodes
// a 200 answer into out; any other status is an error with the body.
func (c *Cluster) doJSON(ctx context.Context, method string, at endpoint, path, body string, admin bool, timeout time.Duration, out any) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(cctx, method, at.URL()+path, rd)
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+c.admin)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s%s: %d %s", method, at.URL(), path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}

// Recount is one item a region's reconciliation found mismatched (its
// LIKED edges against the sum of its cells).
type Recount struct {
	Item     string `json:"itemId"`
	Liked    int64  `json:"likedEdges"`
	Cells    int64  `json:"cellSum"`
	Mismatch int64  `json:"mismatch"`
}

// Reconcile asks a region (its first running node) to recount every item
// without healing (POST /v1/admin/reconcile) and returns the mismatches.
// On Cassandra a recount reads every item's cell partitions: one request
// may take long on a loaded machine, hence its own timeout.
func (c *Cluster) Reconcile(ctx context.Context, name string) ([]Recount, error) {
	var at *Node
	for _, n := range c.regions[name].Nodes {
		if n.proc.running() {
			at = n
			break
		}
	}
	if at == nil {
		return nil, fmt.Errorf("no node of region %s is running", name)
	}
	var rep struct {
		Mismatched []Recount `json:"mismatched"`
	}
	if err := c.doJSON(ctx, http.MethodPost, at, "/v1/admin/reconcile", `{}`, true, 2*time.Minute, &rep); err != nil {
		return nil, fmt.Errorf("reconcile at %s: %w", at.Name, err)
	}
	return rep.Mismatched, nil
}

// Regions lists the region names.
func (c *Cluster) Regions() []string { return append([]string(nil), c.cfg.Regions...) }

// Region returns a region.
func (c *Cluster) Region(name string) *Region { return c.regions[name] }

// Node finds a node by name, with its region.
func (c *Cluster) Node(name string) (*Region, *Node) {
	for _, r := range c.regions {
		if n := r.Node(name); n != nil {
			return r, n
		}
	}
	return nil, nil
}

// MultiNode lists the regions served by several nodes, in region order.
func (c *Cluster) MultiNode() []string {
	var out []string
	for _, name := range c.cfg.Regions {
		if len(c.regions[name].Nodes) > 1 {
			out = append(out, name)
		}
	}
	return out
}

// Etcd is the runner's own (direct, never proxied) etcd client.
func (c *Cluster) Etcd() *clientv3.Client { return c.cli }

// Directory is the pins directory over the runner's client.
func (c *Cluster) Directory() *etcdepoch.Directory { return c.dir }

// EpochConfig is the cluster's epoch configuration.
func (c *Cluster) EpochConfig() epoch.Config { return c.ecfg }

// AdminToken is an admin bearer token.
func (c *Cluster) AdminToken() string { return c.admin }

// SetLink sets one directed link's mode.
func (c *Cluster) SetLink(l Link, m proxy.Mode) error {
	p, ok := c.proxies[l]
	if !ok {
		return fmt.Errorf("no link %s", l)
	}
	p.SetMode(m)
	return nil
}

// PeerLinks are the links between region and the other regions, both ways.
func (c *Cluster) PeerLinks(region string) []Link {
	var out []Link
	for _, other := range c.cfg.Regions {
		if other != region {
			out = append(out, Link{region, other}, Link{other, region})
		}
	}
	return out
}

// HealLinks sets every link back to pass.
func (c *Cluster) HealLinks() {
	for _, p := range c.proxies {
		p.SetMode(proxy.Mode{Kind: proxy.Pass})
	}
}

// LinkStats reports every proxy's counters, by link name, and each load
// balancer's (REGION-lb) in front of a region's nodes.
func (c *Cluster) LinkStats() map[string]proxy.Stats {
	out := map[string]proxy.Stats{}
	for l, p := range c.proxies {
		out[l.String()] = p.Stats()
	}
	for _, r := range c.regions {
		if r.lb != nil {
			out[r.lb.Name()] = r.lb.Stats()
		}
	}
	return out
}

func failbackAfter(cfg ClusterConfig) time.Duration {
	if cfg.FailbackAfter == 0 {
		return 3 * time.Second
	}
	return cfg.FailbackAfter
}

// Stop sends SIGTERM to a region (a graceful stop: it hands its ranges off
// and flushes its shipper) and waits until it has exited, bounded; it returns
// how long that took. A region's nodes stop one after the other, the first
// last: only the last node of a region hands its ranges off.
func (c *Cluster) Stop(name string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	nodes := c.regions[name].Nodes
	for i := len(nodes) - 1; i >= 0; i-- {
		if err := stopProc(nodes[i].proc, timeout-time.Since(start)); err != nil {
			return time.Since(start), err
		}
	}
	return time.Since(start), nil
}

// stopProc SIGTERMs a running process and waits for it to exit, bounded.
func stopProc(p *proc, timeout time.Duration) error {
	if !p.running() {
		return nil
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(max(timeout, time.Second))
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s did not stop within %v of SIGTERM", p.name, timeout)
	}
}

// Kill sends SIGKILL to every node of a region and waits for them.
func (c *Cluster) Kill(name string) error {
	var errs []error
	for _, n := range c.regions[name].Nodes {
		errs = append(errs, n.proc.kill(10*time.Second))
	}
	return errors.Join(errs...)
}

// Restart starts every node of a region that is not running again, on the
// same data folder and ports, and waits until they serve.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	var errs []error
	for _, n := range c.regions[name].Nodes {
		if !n.proc.running() {
			errs = append(errs, c.RestartNode(ctx, n.Name))
		}
	}
	return errors.Join(errs...)
}

// KillNode sends SIGKILL to one node and waits for it.
func (c *Cluster) KillNode(node string) error {
	_, n := c.Node(node)
	if n == nil {
		return fmt.Errorf("no node %q", node)
	}
	return n.proc.kill(10 * time.Second)
}

// RestartNode starts a dead node again and waits until it serves.
func (c *Cluster) RestartNode(ctx context.Context, node string) error {
	_, n := c.Node(node)
	if n == nil {
		return fmt.Errorf("no node %q", node)
	}
	if n.proc.running() {
		return fmt.Errorf("%s is still running", node)
	}
	// The ports were just released; a restart can race their reuse by the
	// kernel only for TIME_WAIT, which Go's SO_REUSEADDR tolerates.
	if err := n.proc.start(c.cfg.Binary); err != nil {
		return err
	}
	return c.waitHealthy(ctx, n, 60*time.Second)
}

// Pause SIGSTOPs every node of a region; Resume SIGCONTs them.
func (c *Cluster) Pause(name string) error  { return c.signalAll(name, syscall.SIGSTOP) }
func (c *Cluster) Resume(name string) error { return c.signalAll(name, syscall.SIGCONT) }

func (c *Cluster) signalAll(name string, sig syscall.Signal) error {
	var errs []error
	for _, n := range c.regions[name].Nodes {
		errs = append(errs, n.proc.signal(sig))
	}
	return errors.Join(errs...)
}

// Running reports whether any node of a region is alive.
func (c *Cluster) Running(name string) bool {
	for _, n := range c.regions[name].Nodes {
		if n.proc.running() {
			return true
		}
	}
	return false
}

// diskFullEnv is cmd/likesd's test-only knob: while the file it names
// exists, the region's store refuses writes as on a full disk.
const diskFullEnv = "LIKES_TESTONLY_DISK_FULL_FILE"

func (c *Cluster) diskFullFile(name string) string {
	return filepath.Join(c.cfg.Dir, "diskfull-"+name)
}

// SetDiskFull makes a region's store refuse writes as a full disk would (the
// region notices within its free-space check interval), or clears it.
func (c *Cluster) SetDiskFull(name string, full bool) error {
	if _, ok := c.regions[name]; !ok {
		return fmt.Errorf("no region %q", name)
	}
	f := c.diskFullFile(name)
	if !full {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(f, nil, 0o644)
}

// HealAll heals every link, clears full disks, resumes paused regions and
// restarts dead ones.
func (c *Cluster) HealAll(ctx context.Context) error {
	c.HealLinks()
	var errs []error
	for _, name := range c.cfg.Regions {
		errs = append(errs, c.SetDiskFull(name, false))
		for _, n := range c.regions[name].Nodes {
			n.proc.mu.Lock()
			stopped := n.proc.stopped
			n.proc.mu.Unlock()
			if stopped {
				errs = append(errs, n.proc.signal(syscall.SIGCONT))
			}
		}
		errs = append(errs, c.Restart(ctx, name))
	}
	return errors.Join(errs...)
}

// OwnedRanges counts the pins per region (a direct etcd read).
func (c *Cluster) OwnedRanges(ctx context.Context) (map[string]int, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	pins, err := c.dir.Pins(cctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range pins {
		out[p.Region]++
	}
	return out, nil
}

// LogFiles lists the process log files.
func (c *Cluster) LogFiles() []string {
	out := []string{c.etcd.log}
	for _, r := range c.regions {
		for _, n := range r.Nodes {
			out = append(out, n.proc.log)
		}
	}
	sort.Strings(out)
	return out
}

// Close kills every process (regions first, then etcd) and closes the proxies
// and clients. Safe on a partly started cluster; idempotent.
func (c *Cluster) Close() {
	if c.cli != nil {
		_ = c.cli.Close()
		c.cli = nil
	}
	for _, r := range c.regions {
		for _, n := range r.Nodes {
			if n.proc != nil {
				if err := n.proc.kill(10 * time.Second); err != nil {
					c.cfg.Logf("cleanup: %v", err)
				}
			}
		}
		if r.lb != nil {
			_ = r.lb.Close()
		}
	}
	if c.etcd != nil {
		if err := c.etcd.kill(10 * time.Second); err != nil {
			c.cfg.Logf("cleanup: %v", err)
		}
	}
	for l, p := range c.proxies {
		_ = p.Close()
		delete(c.proxies, l)
	}
	if t, ok := c.http.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}
