package region_test

// Harness of the three-region integration tests (cluster_test.go): one
// embedded etcd, three real regions ("us", "eu", "ap") on loopback, each with
// its own Pebble store, gRPC replication + forwarding, gossip and HTTP API.
// Every identifier here starts with "tri" so it cannot collide with the other
// test files of the package.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/api/apitest"
	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdembed"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/peertls"
	"github.com/likes-dev/likes/region"
)

// triSecret signs the tokens of the three-region tests.
var triSecret = []byte("three-region-test-secret")

// triNames are the regions, in failover preference order.
var triNames = []string{"us", "eu", "ap"}

// triRanges is R, the number of user ranges.
const triRanges = 16

// triNode is one running region and its HTTP server.
type triNode struct {
	name string
	r    *region.Region
	srv  *httptest.Server
	cfg  region.Config // to restart it (triCluster.restart)
	addr string        // its HTTP listen address
	down bool
}

// triCluster is three regions sharing one embedded etcd.
type triCluster struct {
	ecfg   epoch.Config
	dir    *etcdepoch.Directory
	nodes  []*triNode
	byName map[string]*triNode
	// apCli is ap's own etcd client: closing it cuts ap off from etcd only.
	apCli *clientv3.Client
	hc    *http.Client
	logs  *triLogBuf
	// certs is the folder of the dev CA and region certificates (ca.crt,
	// NAME.crt, NAME.key), ids the regions' identities, gossipKey the
	// memberlist key; all empty with triOpts.plaintext.
	certs     string
	ids       map[string]*peertls.Identity
	gossipKey []byte

	tokMu  sync.Mutex
	tokens map[string]string
}

// triLogBuf keeps the regions' warnings (bounded) to print when a test fails.
type triLogBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *triLogBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 256<<10 {
		b.buf.Next(128 << 10) // drop the oldest half
	}
	return b.buf.Write(p)
}

func (b *triLogBuf) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

