package region

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// Several nodes per region (Cluster.Node; issue 12). Every node serves the
// whole HTTP API and the gRPC plane on the region's shared engines, and takes
// its write authority from the region's one lease, which every node keeps
// alive (etcdepoch.KeepAlive.Shared), and its own view of the pins. What a
// region runs once is split or elected over its live nodes
// (etcdepoch.Nodes):
//
//   - the aggregators and the Kafka relay of log partition p run on the node
//     epoch.Assign gives p; a node's death moves its partitions when its
//     registration expires (one TTL), a clean stop at once;
//   - the replication shipper, the planned-move barrier and the erasure
//     steps run on one elected node each (etcdepoch.Singleton), re-elected
//     when it dies (an erasure requested at another node is recorded there
//     and stepped by the elected one: a job's report is exact only with one
//     runner, edge.EraserConfig.Active);
//   - the failover controller, the reconciler and the registry view run on
//     every node (they act by compare-and-swap in etcd or only read).
//
// None of this is what keeps counts exact, so a split or an election that
// is briefly wrong (two nodes think they own a partition, two shippers) costs
// work, not correctness: cell commits are fenced on each cell's HWM, a
// partition relayed twice is deduplicated by the aggregators, and peers
// apply pushes idempotently behind their cursors. What must hold across
// nodes is the write rule: edge writes are conditional transactions on the
// shared store (idempotency records included), and a planned move's barrier
// asks the old owner's Fencer for heads only after Settle (catchup.Fencer),
// since one node cannot see the other nodes' writes in flight.
//
// The embedded store (Pebble) is one process's folder: a region on it is one
// node, and Cluster.Node needs the Cassandra store.

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// role is a component a region runs once, and how to start it.
type role struct {
	name  string
	start func() (io.Closer, error)
}

// runOnce starts each role: directly on a region of one process, else
// through an election among the region's nodes.
func (p *clusterParts) runOnce(c *Cluster, name string, ecfg epoch.Config, log *slog.Logger, roles []role) error {
	for _, ro := range roles {
		role, start := ro.name, ro.start
		if c.Node == "" {
			cl, err := start()
			if err != nil {
				return err
			}
			p.direct = append(p.direct, cl)
			continue
		}
		s, err := etcdepoch.StartSingleton(c.Etcd, etcdepoch.SingletonConfig{Config: ecfg, Region: name, Role: role, Node: c.Node,
			Start: start, OnError: func(err error) { log.Warn("could not start a region singleton; retrying", "role", role, "err", err) }})
		if err != nil {
			return err
		}
		p.singletons = append(p.singletons, s)
	}
	return nil
}

// stopOnce stops what runOnce started, in reverse order (abandoning the
// elections when the region is being killed by a test).
func (p *clusterParts) stopOnce() {
	for i := len(p.singletons) - 1; i >= 0; i-- {
		if p.crash {
			p.singletons[i].Abandon()
		} else {
			p.singletons[i].Close()
		}
	}
	for i := len(p.direct) - 1; i >= 0; i-- {
		_ = p.direct[i].Close()
	}
	p.singletons, p.direct = nil, nil
}

// settle is the Fencer's wait on a region of several nodes (zero on one):
// how long after a pin changed another node may still commit under the
// older epoch (catchup.Fencer.Settle).
func (p *clusterParts) settle(c *Cluster, ecfg epoch.Config) time.Duration {
	if c.Node == "" {
		return 0
	}
	req := c.storeRequest
	if req <= 0 {
		req = 10 * time.Second // the Cassandra session's default
	}
	return ecfg.TTL + ecfg.MaxSkew + req
}

// lastNode reports whether no other node of the region is live (always, on a
// region of one process): only the last node hands the region's ranges off,
// marks it draining, and revokes its lease.
func (p *clusterParts) lastNode() bool {
	return p.nodes == nil || p.nodes.Others() == 0
}

// assigner keeps this node's share of the log partitions (epoch.Assign over
// the live nodes) and restarts the aggregators and the relay on a change.
// One loop; Close stops it and waits.
type assigner struct {
	r       *Region
	nodes   *etcdepoch.Nodes
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started atomic.Bool

	mu    sync.Mutex
	parts []uint32
}

// owned is this node's share now.
func (a *assigner) owned() []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.parts)
}

func (a *assigner) compute() []uint32 {
	parts := epoch.Assign(a.nodes.Live(), a.r.Backend.Partitions(), a.nodes.Self())
	if parts == nil {
		parts = []uint32{} // none: not nil, which means every partition
	}
	return parts
}

func newAssigner(r *Region, nodes *etcdepoch.Nodes) *assigner {
	a := &assigner{r: r, nodes: nodes, stop: make(chan struct{}), done: make(chan struct{})}
	a.parts = a.compute()
	return a
}

// start starts the loop (once the first share's aggregators run). A change
// between newAssigner and start is not lost: Changes holds one signal.
func (a *assigner) start() {
	a.started.Store(true)
	go a.loop()
}

func (a *assigner) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.stop:
			return
		case <-a.nodes.Changes():
		}
		parts := a.compute()
		a.mu.Lock()
		same := slices.Equal(parts, a.parts)
		a.parts = parts
		a.mu.Unlock()
		if same {
			continue
		}
		a.r.log.Info("the region's nodes changed: this node now folds and relays its share of the log partitions",
			"nodes", a.nodes.Live(), "partitions", parts)
		a.r.reassign(parts)
	}
}

func (a *assigner) Close() {
	a.once.Do(func() {
		close(a.stop)
		if a.started.Load() {
			<-a.done
		}
	})
}

// ownedParts is this node's share of the log partitions, nil for all.
func (r *Region) ownedParts() []uint32 {
	if r.assign == nil {
		return nil
	}
	return r.assign.owned()
}

// reassign restarts the relay and the aggregators on this node's new share
// (each resumes from what the store and Kafka hold, as after a restart).
// It retries until they run or the assigner stops.
func (r *Region) reassign(parts []uint32) {
	r.stopAggregators()
	r.stopRelay()
	r.pmu.Lock()
	r.pcfg.Partitions = parts
	r.pmu.Unlock()
	backoff := 100 * time.Millisecond
	relayUp := r.cfg.Engines.Log != LogKafka
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		if !relayUp {
			if err = r.startRelay(ctx); err == nil {
				relayUp = true
			}
		}
		if err == nil {
			err = r.startAggregators(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		r.log.Warn("could not restart this node's share of the pipeline; retrying", "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-r.assign.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
