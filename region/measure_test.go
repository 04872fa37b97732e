package region_test

// TestMeasure produces the multi-region figures of BENCHMARKS.md in one run, so
// that the ratios compare figures taken minutes apart under the same machine
// load. It is opt-in (CI never runs it):
//
//	LIKES_MEASURE=1 go test ./region -run TestMeasure -v -timeout 20m
//
// Steps, each bounded:
//
//  1. One region alone (no cluster), loadgen uniform writes over HTTP: the
//     single-region write throughput (A).
//  2. Three regions (us, eu, ap) with an embedded etcd, the settings of
//     `likesd dev` (16 partitions, 250ms window, lease TTL 5s, anti-entropy 30s).
//     ap's four gRPC links (us→ap, eu→ap, ap→us, ap→eu) go through small
//     in-test TCP proxies (Cluster.PeerAddrs) so they can be cut.
//  3. The same loadgen load through us (about 2/3 of users are owned by eu or
//     ap and forwarded). Meanwhile: GET …/count at eu and ap every 25ms
//     (now − asOf), in-process probes (write at us, time until eu/ap's Σ cells
//     show it), and the shipper statistics before/after (bytes per like event).
//  4. Partition: cut ap's links, write one like on each of N (100 000) distinct
//     items in-process through the owning region's edge.Service.Set from 64
//     goroutines, heal, and time until a sample of items has the right count
//     in every region and every replication/aggregator lag is 0; then check
//     every item in every region.
//  5. One region alone again (B), so that A and B bracket the cluster figure.
//
// Optional knobs: LIKES_MEASURE_ITEMS (default 100000), LIKES_MEASURE_DURATION
// (loadgen phase length, default 20s), LIKES_MEASURE_WORKERS (default 64).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/loadgen"
	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/replication"
)

// Settings of `likesd dev` (cmd/likesd defaults).
const (
	measPartitions = 16
	measWindow     = 250 * time.Millisecond
)

func measEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func TestMeasure(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") != "1" {
		t.Skip("opt-in measurement for BENCHMARKS.md: LIKES_MEASURE=1 go test ./region -run TestMeasure -v -timeout 20m")
	}
	nItems := measEnvInt(t, "LIKES_MEASURE_ITEMS", 100_000)
	workers := measEnvInt(t, "LIKES_MEASURE_WORKERS", 64)
	dur := 20 * time.Second
	if v := os.Getenv("LIKES_MEASURE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 2*time.Minute {
			t.Fatalf("LIKES_MEASURE_DURATION=%q: want a duration in (0, 2m]", v)
		}
		dur = d
	}
	var sum []string
	note := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		sum = append(sum, s)
		t.Log(s)
	}
	t.Cleanup(func() {
		t.Logf("\n==== TestMeasure summary ====\n%s\n", strings.Join(sum, "\n"))
	})
	started := time.Now()
	note("machine: %d logical CPUs (shared); load average at start %s", runtime.NumCPU(), loadgen.LoadAverage())
	note("settings: loadgen uniform-writes %v, %d workers, %d users, 10000 items; partition items %d", dur, workers, workers*50, nItems)

	// 1. One region alone (A).
	singleA := measSingle(t, "A", dur, workers)
	note("[1A] one region: %s", singleA)

	// 2.–4. Three regions, in a subtest so that the cluster (regions, proxies,
	// etcd) is closed before step 5 measures one region alone again.
	var tri measTri
	clusterOK := t.Run("cluster", func(t *testing.T) {
		c, links := startMeasureTri(t)
		note("[2] three regions up after %v (load %s)", time.Since(started).Round(time.Second), loadgen.LoadAverage())

		// 3. Load through us, staleness at eu/ap, bytes per event.
		tri = measTriLoad(t, c, dur, workers)
		note("[3] three regions, load through us: %s", tri.load)
		note("[3] forwarded share of loadgen users (owner != us): %.2f", tri.forwarded)
		note("[3] staleness now−asOf via GET count, all samples: us p50 %v p99 %v (loadgen sampler, n=%d) | eu p50 %v p99 %v (n=%d) | ap p50 %v p99 %v (n=%d)",
			tri.usP50, tri.usP99, tri.usN, q(tri.stale["eu"], .5), q(tri.stale["eu"], .99), tri.stale["eu"].Count(),
			q(tri.stale["ap"], .5), q(tri.stale["ap"], .99), tri.stale["ap"].Count())
		note("[3] staleness, first read of each item: eu p99 %v (n=%d) | ap p99 %v (n=%d); max eu %v ap %v",
			q(tri.first["eu"], .99), tri.first["eu"].Count(), q(tri.first["ap"], .99), tri.first["ap"].Count(),
			tri.stale["eu"].Max(), tri.stale["ap"].Max())
		note("[3] write-at-us → visible in Σ cells: eu p50 %v p99 %v max %v | ap p50 %v p99 %v max %v (probes n=%d, misses %d)",
			q(tri.visible["eu"], .5), q(tri.visible["eu"], .99), tri.visible["eu"].Max(),
			q(tri.visible["ap"], .5), q(tri.visible["ap"], .99), tri.visible["ap"].Max(), tri.visible["eu"].Count(), tri.probeMisses)
		for _, at := range triNames {
			var parts []string
			for _, from := range triNames {
				h := tri.wmLag[at+"←"+from]
				parts = append(parts, fmt.Sprintf("%s p50 %v p99 %v", from, q(h, .5), q(h, .99)))
			}
			note("[3] now − watermark as known at %s (asOf there is the min): %s", at, strings.Join(parts, ", "))
		}
		note("[3] drain after load stopped (all replication + aggregator lags 0): %v", tri.drain.Round(10*time.Millisecond))
		note("[3] replication during load: %s", tri.bytes)
		note("[3] load average after load phase: %s", loadgen.LoadAverage())

		// 4. Partition with N items, heal, converge.
		part := measPartition(t, c, links, nItems)
		for _, s := range part {
			note("[4] %s", s)
		}
	})
	if !clusterOK {
		return
	}

	// 5. One region alone again (B).
	singleB := measSingle(t, "B", dur, workers)
	note("[5B] one region: %s", singleB)
	mean1 := (singleA.rate + singleB.rate) / 2
	note("RATIO three regions ÷ one region, writes/s: %.2f (%.0f ÷ mean(%.0f, %.0f)); process CPU per write: %.0f µs vs %.0f/%.0f µs (×%.2f)",
		tri.load.rate/mean1, tri.load.rate, singleA.rate, singleB.rate,
		tri.load.cpuUs, singleA.cpuUs, singleB.cpuUs, tri.load.cpuUs/((singleA.cpuUs+singleB.cpuUs)/2))
	note("total %v; load average at end %s", time.Since(started).Round(time.Second), loadgen.LoadAverage())
}

func q(h *loadgen.Histogram, p float64) time.Duration {
	return h.Quantile(p).Round(time.Millisecond)
}

// measLoadResult is one loadgen uniform-writes phase.
type measLoadResult struct {
	rate, cpuUs    float64
	p50, p99       time.Duration
	ok, errs, chgd int64
	load0, load1   string
}

func (r measLoadResult) String() string {
	return fmt.Sprintf("%.0f writes/s (ok %d, changed %d, errors %d), p50 %v p99 %v, process CPU/write %.0f µs (server+loadgen, one process); load %s → %s",
		r.rate, r.ok, r.chgd, r.errs, r.p50, r.p99, r.cpuUs, r.load0, r.load1)
}

func measRun(t *testing.T, url, runID string, dur time.Duration, workers int) (measLoadResult, *loadgen.Report) {
	t.Helper()
	out := measLoadResult{load0: loadgen.LoadAverage()}
	ctx, cancel := context.WithTimeout(context.Background(), dur+2*time.Minute)
	defer cancel()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		URL: url, Secret: triSecret, Workers: workers, Items: 10000, PhaseDuration: dur,
		Phases: []string{loadgen.PhaseUniform}, RunID: runID, Seed: 42,
	})
	if err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	out.load1 = loadgen.LoadAverage()
	ph := rep.Phase(loadgen.PhaseUniform)
	if ph == nil {
		t.Fatal("loadgen: no uniform-writes phase")
	}
	out.rate, out.cpuUs = ph.Throughput, ph.ClientCPUPerReqUs
	out.p50 = time.Duration(ph.Latency.P50Ms * float64(time.Millisecond)).Round(time.Millisecond)
	out.p99 = time.Duration(ph.Latency.P99Ms * float64(time.Millisecond)).Round(time.Millisecond)
	out.ok, out.errs, out.chgd = ph.OK, ph.ErrorCount(), ph.Changed
	if out.errs > 0 {
		t.Logf("loadgen errors: %v", ph.Errors)
	}
	return out, rep
}