func triDial(t *testing.T, e *etcdembed.Embedded) *clientv3.Client {
	t.Helper()
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatalf("dial etcd: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() }) // a second Close (ap's) only errors
	return cli
}

// triOpts adjusts a three-region cluster before it starts: epoch changes the
// epoch configuration, region each region's configuration (defaults: 4
// partitions, 50ms windows, anti-entropy every 500ms).
type triOpts struct {
	epoch  func(*epoch.Config)
	region func(name string, cfg *region.Config)
	// plaintext runs the region-to-region plane without mutual TLS and
	// gossip encryption (the default cluster has both, as likesd dev).
	plaintext bool
	// skipReplicationWait returns once the regions are open, for clusters
	// whose links are cut on purpose.
	skipReplicationWait bool
}

// startTri starts etcd and the three regions and waits until every region
// replicates to both others. Cleanups stop, in order: HTTP servers and
// regions (last opened first), the etcd clients, etcd.
func startTri(t *testing.T) *triCluster { return startTriWith(t, triOpts{}) }

func startTriWith(t *testing.T, o triOpts) *triCluster {
	t.Helper()
	e := epochtest.StartEmbedded(t)
	cli := triDial(t, e)
	apCli := triDial(t, e)
	ecfg := epochtest.Config(t, triRanges) // fresh prefix, TTL 2s, margin 500ms, skew 500ms
	if o.epoch != nil {
		o.epoch(&ecfg)
	}
	dir, err := etcdepoch.NewDirectory(cli, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	c := &triCluster{
		ecfg: ecfg, dir: dir, byName: map[string]*triNode{}, apCli: apCli,
		// Every answer is checked against the API contract (api/openapi.yaml).
		hc: &http.Client{Transport: apitest.Transport(t, tr), Timeout: 15 * time.Second}, logs: &triLogBuf{},
		tokens: map[string]string{},
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if t.Failed() {
			t.Logf("region warnings (tail):\n%s", c.logs.tail(8<<10))
		}
	})
	logger := slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	data := t.TempDir()
	if !o.plaintext {
		c.certs = filepath.Join(data, "certs")
		if c.ids, err = peertls.EnsureDev(c.certs, triNames); err != nil {
			t.Fatal(err)
		}
		c.gossipKey = []byte("0123456789abcdef0123456789abcdef")
	}
	var seeds []string
	for _, name := range triNames {
		etcdCli := cli
		if name == "ap" {
			etcdCli = apCli
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := region.Config{
			Name: name, DataDir: data, Partitions: 4, Window: 50 * time.Millisecond,
			Secret: triSecret, UserRate: -1, Logger: logger,
			Cluster: &region.Cluster{
				Etcd: etcdCli, Epoch: ecfg, Regions: triNames,
				GRPCListen: "127.0.0.1:0", GossipBind: "127.0.0.1", GossipPort: 0, Seeds: seeds,
				HTTPAdvertise: "http://" + ln.Addr().String(),
				AntiEntropy:   500 * time.Millisecond,
				TLS:           c.ids[name], GossipKey: c.gossipKey,
			},
		}
		if o.region != nil {
			o.region(name, &cfg)
		}
		n := &triNode{name: name, cfg: cfg, addr: ln.Addr().String()}
		n.start(t, ln)
		t.Cleanup(func() { n.stop(t) })
		if seeds == nil {
			if seeds = []string{n.r.GossipAddr()}; seeds[0] == "" {
				t.Fatal("region us has no gossip address")
			}
		}
		c.nodes = append(c.nodes, n)
		c.byName[name] = n
	}
	if o.skipReplicationWait {
		return c
	}
	c.poll(t, 30*time.Second, "every region replicating to both others", func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, n := range c.nodes {
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			live := 0
			for _, p := range st.Peers {
				if p.Active && p.Handshaken {
					live++
				}
			}
			fmt.Fprintf(&b, "%s: %d peers; ", n.name, live)
			ok = ok && live == len(c.nodes)-1
		}
		return ok, b.String()
	})
	return c
}

// start opens the node's region and serves its API on ln (nil: listen on
// its address again).
func (n *triNode) start(t *testing.T, ln net.Listener) {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", n.addr); err != nil {
			t.Fatalf("listen again on %s: %v", n.addr, err)
		}
	}
	r, err := region.Open(context.Background(), n.cfg)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("open region %s: %v", n.name, err)
	}
	n.serve(r, ln)
}

// serve serves r, opened on n's configuration, on ln.
func (n *triNode) serve(r *region.Region, ln net.Listener) {
	srv := httptest.NewUnstartedServer(r.API)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	n.r, n.srv, n.down = r, srv, false
}

// stop closes the node's HTTP server and region (idempotent).
func (n *triNode) stop(t *testing.T) {
	t.Helper()
	if n.down {
		return
	}
	n.down = true
	n.srv.Close()
	if err := n.r.Close(); err != nil {
		t.Errorf("close region %s: %v", n.name, err)
	}
}

// poll evaluates cond every 25ms until it holds, failing t with cond's last
// description of the state after within.
func (c *triCluster) poll(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s\nstate: %s\npins: %s", within, what, state, c.pinString())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (c *triCluster) token(user string, admin bool) string {
	c.tokMu.Lock()
	defer c.tokMu.Unlock()
	k := fmt.Sprint(user, admin)
	if tok, ok := c.tokens[k]; ok {
		return tok
	}
	tok, err := auth.Sign(triSecret, user, admin, time.Hour, time.Now())
	if err != nil {
		panic(err)
	}
	c.tokens[k] = tok
	return tok
}

// triResp is one HTTP answer (code 0: the request failed in transport).
type triResp struct {
	code       int
	body       []byte
	retryAfter string
	sent, got  time.Time
}

func (r triResp) errCode() string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Code
}

func (r triResp) String() string {
	return fmt.Sprintf("%d %s", r.code, bytes.TrimSpace(r.body))
}

func (c *triCluster) do(method, url, token, idemKey string, body []byte) triResp {
	return c.doWith(c.hc, method, url, token, idemKey, body)
}

