package region_test

// Adding and retiring a region on a running cluster (issue 14), on the
// three-region harness (clusterhelpers_test.go) with mutual TLS: the others
// accept the new region's certificate because the registry names it.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/peertls"
	"github.com/likes-dev/likes/region"
)

// lcModel is the acknowledged state of every edge a writer set: one writer
// per user, each write retried with its key until acknowledged, in order.
type lcModel struct {
	mu    sync.Mutex
	liked map[[2]string]bool
}

func (m *lcModel) counts(items []string) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for _, it := range items {
		out[it] = 0
	}
	for k, v := range m.liked {
		if v {
			out[k[0]]++
		}
	}
	return out
}

// lcLoad writes through every node in nodes() until stop, each goroutine
// with its own users (so the model is exact), and reports the first error.
func lcLoad(t *testing.T, c *triCluster, m *lcModel, items []string, writers int, nodes func() []*triNode, stop <-chan struct{}) func() error {
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ns := nodes()
				n := ns[(w+i)%len(ns)]
				user := fmt.Sprintf("lc-w%d-u%d", w, i%7)
				item := items[(w+i)%len(items)]
				like := (i/3)%2 == 0
				if _, err := c.setRetry(n, user, item, fmt.Sprintf("lc-%d-%d", w, i), like, 20*time.Second); err != nil {
					errs <- err
					return
				}
				m.mu.Lock()
				m.liked[[2]string{item, user}] = like
				m.mu.Unlock()
				if i >= 400 { // bounded: a slow machine ends the load, not the test
					return
				}
			}
		})
	}
	return func() error {
		wg.Wait()
		close(errs)
		return <-errs
	}
}

// addNode starts a new region named name in c (joining through us's gossip),
// rebuilding from its peers, on its own engines (nil: the embedded store, as
// us's configuration has it).
func (c *triCluster) addNode(t *testing.T, name string, all []string, engines *region.Engines) *triNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.byName["us"].cfg
	cfg.Name = name
	cc := *cfg.Cluster
	cc.Regions, cc.Seeds, cc.HTTPAdvertise = all, []string{c.byName["us"].r.GossipAddr()}, "http://"+ln.Addr().String()
	cfg.Cluster = &cc
	cfg.Lifecycle.BootstrapFromPeers = true
	if engines != nil {
		cfg.Engines = *engines
	}
	if c.certs != "" {
		ids, err := peertls.EnsureDev(c.certs, []string{name})
		if err != nil {
			t.Fatal(err)
		}
		cc.TLS = ids[name]
	}
	n := &triNode{name: name, cfg: cfg, addr: ln.Addr().String()}
	n.start(t, ln)
	t.Cleanup(func() { n.stop(t) })
	return n
}

func (c *triCluster) regionState(t *testing.T, name string) epoch.RegionState {
	t.Helper()
	rec, err := c.dir.RegionRecord(context.Background(), name)
	if err != nil {
		return epoch.RegionState("error: " + err.Error())
	}
	return rec.State
}

// TestRegionAddUnderLoad: a fourth region is added while every region takes
// writes; it rebuilds from its peers, becomes active, takes ranges only by
// planned moves, takes writes itself; in the end every region's count equals
// the model of acknowledged writes and its own LIKED edges (reconcile finds
// no mismatch).
func TestRegionAddUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and four regions")
	}
	testRegionAddUnderLoad(t, startTri(t), nil)
}

// TestEnginesRegionAddUnderLoad: the same on Cassandra + Kafka + Redis:
// three regions take writes, sa joins on a fresh keyspace and topic,
// rebuilds from its peers (a joining region's rebuild raises nothing, so
// its aggregators may read Kafka) and takes two ranges by planned moves.
func TestEnginesRegionAddUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and four regions on the engines")
	}
	engines := map[string]region.Engines{}
	for _, name := range append(slices.Clone(triNames), "sa") {
		engines[name] = region.EnginesForTest(t, name)
	}
	c := startTriWith(t, triOpts{region: func(name string, cfg *region.Config) { cfg.Engines = engines[name] }})
	sa := engines["sa"]
	testRegionAddUnderLoad(t, c, &sa)
}

func testRegionAddUnderLoad(t *testing.T, c *triCluster, saEngines *region.Engines) {
	items := []string{"lc-a", "lc-b", "lc-c"}
	m := &lcModel{liked: map[[2]string]bool{}}
	var nmu sync.Mutex
	live := append([]*triNode(nil), c.nodes...)
	nodes := func() []*triNode { nmu.Lock(); defer nmu.Unlock(); return live }
	stop := make(chan struct{})
	wait := lcLoad(t, c, m, items, 6, nodes, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			_ = wait()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.dir.AddRegion(ctx, "sa", time.Now()); err != nil {
		t.Fatal(err)
	}
	sa := c.addNode(t, "sa", []string{"us", "eu", "ap", "sa"}, saEngines)
	c.nodes = append(c.nodes, sa)
	c.byName["sa"] = sa
	nmu.Lock()
	live = append(live, sa) // writes through sa too, forwarded until it owns ranges
	nmu.Unlock()
	c.poll(t, 60*time.Second, "sa to rebuild and become active", func() (bool, string) {
		st := c.regionState(t, "sa")
		return st == epoch.StateActive, string(st)
	})
	// No failover or failback gave it anything: only planned moves do.
	for _, p := range c.mustPins(t) {
		if p.Region == "sa" {
			t.Fatalf("range %d on sa before any planned move", p.Range)
		}
	}
	// Two of us's ranges move to sa (planned: the catch-up barrier).
	moved := 0
	for _, p := range c.mustPins(t) {
		if p.Region == "us" && moved < 2 {
			if _, err := c.dir.Move(ctx, p.Range, p.Epoch, "sa", c.ecfg.NotBefore(time.Now()), etcdepoch.Planned()); err != nil {
				t.Fatal(err)
			}
			moved++
		}
	}
	c.poll(t, 60*time.Second, "sa to own two settled ranges", func() (bool, string) {
		n := 0
		for _, p := range c.mustPins(t) {
			if p.Region == "sa" && !p.CatchUp {
				n++
			}
		}
		return n == 2, fmt.Sprint(n)
	})
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("a write was not acknowledged: %v", err)
	}
	want := m.counts(items)
	c.waitCounts(t, want, 60*time.Second)
	c.reconcileClean(t, "every region's reconcile to find its cells equal to its LIKED edges")
	for _, p := range c.mustPins(t) {
		if p.Region == "sa" && p.Epoch < 2 {
			t.Fatalf("range %d on sa at epoch %d", p.Range, p.Epoch)
		}
	}
}