// measSingle runs the loadgen phase against one region without a cluster, with
// the same settings as the cluster's regions.
func measSingle(t *testing.T, tag string, dur time.Duration, workers int) measLoadResult {
	t.Helper()
	r, err := region.Open(context.Background(), region.Config{
		Name: "us", DataDir: t.TempDir(), Partitions: measPartitions, Window: measWindow,
		Secret: triSecret, UserRate: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.API)
	defer func() {
		srv.Close()
		if err := r.Close(); err != nil {
			t.Errorf("close single region: %v", err)
		}
	}()
	res, _ := measRun(t, srv.URL, "one"+tag, dur, workers)
	return res
}

// measProxy is one directed link (a TCP proxy) that can be cut: while cut it
// closes every connection it had and every new one at once.
type measProxy struct {
	name, target string
	ln           net.Listener
	mu           sync.Mutex
	cut          bool
	conns        map[net.Conn]struct{}
	wg           sync.WaitGroup
	accepted     atomic.Int64
}

func newMeasProxy(t *testing.T, name, target string) *measProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &measProxy{name: name, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *measProxy) addr() string { return p.ln.Addr().String() }

func (p *measProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.accepted.Add(1)
		p.wg.Add(1)
		p.mu.Unlock()
		go p.pipe(c)
	}
}

