package region_test

// A region rebuilt from its peers (issue 14): its keyspace (or folder) is
// lost and replaced by a freshly migrated (empty) one; it carries the
// region's identity, so the start is refused until --bootstrap-from-peers,
// which rebuilds it from every peer's rebuild snapshot.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/pebblestore"
)

// rbLoad runs writers goroutines, each writing n likes and unlikes of its
// own users (so the model is exact) through nodes in turn, every write
// retried with its key until acknowledged; keys and users are prefixed, so
// loads never share a key.
func rbLoad(c *triCluster, m *lcModel, prefix string, items []string, writers, n int, nodes []*triNode) error {
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range n {
				node := nodes[(w+i)%len(nodes)]
				user := fmt.Sprintf("%s-w%d-u%d", prefix, w, i%5)
				item := items[(w+i)%len(items)]
				like := (i/2)%2 == 0
				if _, err := c.setRetry(node, user, item, fmt.Sprintf("%s-%d-%d", prefix, w, i), like, 30*time.Second); err != nil {
					errs <- err
					return
				}
				m.mu.Lock()
				m.liked[[2]string{item, user}] = like
				m.mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// rebuildCase is one engine shape of the rebuild test: every region's
// engines, how eu's lost data is replaced (a freshly migrated keyspace or an
// empty folder; with Kafka the old topic or a new one), and, when set, a
// start of eu on another region's data that must be refused.
type rebuildCase struct {
	engines map[string]region.Engines
	fresh   func(t *testing.T, cfg *region.Config)
	other   func(cfg region.Config) region.Config
	// twoNodes runs eu as node eu-1 and rebuilds it on two nodes started at
	// once (Cassandra only): both find the keyspace empty, one identity wins.
	twoNodes bool
}

// TestEnginesCassandraRebuild: three regions on Cassandra + Redis take
// writes; eu is killed and its keyspace replaced by a freshly migrated one
// while us and ap take more. The restart is refused on the empty keyspace,
// and on us's keyspace; with --bootstrap-from-peers eu rebuilds from both
// peers. Then a range moves to eu (planned) and eu writes its users: its
// new events take positions its peers have not passed and (aggregators on
// Kafka) topic positions above every adopted cell's HWM, so every region's
// counts equal the model of acknowledged writes and reconcile finds every
// cell equal to its LIKED edges. Once with the aggregators on the store's
// log, once on Kafka (eu keeps its topic: the lost data set's records stay
// in it, and the topic says the relay published positions the new log
// starts above), where eu comes back as two nodes started at once with the
// flag on the one empty keyspace.
func TestEnginesCassandraRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and three regions on the engines")
	}
	for _, log := range []string{region.LogStore, region.LogKafka} {
		t.Run("log "+log, func(t *testing.T) {
			rc := rebuildCase{engines: map[string]region.Engines{}}
			for _, name := range triNames {
				e := region.EnginesForTest(t, name)
				if log == region.LogStore {
					e.Log, e.Kafka = region.LogStore, region.KafkaEngine{}
				}
				rc.engines[name] = e
			}
			rc.fresh = func(t *testing.T, cfg *region.Config) {
				_, cfg.Engines.Cassandra.Keyspace = mixedKeyspace(t)
			}
			rc.other = func(cfg region.Config) region.Config {
				cfg.Engines.Cassandra.Keyspace = rc.engines["us"].Cassandra.Keyspace
				return cfg
			}
			rc.twoNodes = log == region.LogKafka
			checkRebuild(t, rc)
		})
	}
}

// TestKafkaRebuild: the rebuild of TestEnginesCassandraRebuild on the
// embedded store with the aggregators on an in-process Kafka; eu's folder
// is lost, and its topic kept or replaced by a new one (whose offsets start
// again at 0: only the data set's position base keeps its positions above
// the adopted cells' HWMs).
func TestKafkaRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and three regions")
	}
	for _, newTopic := range []bool{false, true} {
		t.Run(fmt.Sprintf("new topic %v", newTopic), func(t *testing.T) {
			kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kc.Close)
			rc := rebuildCase{engines: map[string]region.Engines{}}
			for _, name := range triNames {
				rc.engines[name] = region.Engines{Log: region.LogKafka, Kafka: region.KafkaEngine{
					Brokers: kc.ListenAddrs(), Topic: "likes-rb." + name, PollInterval: 5 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond}}
			}
			rc.fresh = func(t *testing.T, cfg *region.Config) {
				cfg.DataDir = t.TempDir()
				if newTopic {
					cfg.Engines.Kafka.Topic += ".new"
				}
			}
			checkRebuild(t, rc)
		})
	}
}