func (c *triCluster) doWith(hc *http.Client, method, url, token, idemKey string, body []byte) triResp {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return triResp{body: []byte(err.Error())}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	out := triResp{sent: time.Now()}
	res, err := hc.Do(req)
	if err != nil {
		out.got, out.body = time.Now(), []byte(err.Error())
		return out
	}
	defer res.Body.Close()
	out.body, _ = io.ReadAll(res.Body)
	out.got, out.code, out.retryAfter = time.Now(), res.StatusCode, res.Header.Get("Retry-After")
	return out
}

// set sends one like (POST) or unlike (DELETE) of user on item through n.
func (c *triCluster) set(n *triNode, user, item, key string, like bool) triResp {
	if like {
		return c.do("POST", n.srv.URL+"/v1/items/"+item+"/likes", c.token(user, false), key, nil)
	}
	return c.do("DELETE", n.srv.URL+"/v1/items/"+item+"/likes/"+user, c.token(user, false), key, nil)
}

// triRetry is what setRetry saw.
type triRetry struct {
	ans      edge.Answer
	last     triResp // the answer that ended the retries
	attempts int
	// notAuth counts 503 not_authoritative answers; other503 other 503s and
	// transport failures.
	notAuth, other503 int
}

// setRetry sends the write through n and retries 503s and transport failures
// with the SAME idempotency key every 50ms until it is answered otherwise or
// within passes. Every 503 must carry Retry-After.
func (c *triCluster) setRetry(n *triNode, user, item, key string, like bool, within time.Duration) (triRetry, error) {
	var out triRetry
	deadline := time.Now().Add(within)
	for {
		res := c.set(n, user, item, key, like)
		out.attempts++
		out.last = res
		switch {
		case res.code == http.StatusOK:
			if err := json.Unmarshal(res.body, &out.ans); err != nil {
				return out, fmt.Errorf("decode answer %s: %v", res, err)
			}
			if out.ans.Item != item || out.ans.User != user {
				return out, fmt.Errorf("answer for another edge: %s", res)
			}
			return out, nil
		case res.code == http.StatusServiceUnavailable:
			if res.retryAfter == "" {
				return out, fmt.Errorf("503 without Retry-After: %s", res)
			}
			if res.errCode() == "not_authoritative" {
				out.notAuth++
			} else {
				out.other503++
			}
		case res.code == 0:
			out.other503++
		default:
			return out, fmt.Errorf("%s of (%s, %s) key %s via %s: %s", map[bool]string{true: "like", false: "unlike"}[like], item, user, key, n.name, res)
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("still unavailable after %d attempts in %v (via %s, key %s): %s", out.attempts, within, n.name, key, res)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// button reads the actor's button for (item, user) at n.
func (c *triCluster) button(n *triNode, user, item string) (bool, error) {
	res := c.do("GET", n.srv.URL+"/v1/items/"+item+"/likes/"+user, "", "", nil)
	if res.code != http.StatusOK {
		return false, fmt.Errorf("button at %s: %s", n.name, res)
	}
	var b struct {
		Liked bool `json:"liked"`
	}
	if err := json.Unmarshal(res.body, &b); err != nil {
		return false, err
	}
	return b.Liked, nil
}

// triCount is a count answer.
type triCount struct {
	Count int64
	AsOf  time.Time
}

func (c *triCluster) count(n *triNode, item string) (triCount, error) {
	res := c.do("GET", n.srv.URL+"/v1/items/"+item+"/count", "", "", nil)
	if res.code != http.StatusOK {
		return triCount{}, fmt.Errorf("count at %s: %s", n.name, res)
	}
	var b struct {
		Count int64  `json:"count"`
		AsOf  string `json:"asOf"`
	}
	if err := json.Unmarshal(res.body, &b); err != nil {
		return triCount{}, err
	}
	asOf, err := time.Parse(time.RFC3339Nano, b.AsOf)
	if err != nil {
		return triCount{}, fmt.Errorf("count at %s: asOf: %v", n.name, err)
	}
	return triCount{Count: b.Count, AsOf: asOf}, nil
}

// waitCounts polls every region until each item's count is want[item].
func (c *triCluster) waitCounts(t testing.TB, want map[string]int64, within time.Duration) {
	t.Helper()
	items := make([]string, 0, len(want))
	for it := range want {
		items = append(items, it)
	}
	sort.Strings(items)
	c.poll(t, within, "every region's counts to converge", func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, it := range items {
			fmt.Fprintf(&b, "\n  %s want %d:", it, want[it])
			for _, n := range c.nodes {
				got, err := c.count(n, it)
				if err != nil {
					fmt.Fprintf(&b, " %s=%v", n.name, err)
					ok = false
					continue
				}
				fmt.Fprintf(&b, " %s=%d", n.name, got.Count)
				ok = ok && got.Count == want[it]
			}
		}
		return ok, b.String()
	})
}

// triStatus is GET /v1/admin/status.
type triStatus struct {
	Region        string            `json:"region"`
	Watermarks    map[string]string `json:"watermarks"`
	AsOf          string            `json:"asOf"`
	AggregatorLag uint64            `json:"aggregatorLagEvents"`
	PinsOwned     int               `json:"pinsOwned"`
	CatchingUp    int               `json:"pinsCatchingUp"`
	Peers         []struct {
		Region     string
		Active     bool
		Handshaken bool
		LagEvents  uint64
		Watermark  int64
	} `json:"replication"`
}

func (c *triCluster) status(n *triNode) (triStatus, error) {
	var st triStatus
	res := c.do("GET", n.srv.URL+"/v1/admin/status", c.token("ops", true), "", nil)
	if res.code != http.StatusOK {
		return st, fmt.Errorf("status at %s: %s", n.name, res)
	}
	err := json.Unmarshal(res.body, &st)
	return st, err
}

// triReconcile is POST /v1/admin/reconcile.
type triReconcile struct {
	Items      int               `json:"itemsChecked"`
	Mismatched []json.RawMessage `json:"mismatched"`
	Healed     int               `json:"healed"`
}

func (c *triCluster) reconcile(n *triNode) (triReconcile, error) {
	var rep triReconcile
	// A whole region's recount is one request; on Cassandra each item is 64
	// partition reads, slow on a loaded machine.
	hc := *c.hc
	hc.Timeout = 2 * time.Minute
	res := c.doWith(&hc, "POST", n.srv.URL+"/v1/admin/reconcile", c.token("ops", true), "", []byte(`{}`))
	if res.code != http.StatusOK {
		return rep, fmt.Errorf("reconcile at %s: %s", n.name, res)
	}
	err := json.Unmarshal(res.body, &rep)
	return rep, err
}

// pins reads every pin from etcd, by range.
func (c *triCluster) pins() ([]epoch.Pin, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.dir.Pins(ctx)
}

func (c *triCluster) mustPins(t testing.TB) []epoch.Pin {
	t.Helper()
	ps, err := c.pins()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != triRanges {
		t.Fatalf("%d pins, want %d", len(ps), triRanges)
	}
	return ps
}

func (c *triCluster) pinString() string {
	ps, err := c.pins()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%d:%s@%d ", p.Range, p.Region, p.Epoch)
	}
	return b.String()
}

// triUsers returns perRange users of every range, by range.
func triUsers(perRange int) []string {
	have := make([]int, triRanges)
	var out []string
	for i := 0; len(out) < perRange*triRanges; i++ {
		u := fmt.Sprintf("user-%d", i)
		if g := edge.RangeOf(u, triRanges); have[g] < perRange {
			have[g]++
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return edge.RangeOf(out[i], triRanges) < edge.RangeOf(out[j], triRanges)
	})
	return out
}

// triOwner is the pinned region of user's range in ps.
func triOwner(ps []epoch.Pin, user string) epoch.Pin {
	return ps[edge.RangeOf(user, triRanges)]
}