func (p *measProxy) pipe(c net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	p.mu.Lock()
	if err != nil || p.cut {
		delete(p.conns, c)
		p.mu.Unlock()
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *measProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

func (p *measProxy) close() {
	_ = p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}

// startMeasureTri is startTri with the settings of `likesd dev` and ap's
// replication/forwarding links through cuttable proxies. It fills a triCluster
// so that the helpers of clusterhelpers_test.go (poll, count, status) apply.
func startMeasureTri(t *testing.T) (*triCluster, []*measProxy) {
	t.Helper()
	grpcAddr := map[string]string{}
	for _, n := range triNames {
		grpcAddr[n] = epochtest.FreeAddr(t)
	}
	var links []*measProxy
	link := func(from, to string) string {
		p := newMeasProxy(t, from+"→"+to, grpcAddr[to])
		links = append(links, p)
		return p.addr()
	}
	overrides := map[string]map[string]string{
		"us": {"ap": link("us", "ap")},
		"eu": {"ap": link("eu", "ap")},
		"ap": {"us": link("ap", "us"), "eu": link("ap", "eu")},
	}
	c := startTriWith(t, triOpts{
		epoch: func(e *epoch.Config) { e.TTL, e.Margin = epoch.DefaultTTL, epoch.DefaultMargin }, // likesd dev: 5s / 1s
		region: func(name string, cfg *region.Config) {
			cfg.Partitions, cfg.Window = measPartitions, measWindow
			cfg.Cluster.GRPCListen, cfg.Cluster.PeerAddrs = grpcAddr[name], overrides[name]
			cfg.Cluster.AntiEntropy = 0 // the default, 30s
		},
	})
	c.poll(t, 60*time.Second, "every region's asOf known", func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, n := range c.nodes {
			st, err := measGetStatus(c, n)
			if err != nil {
				return false, err.Error()
			}
			asOf, _ := time.Parse(time.RFC3339Nano, st.AsOf)
			fmt.Fprintf(&b, "%s: asOf %v; ", n.name, st.AsOf)
			ok = ok && time.Since(asOf) < 5*time.Second
		}
		return ok, b.String()
	})
	return c, links
}

// measStatus is GET /v1/admin/status with the shipper's full statistics.
type measStatus struct {
	AsOf          string                  `json:"asOf"`
	AggregatorLag uint64                  `json:"aggregatorLagEvents"`
	Peers         []replication.PeerStats `json:"replication"`
}

func measGetStatus(c *triCluster, n *triNode) (measStatus, error) {
	var st measStatus
	res := c.do("GET", n.srv.URL+"/v1/admin/status", c.token("ops", true), "", nil)
	if res.code != http.StatusOK {
		return st, fmt.Errorf("status at %s: %s", n.name, res)
	}
	return st, json.Unmarshal(res.body, &st)
}

// measShip sums the shipper counters of every directed link.
type measShip struct {
	bytes, events, cells, pushes, digests, repaired uint64
	byLink                                          map[string]uint64 // bytes
	repairedBy                                      map[string]uint64 // cells pushed by anti-entropy
	failures                                        map[string]uint64 // failed calls
}

func measShipStats(t *testing.T, c *triCluster) measShip {
	t.Helper()
	out := measShip{byLink: map[string]uint64{}, repairedBy: map[string]uint64{}, failures: map[string]uint64{}}
	for _, n := range c.nodes {
		st, err := measGetStatus(c, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Peers {
			out.bytes += p.BytesShipped
			out.events += p.EventsShipped
			out.cells += p.CellsShipped
			out.pushes += p.Pushes
			out.digests += p.DigestRounds
			out.repaired += p.CellsRepaired
			out.byLink[n.name+"→"+p.Region] += p.BytesShipped
			out.repairedBy[n.name+"→"+p.Region] += p.CellsRepaired
			out.failures[n.name+"→"+p.Region] += p.Failures
		}
	}
	return out
}

func (a measShip) minus(b measShip) measShip {
	d := measShip{
		bytes: a.bytes - b.bytes, events: a.events - b.events, cells: a.cells - b.cells,
		pushes: a.pushes - b.pushes, digests: a.digests - b.digests, repaired: a.repaired - b.repaired,
		byLink: map[string]uint64{}, repairedBy: map[string]uint64{}, failures: map[string]uint64{},
	}
	for k, v := range a.byLink {
		d.byLink[k] = v - b.byLink[k]
	}
	for k, v := range a.repairedBy {
		d.repairedBy[k] = v - b.repairedBy[k]
	}
	for k, v := range a.failures {
		d.failures[k] = v - b.failures[k]
	}
	return d
}

// measHeads is Σ over regions and partitions of the log heads: the number of
// log events (like/unlike flips, plus any corrections) written so far.
func measHeads(c *triCluster) uint64 {
	var n uint64
	for _, node := range c.nodes {
		for _, s := range node.r.Aggs.Stats() {
			n += s.Head
		}
	}
	return n
}

// measQuiet reports whether every aggregator has folded its region's log up to
// the log's true head, and every peer has acknowledged every log event and
// every cell change of every region (the acknowledged cursors of the shipper
// statistics against the store's own heads and cell-change outbox, so a
// statistic not yet refreshed cannot pass for caught up).
func measQuiet(c *triCluster) (bool, string) {
	ctx := context.Background()
	var b strings.Builder
	ok := true
	for _, n := range c.nodes {
		parts := n.r.Store.Partitions()
		heads := make([]uint64, parts)
		for p := range parts {
			_, h, err := n.r.Store.Read(ctx, uint32(p), math.MaxUint64, 0)
			if err != nil {
				return false, err.Error()
			}
			heads[p] = h.Pos
		}
		var aggLag uint64
		for p, s := range n.r.Aggs.Stats() {
			aggLag += heads[p] - min(heads[p], s.Position)
		}
		fmt.Fprintf(&b, "%s agg lag %d;", n.name, aggLag)
		ok = ok && aggLag == 0
		st, err := measGetStatus(c, n)
		if err != nil {
			return false, err.Error()
		}
		active := 0
		for _, p := range st.Peers {
			if !p.Active {
				continue
			}
			active++
			var lag uint64
			for i, h := range heads {
				if i >= len(p.Acked.Log) {
					lag += h
				} else if h > p.Acked.Log[i] {
					lag += h - p.Acked.Log[i]
				}
			}
			// Checked last: CellChanges syncs the WAL (one fsync per call).
			cellsOK, cells := false, "?"
			if ok && lag == 0 && p.Handshaken {
				cs, _, err := n.r.Store.CellChanges(ctx, p.Acked.Cells, 1)
				cellsOK = err == nil && len(cs) == 0
				cells = strconv.FormatBool(cellsOK)
			}
			fmt.Fprintf(&b, " →%s lag %d cells acked %s;", p.Region, lag, cells)
			ok = ok && p.Handshaken && lag == 0 && cellsOK
		}
		ok = ok && active == len(c.nodes)-1
		b.WriteString(" ")
	}
	return ok, b.String()
}

// measSizes estimates the JSON size (the replication codec) of one log event
// and one cell state of items with the given prefix, from this region's store.
func measSizes(t *testing.T, r *region.Region, prefix string) (event, cell float64) {
	t.Helper()
	ctx := context.Background()
	var n, total int
	for p, s := range r.Aggs.Stats() {
		after := uint64(0)
		if s.Head > 50 {
			after = s.Head - 50
		}
		evs, _, err := r.Store.Read(ctx, uint32(p), after, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if !strings.HasPrefix(ev.Item, prefix) {
				continue
			}
			b, _ := json.Marshal(ev)
			n++
			total += len(b) + 1 // the comma of the JSON array
		}
	}
	if n > 0 {
		event = float64(total) / float64(n)
	}
	errEnough := errors.New("enough")
	n, total = 0, 0
	err := r.Store.ScanCells(ctx, r.Name(), func(cs replication.CellState) error {
		if !strings.HasPrefix(cs.Key.Item, prefix) {
			return nil
		}
		b, _ := json.Marshal(cs)
		n++
		total += len(b) + 1
		if n >= 500 {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		t.Fatal(err)
	}
	if n > 0 {
		cell = float64(total) / float64(n)
	}
	return event, cell
}

func (d measShip) describe(likeEvents uint64, evSize, cellSize float64) string {
	if likeEvents == 0 {
		return "no events"
	}
	evB, cellB := float64(d.events)*evSize, float64(d.cells)*cellSize
	rest := float64(d.bytes) - evB - cellB
	links := make([]string, 0, len(d.byLink))
	for k, v := range d.byLink {
		links = append(links, fmt.Sprintf("%s %.1f MB (%d cells repaired, %d failed calls)", k, float64(v)/1e6, d.repairedBy[k], d.failures[k]))
	}
	sort.Strings(links)
	return fmt.Sprintf("%d like events; %d bytes shipped over 6 links = %.0f B per like event (%.0f B per event per peer); "+
		"events shipped %d (%.2f per like event), cells shipped %d (%.2f per like event), pushes %d, digest rounds %d (cells repaired %d); "+
		"estimated split per like event: log events %.0f B (%.0f B JSON each), cells %.0f B (%.0f B each), batch overhead/watermarks/digests %.0f B; by link: %s",
		likeEvents, d.bytes, float64(d.bytes)/float64(likeEvents), float64(d.bytes)/float64(likeEvents)/2,
		d.events, float64(d.events)/float64(likeEvents), d.cells, float64(d.cells)/float64(likeEvents), d.pushes, d.digests, d.repaired,
		evB/float64(likeEvents), evSize, cellB/float64(likeEvents), cellSize, rest/float64(likeEvents), strings.Join(links, ", "))
}

// measTri is what step 3 measured.
type measTri struct {
	load                     measLoadResult
	forwarded                float64
	usP50, usP99             time.Duration
	usN                      int64
	stale, first, visible    map[string]*loadgen.Histogram
	wmLag                    map[string]*loadgen.Histogram // "at←from": now − from's watermark as known at at
	probeMisses              int
	drain                    time.Duration
	bytes                    string
	eventSize, cellSize      float64
	likeEvents, bytesShipped uint64
}

func measTriLoad(t *testing.T, c *triCluster, dur time.Duration, workers int) measTri {
	t.Helper()
	const runID = "tri"
	out := measTri{
		stale:   map[string]*loadgen.Histogram{"eu": {}, "ap": {}},
		first:   map[string]*loadgen.Histogram{"eu": {}, "ap": {}},
		visible: map[string]*loadgen.Histogram{"eu": {}, "ap": {}},
		wmLag:   map[string]*loadgen.Histogram{},
	}
	for _, at := range triNames {
		for _, from := range triNames {
			out.wmLag[at+"←"+from] = &loadgen.Histogram{}
		}
	}
	ps := c.mustPins(t)
	fwd := 0
	for i := range workers * 50 {
		if triOwner(ps, fmt.Sprintf("lg-%s-u%d", runID, i)).Region != "us" {
			fwd++
		}
	}
	out.forwarded = float64(fwd) / float64(workers*50)
	var probeUser string
	for _, u := range triUsers(1) {
		if triOwner(ps, u).Region == "us" {
			probeUser = u
			break
		}
	}
	c.poll(t, 30*time.Second, "quiet cluster before the load", func() (bool, string) { return measQuiet(c) })
	ship0, heads0 := measShipStats(t, c), measHeads(c)

	done := make(chan struct{})
	var wg sync.WaitGroup
	// Staleness at eu and ap: GET count of a random loadgen item, every 25ms each.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		seen := map[string]map[string]bool{"eu": {}, "ap": {}}
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, name := range []string{"eu", "ap"} {
				item := fmt.Sprintf("lg-%s-i%d", runID, rng.IntN(10000))
				cnt, err := c.count(c.byName[name], item)
				if err != nil || cnt.AsOf.Unix() <= 0 {
					continue
				}
				d := time.Since(cnt.AsOf)
				out.stale[name].Record(d)
				if !seen[name][item] {
					seen[name][item] = true
					out.first[name].Record(d)
				}
			}
		}
	})
	// Watermarks as known in each region (what asOf is the min of), every 100ms.
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, n := range c.nodes {
				wms, err := n.r.Store.Watermarks(context.Background())
				if err != nil {
					continue
				}
				now := time.Now()
				for _, from := range triNames {
					if wm, ok := wms[from]; ok && wm > 0 {
						out.wmLag[n.name+"←"+from].Record(now.Sub(time.UnixMilli(wm)))
					}
				}
			}
		}
	})
	// Visibility probes: like at us (in-process, us-owned user), then poll eu's
	// and ap's Σ cells until they show it (bounded).
	wg.Go(func() {
		us := c.byName["us"].r
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			item := fmt.Sprintf("probe-%d", k)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := us.Service.Set(ctx, probeUser, item, crdt.Liked, "probe-"+item)
			cancel()
			if err != nil {
				t.Logf("probe write: %v", err)
				continue
			}
			acked := time.Now()
			pending := map[string]bool{"eu": true, "ap": true}
			for len(pending) > 0 && time.Since(acked) < 15*time.Second {
				for name := range pending {
					n, err := c.byName[name].r.Store.Count(context.Background(), item)
					if err == nil && n == 1 {
						out.visible[name].Record(time.Since(acked))
						delete(pending, name)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			if len(pending) > 0 {
				out.probeMisses++
			}
		}
	})
	res, rep := measRun(t, c.byName["us"].srv.URL, runID, dur, workers)
	close(done)
	wg.Wait()
	out.load = res
	if st := rep.Phase(loadgen.PhaseUniform).Staleness; st != nil {
		out.usP50 = time.Duration(st.P50Ms * float64(time.Millisecond)).Round(time.Millisecond)
		out.usP99 = time.Duration(st.P99Ms * float64(time.Millisecond)).Round(time.Millisecond)
		out.usN = st.Samples
	}
	stop := time.Now()
	c.poll(t, 2*time.Minute, "replication and aggregators to drain after the load", func() (bool, string) { return measQuiet(c) })
	out.drain = time.Since(stop)
	d := measShipStats(t, c).minus(ship0)
	out.likeEvents = measHeads(c) - heads0
	out.bytesShipped = d.bytes
	out.eventSize, out.cellSize = measSizes(t, c.byName["us"].r, "lg-"+runID)
	out.bytes = d.describe(out.likeEvents, out.eventSize, out.cellSize)
	return out
}

// measPartition is step 4; it returns the lines for the summary.
func measPartition(t *testing.T, c *triCluster, links []*measProxy, nItems int) []string {
	t.Helper()
	var lines []string
	say := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		lines = append(lines, s)
		t.Log(s)
	}
	ps := c.mustPins(t)
	users := triUsers(100) // 1600 users, 100 per range
	ownerOf := map[string]*triNode{}
	for _, u := range users {
		ownerOf[u] = c.byName[triOwner(ps, u).Region]
	}
	item := func(i int) string { return "part-" + strconv.Itoa(i) }
	user := func(i int) string { return users[i%len(users)] }
	writtenAt := map[string]int{}
	for i := range nItems {
		writtenAt[ownerOf[user(i)].name]++
	}
	ship0, heads0 := measShipStats(t, c), measHeads(c)

	// Cut ap's four links and wait until ap's shipper and its peers' shippers
	// toward ap see failures.
	cutAt := time.Now()
	for _, l := range links {
		l.setCut(true)
	}
	say("partition: cut %d links (us→ap, eu→ap, ap→us, ap→eu) at load %s; gossip and etcd stay up, so ap keeps its pins", len(links), loadgen.LoadAverage())

	// Write one like on each of nItems items, in-process at the owner.
	writeStart := time.Now()
	var next, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= nItems || ctx.Err() != nil {
					return
				}
				u, it := user(i), item(i)
				var err error
				for attempt := 0; attempt < 20; attempt++ {
					var ans edge.Answer
					ans, err = ownerOf[u].r.Service.Set(ctx, u, it, crdt.Liked, "pk-"+it)
					if err == nil && !ans.Liked {
						err = fmt.Errorf("answer %+v", ans)
					}
					if err == nil || ctx.Err() != nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s by %s at %s: %v", it, u, ownerOf[u].name, err))
				}
			}
		})
	}
	wg.Wait()
	cancel()
	writeDur := time.Since(writeStart)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d partition writes failed; first: %v", n, nItems, firstErr.Load())
	}
	say("wrote %d likes on distinct items in-process (edge.Service.Set at the owner, 64 goroutines) in %v = %.0f writes/s; by region: us %d, eu %d, ap %d; load %s",
		nItems, writeDur.Round(10*time.Millisecond), float64(nItems)/writeDur.Seconds(), writtenAt["us"], writtenAt["eu"], writtenAt["ap"], loadgen.LoadAverage())

	// Let every aggregator fold its own log, so the heal measures replication.
	c.poll(t, 3*time.Minute, "aggregators to fold during the partition", func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, n := range c.nodes {
			var lag uint64
			for _, s := range n.r.Aggs.Stats() {
				lag += s.Head - min(s.Head, s.Position)
			}
			fmt.Fprintf(&b, "%s %d; ", n.name, lag)
			ok = ok && lag == 0
		}
		return ok, b.String()
	})
	st, err := measGetStatus(c, c.byName["ap"])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Peers {
		t.Logf("before heal, ap→%s: lag %d events, failures %d, consecutive %d, last error %q", p.Region, p.LagEvents, p.Failures, p.Consecutive, p.LastError)
	}

	// Sample of items to watch: nSample random items; a (region, item) pair is
	// converged once that region's Σ cells of the item is 1 (counts only grow here).
	nSample := min(300, nItems)
	rng := rand.New(rand.NewPCG(1, 2))
	sample := rng.Perm(nItems)[:nSample]
	type pair struct {
		n *triNode
		i int
	}
	var pending []pair
	for _, n := range c.nodes {
		for _, i := range sample {
			pending = append(pending, pair{n, i})
		}
	}
	check := func() {
		kept := pending[:0]
		for _, p := range pending {
			if v, err := p.n.r.Store.Count(context.Background(), item(p.i)); err != nil || v != 1 {
				kept = append(kept, p)
			}
		}
		pending = kept
	}
	check()
	missing := map[string]int{}
	for _, p := range pending {
		missing[p.n.name]++
	}
	say("partition held %v (writes + local folding); at heal, sampled items not yet visible: us %d, eu %d, ap %d of %d each",
		time.Since(cutAt).Round(10*time.Millisecond), missing["us"], missing["eu"], missing["ap"], nSample)

	// Heal and time convergence.
	heal := time.Now()
	for _, l := range links {
		l.setCut(false)
	}
	firstOK := map[string]time.Duration{} // link → first successful push after heal
	var sampleDone, quietAt time.Duration
	lastLog := time.Now()
	deadline := heal.Add(5 * time.Minute)
	for {
		if time.Now().After(deadline) {
			q, state := measQuiet(c)
			t.Fatalf("no convergence 5m after heal: %d sampled pairs pending, quiet %v: %s", len(pending), q, state)
		}
		now := time.Since(heal)
		for _, n := range c.nodes {
			st, err := measGetStatus(c, n)
			if err != nil {
				continue
			}
			for _, p := range st.Peers {
				k := n.name + "→" + p.Region
				if (n.name == "ap" || p.Region == "ap") && p.LastSuccess.After(heal) {
					if _, ok := firstOK[k]; !ok {
						firstOK[k] = p.LastSuccess.Sub(heal)
					}
				}
			}
		}
		if len(pending) > 0 {
			check()
			if len(pending) == 0 {
				sampleDone = time.Since(heal)
			}
		}
		if len(pending) == 0 {
			if q, _ := measQuiet(c); q {
				quietAt = time.Since(heal)
				break
			}
		}
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			_, state := measQuiet(c)
			t.Logf("heal +%v: %d sampled pairs pending; %s", now.Round(100*time.Millisecond), len(pending), state)
		}
		time.Sleep(100 * time.Millisecond)
	}
	conv := max(sampleDone, quietAt)
	var fo []string
	var earliest, latest time.Duration
	for k, v := range firstOK {
		fo = append(fo, fmt.Sprintf("%s %v", k, v.Round(10*time.Millisecond)))
		if earliest == 0 || v < earliest {
			earliest = v
		}
		latest = max(latest, v)
	}
	sort.Strings(fo)
	say("heal → first successful push per cut link (reconnection): %s", strings.Join(fo, ", "))
	if earliest > 0 && conv > earliest {
		say("transfer alone: %v from the first reconnected link to convergence (%.0f items/s), %v from the last (%.0f items/s)",
			(conv - earliest).Round(10*time.Millisecond), float64(nItems)/(conv-earliest).Seconds(),
			(conv - latest).Round(10*time.Millisecond), float64(nItems)/max(conv-latest, time.Millisecond).Seconds())
	}
	catchUp := writtenAt["us"] + writtenAt["eu"] + 2*writtenAt["ap"] // (region, item) pairs learned over the cut links
	say("CONVERGENCE after heal: %v (sample of %d items in all 3 regions at %v; every peer acknowledged every log event and cell change, every aggregator at its log head at %v); "+
		"%d items = %.0f items/s; %d (region, item) pairs crossed the cut links = %.0f pairs/s; load %s",
		conv.Round(10*time.Millisecond), nSample, sampleDone.Round(10*time.Millisecond), quietAt.Round(10*time.Millisecond),
		nItems, float64(nItems)/conv.Seconds(), catchUp, float64(catchUp)/conv.Seconds(), loadgen.LoadAverage())

	// Full check: every item, every region (not timed into the convergence).
	t0 := time.Now()
	bad := measFullCheck(c, nItems, item)
	for tries := 0; bad > 0 && tries < 60; tries++ {
		time.Sleep(time.Second)
		bad = measFullCheck(c, nItems, item)
	}
	if bad > 0 {
		t.Fatalf("after convergence, %d (region, item) pairs still do not count 1", bad)
	}
	say("full check: all %d items count 1 in all 3 regions (checked in %v)", nItems, time.Since(t0).Round(100*time.Millisecond))
	for _, n := range c.nodes {
		cnt, err := c.count(n, item(sample[0]))
		if err != nil || cnt.Count != 1 {
			t.Fatalf("HTTP count of %s at %s = %+v, %v; want 1", item(sample[0]), n.name, cnt, err)
		}
	}

	d := measShipStats(t, c).minus(ship0)
	likeEvents := measHeads(c) - heads0
	ev, cell := measSizes(t, c.byName["ap"].r, "part-")
	say("replication, partition + catch-up (includes probe/handshake traffic while cut): %s", d.describe(likeEvents, ev, cell))
	return lines
}

// measFullCheck counts the (region, item) pairs whose Σ cells is not 1.
func measFullCheck(c *triCluster, nItems int, item func(int) string) int {
	var bad atomic.Int64
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			for i := range nItems {
				if v, err := n.r.Store.Count(context.Background(), item(i)); err != nil || v != 1 {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(bad.Load())
}
