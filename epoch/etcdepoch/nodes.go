package etcdepoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/likes-dev/likes/epoch"
)

// ErrNodeTaken is wrapped by StartNodes when another live process already
// registered the same node name of the region.
var ErrNodeTaken = errors.New("epoch: node name taken")

// NodeInfo is one likesd process of a region, as registered in etcd.
type NodeInfo struct {
	Node string `json:"node"`
	HTTP string `json:"http,omitempty"`
	GRPC string `json:"grpc,omitempty"`
}

// maxNodeValue bounds a node registration read back from etcd: anything
// longer is not ours and is ignored.
const maxNodeValue = 4096

// ValidNode checks a node name: the rules of a region name.
func ValidNode(name string) error {
	if err := epoch.ValidRegion(name); err != nil {
		return fmt.Errorf("epoch: invalid node name %q", name)
	}
	return nil
}

// NodesConfig configures a region's node registration.
type NodesConfig struct {
	epoch.Config
	// Region is the region this node serves (required).
	Region string
	// Self is this node's registration (Node required, unique in the region).
	Self NodeInfo
	// WaitTaken is how long StartNodes waits for a registration of the same
	// name to expire (a process of that name that died moments ago) before it
	// refuses with ErrNodeTaken (default TTL + 1s).
	WaitTaken time.Duration
}

// Nodes registers one node of a region under a session lease of its own and
// keeps the region's live node list from a watch. A node that dies leaves the
// list when its session lease expires (one TTL); Close leaves at once.
//
// Its one loop renews the registration: when the session lease is lost (etcd
// was unreachable for a TTL) it registers again under a new session. The list
// is what the region's nodes split work by (Assign); it is a hint for
// efficiency, never for safety: two nodes that briefly disagree run the same
// partition or singleton twice, which the fences make harmless (region/doc.go).
type Nodes struct {
	cli    *clientv3.Client
	cfg    NodesConfig
	value  string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	sess    *concurrency.Session
	live    map[string]NodeInfo
	changes chan struct{}
	closed  bool

	closeOnce sync.Once
}

// NodesPrefix is where a region's nodes register.
func NodesPrefix(c epoch.Config, region string) string {
	return c.Prefix + "nodes/" + region + "/"
}

// StartNodes registers cfg.Self and starts the loop. ctx bounds the
// registration (including the wait for a taken name).
func StartNodes(ctx context.Context, cli *clientv3.Client, cfg NodesConfig) (*Nodes, error) {
	if cli == nil {
		return nil, errors.New("epoch: StartNodes needs a client")
	}
	var err error
	if cfg.Config, err = cfg.Config.WithDefaults(); err != nil {
		return nil, err
	}
	if err := epoch.ValidRegion(cfg.Region); err != nil {
		return nil, err
	}
	if err := ValidNode(cfg.Self.Node); err != nil {
		return nil, err
	}
	if cfg.WaitTaken == 0 {
		cfg.WaitTaken = cfg.TTL + time.Second
	}
	b, err := json.Marshal(cfg.Self)
	if err != nil {
		return nil, err
	}
	n := &Nodes{cli: cli, cfg: cfg, value: string(b), done: make(chan struct{}),
		live: map[string]NodeInfo{}, changes: make(chan struct{}, 1)}
	deadline := time.Now().Add(cfg.WaitTaken)
	for {
		err = n.register(ctx)
		if !errors.Is(err, ErrNodeTaken) || time.Now().After(deadline) {
			break
		}
		sleepCtx(ctx, cfg.TTL/4)
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	go n.loop(lctx)
	return n, nil
}

func (n *Nodes) key() string { return NodesPrefix(n.cfg.Config, n.cfg.Region) + n.cfg.Self.Node }

// register opens a session and creates the node key under it, refusing a
// name another live session holds.
func (n *Nodes) register(ctx context.Context) error {
	sess, err := concurrency.NewSession(n.cli, concurrency.WithTTL(int(n.cfg.TTLSeconds())),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return fmt.Errorf("epoch: node session for %s/%s: %w", n.cfg.Region, n.cfg.Self.Node, err)
	}
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(n.key()), "=", 0)).
		Then(clientv3.OpPut(n.key(), n.value, clientv3.WithLease(sess.Lease()))).
		Commit()
	if err != nil {
		_ = sess.Close()
		return fmt.Errorf("epoch: register node %s/%s: %w", n.cfg.Region, n.cfg.Self.Node, err)
	}
	if !resp.Succeeded {
		_ = sess.Close()
		return fmt.Errorf("%w: node %q of region %s is registered by another live process (its registration expires one lease TTL after it dies)",
			ErrNodeTaken, n.cfg.Self.Node, n.cfg.Region)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		_ = sess.Close()
		return nil
	}
	n.sess = sess
	return nil
}

