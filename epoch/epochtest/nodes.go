package epochtest

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// RunNodes checks several nodes of one region: one shared lease, the live
// node list, refusal of a taken name, and a singleton that runs on one node
// and moves when its node dies.
func RunNodes(t *testing.T, newClient func(t *testing.T) *clientv3.Client) {
	t.Run("SharedLease", func(t *testing.T) {
		cfg := Config(t, 8)
		cliA, cliB := newClient(t), newClient(t)
		kcfg := etcdepoch.KeepAliveConfig{Config: cfg, Region: epoch.RegionInfo{Name: "us"}, Shared: true}
		a := must[*etcdepoch.KeepAlive](t)(etcdepoch.StartKeepAlive(ctxFor(t), cliA, kcfg))
		b := must[*etcdepoch.KeepAlive](t)(etcdepoch.StartKeepAlive(ctxFor(t), cliB, kcfg))
		if a.Lease() != b.Lease() || a.Lease() == clientv3.NoLease {
			t.Fatalf("two nodes of one region hold leases %x and %x, want one", a.Lease(), b.Lease())
		}
		// The first node leaves (Abandon: others live); the lease lives on
		// through the second's keepalives, past the TTL.
		a.Abandon()
		ctxSleep(t, cfg.TTL+cfg.TTL/2)
		resp, err := cliB.Get(ctxFor(t), cfg.RegionKey("us"))
		if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != b.Lease() {
			t.Fatalf("region key after the first node left: %v %v", resp, err)
		}
		if time.Since(b.LastKeepalive()) > cfg.TTL/2+200*time.Millisecond {
			t.Fatalf("the remaining node's proof is %v old", time.Since(b.LastKeepalive()))
		}
		// The last node Closes: the region key goes at once.
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		resp, err = cliB.Get(ctxFor(t), cfg.RegionKey("us"))
		if err != nil || len(resp.Kvs) != 0 {
			t.Fatalf("region key after the last node closed: %v %v", resp, err)
		}
	})
	t.Run("LiveListAndTakenName", func(t *testing.T) {
		cfg := Config(t, 8)
		cli := newClient(t)
		start := func(name string, wait time.Duration) (*etcdepoch.Nodes, error) {
			return etcdepoch.StartNodes(ctxFor(t), cli, etcdepoch.NodesConfig{Config: cfg, Region: "us",
				Self: etcdepoch.NodeInfo{Node: name}, WaitTaken: wait})
		}
		n1 := must[*etcdepoch.Nodes](t)(start("us-1", 0))
		t.Cleanup(n1.Close)
		n2 := must[*etcdepoch.Nodes](t)(start("us-2", 0))
		Eventually(t, 5*time.Second, "both nodes live on both", func() bool {
			return len(n1.Live()) == 2 && len(n2.Live()) == 2
		})
		if _, err := start("us-1", 300*time.Millisecond); !errors.Is(err, etcdepoch.ErrNodeTaken) {
			t.Fatalf("second process named us-1: %v, want ErrNodeTaken", err)
		}
		for _, bad := range []string{"", "a/b", "a b"} {
			if _, err := start(bad, 0); err == nil {
				t.Fatalf("node name %q accepted", bad)
			}
		}
		// A hostile key under the prefix (no lease, not JSON) is no node.
		if _, err := cli.Put(ctxFor(t), etcdepoch.NodesPrefix(cfg, "us")+"evil", "{"); err != nil {
			t.Fatal(err)
		}
		n2.Close()
		n2.Close()
		Eventually(t, 5*time.Second, "us-2 gone at once from us-1's list", func() bool {
			l := n1.Live()
			return len(l) == 1 && l[0] == "us-1"
		})
	})
	t.Run("LastSelfWrite", func(t *testing.T) {
		cfg := Config(t, 2)
		cli := newClient(t)
		d := newDir(t, cli, cfg)
		if err := d.Init(ctxFor(t), 2, []string{"us", "eu"}); err != nil { // range 0 → us, 1 → eu
			t.Fatal(err)
		}
		started := time.Now()
		a := startAuthority(t, cli, cfg, "us", staticFreshness{}, nil)
		if got := a.LastSelfWrite(1); got.Before(started.Add(-time.Second)) || got.After(time.Now()) {
			t.Fatalf("a range never seen owned: %v, want the start %v", got, started)
		}
		if got := a.LastSelfWrite(0); time.Since(got) > time.Second {
			t.Fatalf("an owned range: %v, want now", got)
		}
		ps, err := d.Pins(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Move(ctxFor(t), 0, ps[0].Epoch, "eu", time.Now(), etcdepoch.Planned()); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 5*time.Second, "us to see range 0 leave", func() bool { return a.Seen(0, ps[0].Epoch+1) })
		moved := time.Now()
		if got := a.LastSelfWrite(0); got.After(moved) || time.Since(got) > 5*time.Second {
			t.Fatalf("a range that left: %v, want when it left (seen by %v)", got, moved)
		}
	})
	t.Run("Singleton", func(t *testing.T) {
		cfg := Config(t, 8)
		var running atomic.Int32
		var maxRunning atomic.Int32
		start := func(node string) *etcdepoch.Singleton {
			s, err := etcdepoch.StartSingleton(newClient(t), etcdepoch.SingletonConfig{Config: cfg, Region: "us", Role: "shipper", Node: node,
				Start: func() (io.Closer, error) {
					n := running.Add(1)
					for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
					}
					return closerFunc(func() error { running.Add(-1); return nil }), nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		a, b := start("us-1"), start("us-2")
		defer b.Close()
		Eventually(t, 5*time.Second, "one leader", func() bool { return a.Leading() != b.Leading() })
		leader, other := a, b
		if b.Leading() {
			leader, other = b, a
		}
		leader.Close()
		leader.Close()
		Eventually(t, 5*time.Second, "the other node leads", other.Leading)
		other.Close()
		if running.Load() != 0 {
			t.Fatalf("%d copies still running after both closed", running.Load())
		}
		if maxRunning.Load() != 1 {
			t.Fatalf("%d copies ran at once on a healthy etcd, want 1", maxRunning.Load())
		}
	})
}
