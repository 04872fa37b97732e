package etcdepoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/likes-dev/likes/epoch"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/clock"
)

// Freshness is the lease proof an Authority needs: the send time of the last
// keepalive etcd acknowledged (zero when there is none). *KeepAlive is one.
type Freshness interface {
	LastKeepalive() time.Time
}

// KeepAliveConfig configures a region's lease.
type KeepAliveConfig struct {
	epoch.Config
	// Region is this region's registration (Name required).
	Region epoch.RegionInfo
	// Interval between keepalives (default TTL/4, at most (TTL − Margin)/2).
	Interval time.Duration
	// Clock stamps keepalives (default clock.Real). Scheduling is real time.
	Clock clock.Clock
	// Shared makes the lease the region's, not the process's: every node of
	// a region (likesd --node) keeps the one lease alive, so the region's
	// ranges stay writable while any node lives, and each node's proof is
	// its own keepalives. A node joins the lease its region key is bound to
	// and grants one only when there is none. Such a node leaves with
	// Abandon while other nodes live, and Closes (revokes) as the last.
	Shared bool
}

// KeepAlive keeps one region lease alive and its region key bound to it.
//
// Its loop sends one keepalive per Interval. A keepalive counts from the
// moment it was sent, so etcd's lease outlives LastKeepalive() + TTL. When
// etcd reports the lease gone (it expired during a partition, or was revoked
// by someone else), the loop grants a new lease and registers again; the
// Controller may have moved the region's ranges meanwhile, which the
// Authority sees through the pins.
type KeepAlive struct {
	cli    *clientv3.Client
	cfg    KeepAliveConfig
	value  string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	lease  clientv3.LeaseID
	last   time.Time
	closed bool

	closeOnce sync.Once
	closeErr  error
}

var _ Freshness = (*KeepAlive)(nil)

// StartKeepAlive grants the lease, registers the region under it, and starts
// the loop, which runs until Close or Abandon (ctx bounds the registration).
func StartKeepAlive(ctx context.Context, cli *clientv3.Client, cfg KeepAliveConfig) (*KeepAlive, error) {
	if cli == nil {
		return nil, errors.New("epoch: StartKeepAlive needs a client")
	}
	var err error
	if cfg.Config, err = cfg.Config.WithDefaults(); err != nil {
		return nil, err
	}
	if err := epoch.ValidRegion(cfg.Region.Name); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.TTL / 4
	}
	if cfg.Interval <= 0 || cfg.Interval > (cfg.TTL-cfg.Margin)/2 {
		return nil, fmt.Errorf("epoch: keepalive Interval must be in (0, (TTL-Margin)/2 = %v], got %v",
			(cfg.TTL-cfg.Margin)/2, cfg.Interval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	b, err := json.Marshal(cfg.Region)
	if err != nil {
		return nil, err
	}
	k := &KeepAlive{cli: cli, cfg: cfg, value: string(b), done: make(chan struct{})}
	rctx, cancel := context.WithTimeout(ctx, cfg.TTL)
	err = k.register(rctx)
	cancel()
	if err != nil {
		return nil, err
	}
	// ctx is for the registration only: the loop runs until Close or
	// Abandon, so a caller's cancelled context (Ctrl-C) cannot end the lease
	// before the region's ordered Close.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	go k.loop(lctx)
	return k, nil
}

// register grants a fresh lease and binds the region key to it (Shared: joins
// the region's lease when there is one).
func (k *KeepAlive) register(ctx context.Context) error {
	if k.cfg.Shared {
		return k.registerShared(ctx)
	}
	sent := k.cfg.Clock.Now()
	g, err := k.cli.Grant(ctx, k.cfg.TTLSeconds())
	if err != nil {
		return fmt.Errorf("epoch: grant lease for %s: %w", k.cfg.Region.Name, err)
	}
	k.mu.Lock()
	value := k.value
	k.mu.Unlock()
	if _, err := k.cli.Put(ctx, k.cfg.RegionKey(k.cfg.Region.Name), value, clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("epoch: register %s: %w", k.cfg.Region.Name, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	k.lease, k.last = g.ID, sent
	return nil
}

// registerShared joins the lease the region key is bound to, or grants one
// and binds the key to it only if no other node did first (a transaction),
// else joins that one.
func (k *KeepAlive) registerShared(ctx context.Context) error {
	key := k.cfg.RegionKey(k.cfg.Region.Name)
	for attempt := 0; attempt < 3; attempt++ {
		sent := k.cfg.Clock.Now()
		resp, err := k.cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("epoch: read registration of %s: %w", k.cfg.Region.Name, err)
		}
		if len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0 {
			id := clientv3.LeaseID(resp.Kvs[0].Lease)
			if _, err := k.cli.KeepAliveOnce(ctx, id); err == nil {
				k.setLease(id, sent)
				return nil
			} else if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("epoch: join lease of %s: %w", k.cfg.Region.Name, err)
			}
			continue // expired between the read and the keepalive
		}
		g, err := k.cli.Grant(ctx, k.cfg.TTLSeconds())
		if err != nil {
			return fmt.Errorf("epoch: grant lease for %s: %w", k.cfg.Region.Name, err)
		}
		k.mu.Lock()
		value := k.value
		k.mu.Unlock()
		tr, err := k.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(g.ID))).
			Commit()
		if err == nil && tr.Succeeded {
			k.setLease(g.ID, sent)
			return nil
		}
		_, _ = k.cli.Revoke(ctx, g.ID) // another node registered first: join its lease
		if err != nil {
			return fmt.Errorf("epoch: register %s: %w", k.cfg.Region.Name, err)
		}
	}
	return fmt.Errorf("epoch: register %s: the region's lease kept changing", k.cfg.Region.Name)
}