// TestRegionRetire: ap is retired (drained by planned moves, its log and
// cells shipped, then marked retired and stopped); every count is unchanged
// everywhere, the likes ap accepted included; asOf keeps moving without it;
// a restart of ap under its name is refused; adding its name is refused.
func TestRegionRetire(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and three regions")
	}
	c := startTri(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	items := []string{"rt-a", "rt-b"}
	m := &lcModel{liked: map[[2]string]bool{}}
	stop := make(chan struct{})
	wait := lcLoad(t, c, m, items, 3, func() []*triNode { return c.nodes }, stop)
	c.poll(t, 30*time.Second, "some writes", func() (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.liked) >= 20, fmt.Sprint(len(m.liked))
	})
	close(stop)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	want := m.counts(items)
	c.waitCounts(t, want, 30*time.Second)

	// The retirement, step by step as likectl regions retire does it.
	ap := c.byName["ap"]
	if _, err := c.dir.SetRegionState(ctx, "ap", epoch.StateDraining, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.dir.Drain(ctx, "ap", "eu", c.ecfg.NotBefore(time.Now()), etcdepoch.Planned()); err != nil {
		t.Fatal(err)
	}
	c.poll(t, 30*time.Second, "ap's ranges settled at eu", func() (bool, string) {
		for _, p := range c.mustPins(t) {
			if p.Region == "ap" || p.CatchUp {
				return false, c.pinString()
			}
		}
		return true, ""
	})
	c.poll(t, 30*time.Second, "ap's log and cells shipped to both peers", func() (bool, string) {
		st, err := c.status(ap)
		if err != nil {
			return false, err.Error()
		}
		ok := st.AggregatorLag == 0
		for _, p := range st.Peers {
			ok = ok && (!p.Active || p.LagEvents == 0)
		}
		return ok, fmt.Sprintf("%+v", st.Peers)
	})
	if _, err := c.dir.SetRegionState(ctx, "ap", epoch.StateRetired, time.Now()); err != nil {
		t.Fatal(err)
	}
	ap.stop(t)
	stoppedAt := time.Now()
	c.nodes = []*triNode{c.byName["us"], c.byName["eu"]}
	c.waitCounts(t, want, 30*time.Second)
	c.reconcileClean(t, "reconcile at us and eu: cells (ap's included) equal LIKED edges")
	// asOf is not held at ap's last watermark: the retired region is out of it.
	c.poll(t, 30*time.Second, "asOf at us past ap's stop", func() (bool, string) {
		got, err := c.count(c.byName["us"], items[0])
		if err != nil {
			return false, err.Error()
		}
		return got.AsOf.After(stoppedAt), got.AsOf.String()
	})
	// A restart under its name is refused, and leaves no lease behind.
	if r, err := region.Open(context.Background(), ap.cfg); !errors.Is(err, region.ErrRegistry) || !strings.Contains(err.Error(), "retired") {
		if r != nil {
			_ = r.Close()
		}
		t.Fatalf("restart of a retired region: %v", err)
	}
	if _, err := c.dir.AddRegion(ctx, "ap", time.Now()); !errors.Is(err, etcdepoch.ErrRegionRetired) {
		t.Fatalf("add of a retired name: %v", err)
	}
	// A name never added is refused too.
	cfg := ap.cfg
	cfg.Name = "xx"
	if r, err := region.Open(context.Background(), cfg); !errors.Is(err, region.ErrRegistry) || !strings.Contains(err.Error(), "never added") {
		if r != nil {
			_ = r.Close()
		}
		t.Fatalf("start of a never-added region: %v", err)
	}
	for _, p := range c.mustPins(t) {
		if p.Region == "ap" {
			t.Fatalf("range %d back on retired ap", p.Range)
		}
	}
}

// reconcileClean polls until every node's reconciliation finds no item whose
// cells differ from its LIKED edges.
func (c *triCluster) reconcileClean(t *testing.T, what string) {
	t.Helper()
	c.poll(t, 30*time.Second, what, func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, n := range c.nodes {
			rep, err := c.reconcile(n)
			if err != nil || len(rep.Mismatched) > 0 {
				ok = false
				fmt.Fprintf(&b, "%s: %v %d mismatched; ", n.name, err, len(rep.Mismatched))
			}
		}
		return ok, b.String()
	})
}