func (n *Nodes) loop(ctx context.Context) {
	defer close(n.done)
	for ctx.Err() == nil {
		n.mu.Lock()
		sess := n.sess
		n.mu.Unlock()
		if sess == nil {
			if err := n.register(ctx); err != nil {
				sleepCtx(ctx, n.cfg.TTL/4)
			}
			continue
		}
		n.watch(ctx, sess)
		n.mu.Lock()
		if n.sess == sess {
			select {
			case <-sess.Done():
				n.sess = nil // lost: register again
			default:
			}
		}
		n.mu.Unlock()
	}
}

// watch keeps the live list from a read and a watch until ctx ends, the
// session is lost or the watch fails.
func (n *Nodes) watch(ctx context.Context, sess *concurrency.Session) {
	prefix := NodesPrefix(n.cfg.Config, n.cfg.Region)
	resp, err := n.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		sleepCtx(ctx, n.cfg.TTL/4)
		return
	}
	live := map[string]NodeInfo{}
	for _, kv := range resp.Kvs {
		if ni, ok := n.parse(kv); ok {
			live[ni.Node] = ni
		}
	}
	n.set(live)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := n.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				sleepCtx(ctx, n.cfg.TTL/4)
				return
			}
			for _, ev := range wr.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), prefix)
				if ev.Type == mvccpb.DELETE {
					delete(live, name)
				} else if ni, ok := n.parse(ev.Kv); ok {
					live[ni.Node] = ni
				}
			}
			n.set(live)
		}
	}
}

// parse reads one registration; a malformed one (not written by a node) is
// skipped, so a hostile key cannot take partitions from live nodes.
func (n *Nodes) parse(kv *mvccpb.KeyValue) (NodeInfo, bool) {
	name := strings.TrimPrefix(string(kv.Key), NodesPrefix(n.cfg.Config, n.cfg.Region))
	if len(kv.Value) > maxNodeValue || ValidNode(name) != nil || kv.Lease == 0 {
		return NodeInfo{}, false
	}
	var ni NodeInfo
	if err := json.Unmarshal(kv.Value, &ni); err != nil || ni.Node != name {
		return NodeInfo{}, false
	}
	return ni, true
}

func (n *Nodes) set(live map[string]NodeInfo) {
	cp := make(map[string]NodeInfo, len(live)+1)
	for k, v := range live {
		cp[k] = v
	}
	n.mu.Lock()
	n.live = cp
	n.mu.Unlock()
	select {
	case n.changes <- struct{}{}:
	default:
	}
}

// Live returns the region's live node names, sorted, always including this
// node (whatever the watch lags: it splits work as if it were registered).
func (n *Nodes) Live() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.live)+1)
	self := false
	for k := range n.live {
		out = append(out, k)
		self = self || k == n.cfg.Self.Node
	}
	if !self {
		out = append(out, n.cfg.Self.Node)
	}
	sort.Strings(out)
	return out
}

// Others reports how many other nodes of the region are live.
func (n *Nodes) Others() int { return len(n.Live()) - 1 }

// Self is this node's name.
func (n *Nodes) Self() string { return n.cfg.Self.Node }

// Changes is signalled (coalesced) when the live list may have changed.
func (n *Nodes) Changes() <-chan struct{} { return n.changes }

// Abandon stops the loop and leaves the registration to expire after its
// TTL, as if the process had died. Idempotent, exclusive with Close.
func (n *Nodes) Abandon() { n.stop(false) }

// Close stops the loop and deletes the registration at once (the session's
// lease is revoked), so the other nodes take this node's work without
// waiting for the TTL. Idempotent.
func (n *Nodes) Close() { n.stop(true) }

func (n *Nodes) stop(revoke bool) {
	n.closeOnce.Do(func() {
		if n.cancel != nil {
			n.cancel()
			<-n.done
		}
		n.mu.Lock()
		sess := n.sess
		n.sess, n.closed = nil, true
		n.mu.Unlock()
		switch {
		case sess == nil:
		case revoke:
			_ = sess.Close()
		default:
			sess.Orphan()
		}
	})
}