func (k *KeepAlive) setLease(id clientv3.LeaseID, sent time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.closed {
		k.lease, k.last = id, sent
	}
}

func (k *KeepAlive) loop(ctx context.Context) {
	defer close(k.done)
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k.mu.Lock()
		id := k.lease
		k.mu.Unlock()
		if id == clientv3.NoLease {
			k.tryRegister(ctx)
			continue
		}
		sent := k.cfg.Clock.Now()
		cctx, cancel := context.WithTimeout(ctx, k.cfg.Interval)
		_, err := k.cli.KeepAliveOnce(cctx, id)
		cancel()
		switch {
		case err == nil:
			k.mu.Lock()
			if !k.closed && sent.After(k.last) {
				k.last = sent
			}
			k.mu.Unlock()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// The lease expired: our proof is gone for good.
			k.mu.Lock()
			k.lease, k.last = clientv3.NoLease, time.Time{}
			k.mu.Unlock()
			k.tryRegister(ctx)
		default:
			// etcd unreachable or slow: keep trying; the proof ages meanwhile.
		}
	}
}

func (k *KeepAlive) tryRegister(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, k.cfg.TTL)
	defer cancel()
	_ = k.register(cctx) // failure: try again next tick
}

// SetDraining marks the registration as draining (epoch.RegionInfo.Draining), under
// the same lease, so the Controller stops failing ranges back to this region
// while it hands them off. It stays marked until the process ends: a region
// that restarts registers afresh, not draining.
func (k *KeepAlive) SetDraining(ctx context.Context) error {
	ri := k.cfg.Region
	ri.Draining = true
	b, err := json.Marshal(ri)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.value = string(b)
	id := k.lease
	k.mu.Unlock()
	if id == clientv3.NoLease {
		return fmt.Errorf("epoch: mark %s draining: %w", k.cfg.Region.Name, ErrNoLeaseProof)
	}
	if _, err := k.cli.Put(ctx, k.cfg.RegionKey(k.cfg.Region.Name), string(b), clientv3.WithLease(id)); err != nil {
		return fmt.Errorf("epoch: mark %s draining: %w", k.cfg.Region.Name, err)
	}
	return nil
}

// LastKeepalive is when the last acknowledged keepalive (or the grant) was
// sent, by the injected clock; zero when the lease is lost or closed.
func (k *KeepAlive) LastKeepalive() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// Lease is the current lease id (clientv3.NoLease when none).
func (k *KeepAlive) Lease() clientv3.LeaseID {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Close stops the loop, waits for it, and revokes the lease so the region key
// disappears at once (a clean shutdown: the Controller fails its ranges over
// without waiting for the TTL). Idempotent; later calls return the first
// result.
func (k *KeepAlive) Close() error { return k.stop(true) }

// Abandon stops the loop without revoking: the lease expires after its TTL,
// as if the process had died. Idempotent, and exclusive with Close.
func (k *KeepAlive) Abandon() { _ = k.stop(false) }

func (k *KeepAlive) stop(revoke bool) error {
	k.closeOnce.Do(func() {
		k.cancel()
		<-k.done
		k.mu.Lock()
		id := k.lease
		k.closed = true
		if revoke {
			k.lease, k.last = clientv3.NoLease, time.Time{}
		}
		k.mu.Unlock()
		if revoke && id != clientv3.NoLease {
			ctx, cancel := context.WithTimeout(context.Background(), k.cfg.TTL)
			defer cancel()
			if _, err := k.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				k.closeErr = fmt.Errorf("epoch: revoke lease of %s: %w", k.cfg.Region.Name, err)
			}
		}
	})
	return k.closeErr
}
