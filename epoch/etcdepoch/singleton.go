package etcdepoch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/likes-dev/likes/epoch"
)

// SingletonConfig configures a component of which a region runs one copy
// over all its nodes (its replication shipper, its planned-move barrier).
type SingletonConfig struct {
	epoch.Config
	// Region and Role name the election; Node is this candidate (all required).
	Region, Role, Node string
	// Start starts the component once this node is elected; the Closer is
	// closed when the leadership ends (lost session, Close). Required.
	Start func() (io.Closer, error)
	// OnError reports a failed Start (it is retried after TTL/4).
	OnError func(error)
}

// Singleton campaigns in an etcd election for one role of a region and runs
// the component while it leads. Its one loop campaigns, starts, waits for the
// session to end, stops, and campaigns again.
//
// An election bounds how many copies run, it does not fence them: a leader
// cut off from etcd learns it lost the session only after its lease expired,
// when the next leader may already run. Components run this way must be safe
// when two copies overlap for a while (the shipper is: its peers apply
// idempotently and keep cursors; the barrier is: it settles pins by
// compare-and-swap).
type Singleton struct {
	cli     *clientv3.Client
	cfg     SingletonConfig
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Bool
	abandon atomic.Bool

	closeOnce sync.Once
}

// ElectionKey is the election prefix of a region's role.
func ElectionKey(c epoch.Config, region, role string) string {
	return c.Prefix + "singleton/" + region + "/" + role + "/"
}

// StartSingleton validates cfg and starts the loop.
func StartSingleton(cli *clientv3.Client, cfg SingletonConfig) (*Singleton, error) {
	if cli == nil || cfg.Start == nil {
		return nil, errors.New("epoch: StartSingleton needs a client and Start")
	}
	var err error
	if cfg.Config, err = cfg.Config.WithDefaults(); err != nil {
		return nil, err
	}
	if err := epoch.ValidRegion(cfg.Region); err != nil {
		return nil, err
	}
	if err := ValidNode(cfg.Node); err != nil {
		return nil, err
	}
	if err := ValidNode(cfg.Role); err != nil {
		return nil, fmt.Errorf("epoch: invalid singleton role %q", cfg.Role)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Singleton{cli: cli, cfg: cfg, cancel: cancel, done: make(chan struct{})}
	go s.loop(ctx)
	return s, nil
}

// Leading reports whether this node runs the component now.
func (s *Singleton) Leading() bool { return s.leading.Load() }

func (s *Singleton) loop(ctx context.Context) {
	defer close(s.done)
	backoff := s.cfg.TTL / 4
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.cli,
			concurrency.WithTTL(int(s.cfg.TTLSeconds())), concurrency.WithContext(context.Background()))
		if err != nil {
			sleepCtx(ctx, backoff)
			continue
		}
		el := concurrency.NewElection(sess, ElectionKey(s.cfg.Config, s.cfg.Region, s.cfg.Role))
		if err := el.Campaign(ctx, s.cfg.Node); err != nil {
			s.closeSession(sess, nil)
			sleepCtx(ctx, backoff)
			continue
		}
		var c io.Closer
		for ctx.Err() == nil {
			if c, err = s.cfg.Start(); err == nil {
				break
			}
			if s.cfg.OnError != nil {
				s.cfg.OnError(fmt.Errorf("epoch: start %s of %s: %w", s.cfg.Role, s.cfg.Region, err))
			}
			select {
			case <-sess.Done():
			default:
				sleepCtx(ctx, backoff)
				continue
			}
			break
		}
		if c != nil {
			s.leading.Store(true)
			select {
			case <-ctx.Done():
			case <-sess.Done():
			}
			s.leading.Store(false)
			_ = c.Close()
		}
		s.closeSession(sess, el)
	}
}

func (s *Singleton) closeSession(sess *concurrency.Session, el *concurrency.Election) {
	if s.abandon.Load() {
		sess.Orphan() // as in a crash: the next leader waits for the lease to expire
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TTL)
	defer cancel()
	if el != nil {
		_ = el.Resign(ctx)
	}
	_ = sess.Close()
}

// Abandon stops the component and the loop without resigning: the next
// leader is elected when this session's lease expires, as after a crash.
func (s *Singleton) Abandon() {
	s.abandon.Store(true)
	s.Close()
}

// Close stops the component if it runs, resigns, and waits. Idempotent.
func (s *Singleton) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
	})
}