func checkRebuild(t *testing.T, rc rebuildCase) {
	t.Helper()
	c := startTriWith(t, triOpts{region: func(name string, cfg *region.Config) {
		cfg.Engines = rc.engines[name]
		if rc.twoNodes && name == "eu" {
			cfg.Cluster.Node = "eu-1"
		}
	}})
	items := []string{"rb-a", "rb-b", "rb-c"}
	m := &lcModel{liked: map[[2]string]bool{}}
	start := time.Now()
	if err := rbLoad(c, m, "rb1", items, 4, 24, c.nodes); err != nil {
		t.Fatalf("a write was not acknowledged: %v", err)
	}
	c.waitCounts(t, m.counts(items), 60*time.Second)
	t.Logf("loaded and converged in %v", time.Since(start).Round(time.Millisecond))

	// eu dies with its data; new, empty data replaces it.
	eu := c.byName["eu"]
	eu.down = true
	eu.srv.Close()
	if err := eu.r.KillForTest(); err != nil {
		t.Logf("kill eu: %v", err)
	}
	cfg := eu.cfg
	rc.fresh(t, &cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	refused := func(cfg region.Config, why string) {
		t.Helper()
		r, err := region.Open(ctx, cfg)
		if err == nil {
			_ = r.Close()
			t.Fatalf("eu opened on %s", why)
		}
		if !errors.Is(err, region.ErrIdentity) {
			t.Fatalf("eu on %s: %v, want region.ErrIdentity", why, err)
		}
		t.Logf("eu on %s refused: %v", why, err)
	}
	refused(cfg, "empty data without --bootstrap-from-peers")
	if rc.other != nil {
		other := rc.other(cfg)
		other.Lifecycle.BootstrapFromPeers = true
		refused(other, "us's data")
	}

	// The others go on: eu's ranges fail over to them.
	survivors := []*triNode{c.byName["us"], c.byName["ap"]}
	if err := rbLoad(c, m, "rb2", items, 4, 12, survivors); err != nil {
		t.Fatalf("a write was not acknowledged while eu was down: %v", err)
	}

	start = time.Now()
	cfg.Lifecycle.BootstrapFromPeers = true
	eu.cfg = cfg
	rebuilt := []*triNode{eu}
	if !rc.twoNodes {
		eu.start(t, nil)
	} else {
		eu2 := startBoth(t, c, eu)
		rebuilt = append(rebuilt, eu2)
	}
	c.poll(t, 90*time.Second, "eu to rebuild from both peers", func() (bool, string) {
		var b strings.Builder
		for _, n := range rebuilt {
			if p := rebuildingOf(n.r); len(p) > 0 {
				fmt.Fprintf(&b, " %s waits for %s", n.name, strings.Join(p, ","))
			}
		}
		return b.Len() == 0, b.String()
	})
	t.Logf("eu rebuilt in %v", time.Since(start).Round(time.Millisecond))
	eu.cfg.Lifecycle.BootstrapFromPeers = false
	c.waitCounts(t, m.counts(items), 90*time.Second)

	// One range comes to eu by a planned move; eu writes its users itself.
	var moved uint32
	found := false
	for _, p := range c.mustPins(t) {
		if p.Region != "eu" {
			if _, err := c.dir.Move(ctx, p.Range, p.Epoch, "eu", c.ecfg.NotBefore(time.Now()), etcdepoch.Planned()); err != nil {
				t.Fatal(err)
			}
			moved, found = p.Range, true
			break
		}
	}
	if !found {
		t.Fatal("every range is on eu already")
	}
	c.poll(t, 60*time.Second, "eu to own the moved range, settled", func() (bool, string) {
		p := c.mustPins(t)[moved]
		return p.Region == "eu" && !p.CatchUp, fmt.Sprintf("%+v", p)
	})
	var own []string
	for _, u := range triUsers(3) {
		if triOwner(c.mustPins(t), u).Region == "eu" {
			own = append(own, u)
		}
	}
	for i, u := range own {
		item := items[i%len(items)]
		if _, err := c.setRetry(eu, u, item, fmt.Sprintf("rb3-%d", i), true, 30*time.Second); err != nil {
			t.Fatalf("a write through eu after the rebuild: %v", err)
		}
		m.mu.Lock()
		m.liked[[2]string{item, u}] = true
		m.mu.Unlock()
	}
	if err := rbLoad(c, m, "rb4", items, 3, 9, c.nodes); err != nil {
		t.Fatalf("a write was not acknowledged after the rebuild: %v", err)
	}
	c.waitCounts(t, m.counts(items), 90*time.Second)
	c.reconcileClean(t, "every region's reconcile to find its cells equal to its LIKED edges")
	// The rebuild raised eu's log past its peers' cursors for it.
	raised := false
	for p := uint32(0); p < uint32(eu.cfg.Partitions); p++ {
		var (
			fl  uint64
			err error
		)
		if eu.r.Cassandra != nil {
			fl, err = eu.r.Cassandra.LogFloor(ctx, p)
		} else {
			fl, err = eu.r.Store.LogFloor(ctx, p)
		}
		if err != nil {
			t.Fatal(err)
		}
		raised = raised || fl > 0
	}
	if !raised {
		t.Fatal("no log partition of eu was raised past its peers' cursors")
	}
	if len(own) == 0 {
		t.Fatal("no user of the moved range written through eu")
	}
}

// rebuildingOf lists the peers r's store still waits for.
func rebuildingOf(r *region.Region) []string {
	if r.Cassandra != nil {
		return r.Cassandra.Rebuilding()
	}
	return r.Store.Rebuilding()
}

// TestKafkaRebuildRefusesRestoredFolder: a folder restored from a backup
// (likectl restore: marked restored and to rebuild from its peers, its log
// usually holding events; here of a bootstrapped data set, whose identity
// has a position base) is refused with the aggregators on Kafka, before
// anything serves: only an empty log can rise above the peers' cursors
// there. With --log store it opens.
func TestKafkaRebuildRefusesRestoredFolder(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	dir := t.TempDir()
	cfg := config(dir)
	st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(dir, cfg.Name), Region: cfg.Name, Partitions: cfg.Partitions, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRebuild([]string{"eu"}); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRestored(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The backup was of a bootstrapped data set: its identity has a base,
	// so only the restore's own mark tells.
	if err := region.WriteIdentity(filepath.Join(dir, cfg.Name), region.Identity{Format: 1, Region: cfg.Name,
		DataSet: "0123456789abcdef0123456789abcdef", CreatedMs: 1, PositionBase: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	kcfg := cfg
	kcfg.Engines = region.Engines{Log: region.LogKafka, Kafka: region.KafkaEngine{Brokers: kc.ListenAddrs(), PollInterval: 5 * time.Millisecond}}
	r, err := region.Open(context.Background(), kcfg)
	if err == nil {
		_ = r.Close()
		t.Fatal("a restored folder opened with --log kafka")
	}
	if !errors.Is(err, region.ErrIdentity) || !strings.Contains(err.Error(), "--log store") {
		t.Fatalf("restored folder with --log kafka: %v, want region.ErrIdentity naming --log store", err)
	}
	t.Logf("refused: %v", err)
	r, _ = open(t, cfg)
	if p := rebuildingOf(r); len(p) != 1 || p[0] != "eu" {
		t.Fatalf("the restored folder rebuilds from %v, want [eu]", p)
	}
}

// startBoth starts eu (node eu-1, on its configuration) and a second node
// eu-2 of the same region at once, both with --bootstrap-from-peers on the
// one empty keyspace, and adds eu-2 to the cluster's nodes.
func startBoth(t *testing.T, c *triCluster, eu *triNode) *triNode {
	t.Helper()
	ln1, err := net.Listen("tcp", eu.addr)
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := eu.cfg
	cl := *eu.cfg.Cluster
	cl.Node = "eu-2"
	cl.HTTPAdvertise = "http://" + ln2.Addr().String()
	cl.Seeds = []string{c.byName["us"].r.GossipAddr()}
	cfg2.Cluster = &cl
	eu2 := &triNode{name: "eu-2", cfg: cfg2, addr: ln2.Addr().String()}
	nodes := []*triNode{eu, eu2}
	opened := make([]*region.Region, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { opened[i], errs[i] = region.Open(context.Background(), n.cfg) })
	}
	wg.Wait()
	for i, n := range nodes {
		if errs[i] != nil {
			for _, r := range opened {
				if r != nil {
					_ = r.Close()
				}
			}
			_ = ln1.Close()
			_ = ln2.Close()
			t.Fatalf("open %s with --bootstrap-from-peers at once with the other node: %v", n.name, errs[i])
		}
	}
	eu.serve(opened[0], ln1)
	eu2.serve(opened[1], ln2)
	t.Cleanup(func() { eu2.stop(t) })
	c.nodes = append(c.nodes, eu2)
	return eu2
}
