package region_test

// Several likesd nodes per region (issue 12): three regions on Cassandra +
// Kafka + Redis, region us served by two nodes (us-1, us-2) on the same
// keyspace, topic and Redis prefix. Skipped without the servers
// (bash scripts/servers.sh up && eval "$(bash scripts/servers.sh env)").

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/region"
)

// TestEnginesTwoNodes: us's two nodes split its log partitions (every
// partition on exactly one node) and elect one shipper; likes and unlikes
// with duplicate retries through both nodes and the other regions are exact
// everywhere; when us-1 stops, us-2 takes every partition and the shipper
// without a restart, the writes through us-2 go on, and when us-1 comes back
// it takes its share again; at the end every region (and both us nodes)
// counts what was acknowledged, reconcile finds nothing.
func TestEnginesTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and three regions on the engines, one of them on two nodes")
	}
	const parts = 16
	c := startEnginesUS1(t, parts, func(name string, cfg *region.Config) {
		cfg.Cluster.FailbackAfter = -1 // the drain below must stay drained however slow the machine
		if name == "us" {
			// A planned move away from us waits TTL + skew + one request
			// timeout in its Fencer (the other node's writes in flight).
			cfg.Engines.Cassandra.Timeout = 5 * time.Second
		}
	})
	us1 := c.byName["us"]
	us1.name = "us-1"
	us2 := startSecondNode(t, c, us1, "us-2")

	// The split: both nodes see each other, every partition has one owner.
	c.poll(t, 20*time.Second, "us's partitions split over us-1 and us-2, one shipper", func() (bool, string) {
		a, b := us1.r.OwnedPartitionsForTest(), us2.r.OwnedPartitionsForTest()
		all := slices.Sorted(slices.Values(append(slices.Clone(a), b...)))
		ok := len(a) > 0 && len(b) > 0 && len(all) == parts && len(slices.Compact(all)) == parts &&
			us1.r.ShippingForTest() != us2.r.ShippingForTest()
		return ok, fmt.Sprintf("us-1 %v, us-2 %v; shipping %v/%v", a, b, us1.r.ShippingForTest(), us2.r.ShippingForTest())
	})

	m := newNodeModel()
	users := triUsers(1)
	via := []*triNode{us1, us2, c.byName["eu"], c.byName["ap"]}
	m.load(t, c, users, via, "a", 0)

	// us-2 is killed: its registration, elections and lease share stay
	// until they expire (one TTL); then us-1 folds every partition and ships.
	us2.kill(t)
	c.nodes = slices.DeleteFunc(c.nodes, func(n *triNode) bool { return n == us2 })
	c.poll(t, 20*time.Second, "us-1 folds every partition and ships after us-2 died", func() (bool, string) {
		got := us1.r.OwnedPartitionsForTest()
		return len(got) == parts && us1.r.ShippingForTest(), fmt.Sprintf("us-1 %v shipping %v", got, us1.r.ShippingForTest())
	})
	m.load(t, c, users, []*triNode{us1, c.byName["eu"], c.byName["ap"]}, "k", 1)
	us2.start(t, nil)
	c.nodes = append(c.nodes, us2)
	c.poll(t, 20*time.Second, "us-2 back with its share", func() (bool, string) {
		a, b := us1.r.OwnedPartitionsForTest(), us2.r.OwnedPartitionsForTest()
		return len(b) > 0 && len(a)+len(b) == parts, fmt.Sprintf("us-1 %v us-2 %v", a, b)
	})

	// us-1 stops (graceful: its node key goes at once); us-2 serves on.
	us1.stop(t)
	c.nodes = slices.DeleteFunc(c.nodes, func(n *triNode) bool { return n == us1 })
	c.poll(t, 20*time.Second, "us-2 folds every partition and ships", func() (bool, string) {
		got := us2.r.OwnedPartitionsForTest()
		return len(got) == parts && us2.r.ShippingForTest(), fmt.Sprintf("us-2 %v shipping %v", got, us2.r.ShippingForTest())
	})
	m.load(t, c, users, []*triNode{us2, c.byName["eu"], c.byName["ap"]}, "b", 2)

	// us-1 comes back: no other process restarts; it takes its share again.
	cl := *us1.cfg.Cluster
	cl.Seeds = []string{us2.r.GossipAddr()} // it was the first region: it had no seeds
	us1.cfg.Cluster = &cl
	us1.start(t, nil)
	c.nodes = append(c.nodes, us1)
	c.poll(t, 20*time.Second, "us-1 back with its share", func() (bool, string) {
		a, b := us1.r.OwnedPartitionsForTest(), us2.r.OwnedPartitionsForTest()
		return len(a) > 0 && len(a)+len(b) == parts, fmt.Sprintf("us-1 %v us-2 %v", a, b)
	})
	m.load(t, c, users, via, "c", 3)

	// An erasure of a user us owns, requested through us-2, while both us
	// nodes run an eraser on the shared store: exact counts, the job's
	// report, and no like of the user accepted afterwards through any node.
	// (A user the load above never wrote, so the job's report is exactly
	// the five likes it gets there.)
	if !t.Run("ErasureAcrossNodes", func(t *testing.T) { testTriErasure(t, c, triUserOf(t, c, "us", users), us2) }) {
		return
	}

	// A planned move of every us range to eu (a drain) under load through
	// both us nodes and the other regions: no write is acknowledged under
	// us's old epoch after the move, eu settles behind the barrier (us's
	// Fencer waits out its Settle), and counts converge.
	t.Run("PinMoveUnderLoad", func(t *testing.T) { testTriPinMove(t, c, users) })

	c.waitCounts(t, m.counts(), 90*time.Second)
	for _, n := range c.nodes {
		rec, err := c.reconcile(n)
		if err != nil {
			t.Fatalf("reconcile at %s: %v", n.name, err)
		}
		if len(rec.Mismatched) != 0 {
			t.Fatalf("reconcile at %s found %d mismatched items: %s", n.name, len(rec.Mismatched), rec.Mismatched)
		}
	}
}

// startEnginesUS1 starts three regions on the engines (a keyspace, topic and
// Redis prefix each) with parts log partitions, region us as node us-1;
// tweak adjusts each region's configuration.
func startEnginesUS1(t *testing.T, parts int, tweak func(name string, cfg *region.Config)) *triCluster {
	t.Helper()
	engines := map[string]region.Engines{}
	for _, name := range []string{"us", "eu", "ap"} {
		engines[name] = region.EnginesForTest(t, name)
	}
	return startTriWith(t, triOpts{region: func(name string, cfg *region.Config) {
		cfg.Engines = engines[name]
		cfg.Partitions = parts
		if name == "us" {
			cfg.Cluster.Node = "us-1"
		}
		if tweak != nil {
			tweak(name, cfg)
		}
	}})
}

// startSecondNode starts another node of first's region on the same engines.
func startSecondNode(t *testing.T, c *triCluster, first *triNode, node string) *triNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := first.cfg
	cl := *first.cfg.Cluster
	cl.Node = node
	cl.HTTPAdvertise = "http://" + ln.Addr().String()
	cl.Seeds = []string{first.r.GossipAddr()}
	cfg.Cluster = &cl
	n := &triNode{name: node, cfg: cfg, addr: ln.Addr().String()}
	n.start(t, ln)
	t.Cleanup(func() { n.stop(t) })
	c.nodes = append(c.nodes, n)
	return n
}

// nodeModel is the acknowledged state of every (item, user).
type nodeModel struct {
	mu    sync.Mutex
	liked map[[2]string]bool
}

func newNodeModel() *nodeModel { return &nodeModel{liked: map[[2]string]bool{}} }

// load writes, for each user, a like of item "tn-<phase>-<i%4>" through one
// node and the same key again through another (a duplicate retry: it must
// replay, not count), and in a later phase unlikes some of the earlier likes.
func (m *nodeModel) load(t *testing.T, c *triCluster, users []string, via []*triNode, phase string, round int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(users))
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item := fmt.Sprintf("tn-%s-%d", phase, i%4)
			key := fmt.Sprintf("k-%s-%s", phase, u)
			first, second := via[i%len(via)], via[(i+1)%len(via)]
			a, err := c.setRetry(first, u, item, key, true, 30*time.Second)
			if err != nil {
				errs <- err
				return
			}
			b, err := c.setRetry(second, u, item, key, true, 30*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if a.ans != b.ans {
				errs <- fmt.Errorf("retry of key %s through %s answered %+v, the first write through %s %+v", key, second.name, b.ans, first.name, a.ans)
				return
			}
			m.mu.Lock()
			m.liked[[2]string{item, u}] = true
			m.mu.Unlock()
			if round == 0 || i%3 != 0 {
				return
			}
			// Unlike this user's like of an earlier phase through yet another node.
			old := fmt.Sprintf("tn-%s-%d", map[int]string{1: "a", 2: "k", 3: "b"}[round], i%4)
			if _, err := c.setRetry(via[(i+2)%len(via)], u, old, "u-"+key, false, 30*time.Second); err != nil {
				errs <- err
				return
			}
			m.mu.Lock()
			m.liked[[2]string{old, u}] = false
			m.mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func (m *nodeModel) counts() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for k, v := range m.liked {
		if _, ok := out[k[0]]; !ok {
			out[k[0]] = 0
		}
		if v {
			out[k[0]]++
		}
	}
	return out
}

// kill stops the node's HTTP server and closes its region as if the process
// died: what it holds in etcd expires on its own (region.KillForTest).
func (n *triNode) kill(t *testing.T) {
	t.Helper()
	if n.down {
		return
	}
	n.down = true
	n.srv.Close()
	if err := n.r.KillForTest(); err != nil {
		t.Errorf("kill %s: %v", n.name, err)
	}
}
