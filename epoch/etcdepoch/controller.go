package etcdepoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/likes-dev/likes/epoch"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/likes-dev/likes/clock"
)

// ControllerConfig configures automatic failover.
type ControllerConfig struct {
	epoch.Config
	// Name identifies this candidate in the election (required).
	Name string
	// Preference orders the regions: a dead region's ranges go to the next
	// live region after it in this list, wrapping around (a dead region not in
	// the list starts from the top). When no listed region is live, the first
	// live region by name is used.
	Preference []string
	// Grace is how long a region that owns ranges but was never seen alive by
	// this leader may stay absent before it is treated as dead (default 2·TTL).
	// A region whose key is seen to disappear is dead at once: its lease has
	// expired or was revoked.
	Grace time.Duration
	// Resync is the period of a full reconciliation besides watch events
	// (default TTL).
	Resync time.Duration
	// Clock stamps notBefore (default clock.Real). Scheduling is real time.
	Clock clock.Clock
	// Homes lists the regions in the order Directory.Init was given, which
	// makes each range's home (epoch.Home); default Preference.
	Homes []string
	// FailbackAfter is how long a range's home region (epoch.Home over Homes)
	// must have been live, and not draining, before the range moves back to
	// it as a planned move (default 30s; negative disables failback).
	FailbackAfter time.Duration
	// FailbackRate bounds failback moves per second over the cluster
	// (default 10), so a returning region takes its ranges back gradually.
	FailbackRate float64
}

// Controller runs automatic failover: it campaigns for leadership through an
// etcd election; the leader watches the region keys and moves each range of a
// dead region to the next live region (ControllerConfig.Preference), each by
// Directory.Move with notBefore = now + TTL + MaxSkew.
type Controller struct {
	cli    *clientv3.Client
	dir    *Directory
	cfg    ControllerConfig
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	leading   bool
	moves     int
	failbacks int

	closeOnce sync.Once
}

// StartController validates cfg and starts campaigning.
func StartController(cli *clientv3.Client, cfg ControllerConfig) (*Controller, error) {
	if cli == nil {
		return nil, errors.New("epoch: StartController needs a client")
	}
	var err error
	if cfg.Config, err = cfg.Config.WithDefaults(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		return nil, errors.New("epoch: ControllerConfig needs Name")
	}
	for _, r := range cfg.Preference {
		if err := epoch.ValidRegion(r); err != nil {
			return nil, err
		}
	}
	if cfg.Grace == 0 {
		cfg.Grace = 2 * cfg.TTL
	}
	if cfg.Resync == 0 {
		cfg.Resync = cfg.TTL
	}
	if cfg.Grace < 0 || cfg.Resync < 0 {
		return nil, errors.New("epoch: Grace and Resync must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if len(cfg.Homes) == 0 {
		cfg.Homes = cfg.Preference
	}
	if cfg.FailbackAfter == 0 {
		cfg.FailbackAfter = 30 * time.Second
	}
	if cfg.FailbackRate == 0 {
		cfg.FailbackRate = 10
	}
	if cfg.FailbackRate < 0 {
		return nil, fmt.Errorf("epoch: FailbackRate must be > 0, got %v", cfg.FailbackRate)
	}
	dir, err := NewDirectory(cli, cfg.Config)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{cli: cli, dir: dir, cfg: cfg, cancel: cancel, done: make(chan struct{})}
	go c.loop(ctx)
	return c, nil
}

// Leading reports whether this controller is the elected leader now.
func (c *Controller) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// Moves is how many ranges this controller has moved.
func (c *Controller) Moves() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.moves
}

// Failbacks is how many ranges this controller has moved back to their home.
func (c *Controller) Failbacks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failbacks
}

// Close stops campaigning or leading (resigning, so another candidate takes
// over at once) and waits for the loop. Idempotent.
func (c *Controller) Close() {
	c.closeOnce.Do(func() {
		c.cancel()
		<-c.done
	})
}

func (c *Controller) setLeading(v bool) {
	c.mu.Lock()
	c.leading = v
	c.mu.Unlock()
}

// sleep waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (c *Controller) loop(ctx context.Context) {
	defer close(c.done)
	backoff := c.cfg.TTL / 4
	for ctx.Err() == nil {
		// The session must outlive ctx so Close can still resign and revoke.
		sess, err := concurrency.NewSession(c.cli,
			concurrency.WithTTL(int(c.cfg.TTLSeconds())), concurrency.WithContext(context.Background()))
		if err != nil {
			sleepCtx(ctx, backoff)
			continue
		}
		el := concurrency.NewElection(sess, c.cfg.ElectionPrefix())
		if err := el.Campaign(ctx, c.cfg.Name); err != nil {
			c.closeSession(sess, nil)
			sleepCtx(ctx, backoff)
			continue
		}
		c.setLeading(true)
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done(): // lost the session lease: stop leading
				cancel()
			case <-lctx.Done():
			}
		}()
		c.lead(lctx)
		cancel()
		c.setLeading(false)
		c.closeSession(sess, el)
	}
}

func (c *Controller) closeSession(sess *concurrency.Session, el *concurrency.Election) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.TTL)
	defer cancel()
	if el != nil {
		_ = el.Resign(ctx)
	}
	_ = sess.Close()
}

// lead runs while this controller is the leader.
func (c *Controller) lead(ctx context.Context) {
	tick := time.NewTicker(c.cfg.Resync)
	defer tick.Stop()
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, c.cfg.RegionsPrefix(), clientv3.WithPrefix())
		if err != nil {
			sleepCtx(ctx, c.cfg.TTL/4)
			continue
		}
		live := map[string]bool{}
		fb := newFailback(c.cfg.FailbackRate, time.Now())
		for _, kv := range resp.Kvs {
			name := c.regionName(kv)
			live[name] = true
			fb.seen(name, kv.Value, time.Now())
		}
		// Regions never seen alive get Grace; disappearances count at once.
		absent := map[string]time.Time{}
		start := time.Now()
		c.reconcile(ctx, live, fb, absent, start)
		var fbTick <-chan time.Time
		if c.cfg.FailbackAfter > 0 {
			t := time.NewTicker(min(time.Second, c.cfg.FailbackAfter/2))
			defer t.Stop()
			fbTick = t.C
		}

		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := c.cli.Watch(wctx, c.cfg.RegionsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	watching:
		for {
			select {
			case <-ctx.Done():
				break watching
			case <-tick.C:
				c.reconcile(ctx, live, fb, absent, start)
			case <-fbTick:
				c.failBack(ctx, live, fb)
			case wr, ok := <-wch:
				if !ok || wr.Canceled || wr.Err() != nil {
					break watching
				}
				for _, ev := range wr.Events {
					name := c.regionName(ev.Kv)
					if ev.Type == mvccpb.DELETE {
						delete(live, name)
						absent[name] = time.Time{} // dead now
						fb.gone(name)
					} else {
						live[name] = true
						delete(absent, name)
						fb.seen(name, ev.Kv.Value, time.Now())
					}
				}
				c.reconcile(ctx, live, fb, absent, start)
			}
		}
		cancel()
	}
}

// regionName is the region of a lease key (delete events carry no value).
func (c *Controller) regionName(kv *mvccpb.KeyValue) string {
	return strings.TrimPrefix(string(kv.Key), c.cfg.RegionsPrefix())
}

// reconcile moves every range whose region is dead. absent maps a region to
// when it was first found missing (zero: seen to disappear, dead at once).
func (c *Controller) reconcile(ctx context.Context, live map[string]bool, fb *failback, absent map[string]time.Time, start time.Time) {
	pins, err := c.dir.Pins(ctx)
	if err != nil {
		return // next event or tick retries
	}
	// Only home and active regions take failovers (a joining one takes pins
	// only by planned moves; a draining or retired one takes none). A
	// registry that cannot be read or validated stops failover until it can:
	// a corrupt value is never read as "every region".
	states, err := c.dir.RegistryStates(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for _, p := range pins {
		if live[p.Region] {
			continue
		}
		since, known := absent[p.Region]
		if !known {
			since = start
			absent[p.Region] = since
		}
		if !since.IsZero() && now.Sub(since) < c.cfg.Grace {
			continue
		}
		// A draining region is alive (its ranges are not failed over) but
		// takes no new ones.
		targets := live
		if len(fb.draining) > 0 || states != nil {
			targets = map[string]bool{}
			for r, ok := range live {
				targets[r] = ok && !fb.draining[r] && (states == nil || states[r].Target())
			}
		}
		to := c.next(p.Region, targets)
		if to == "" {
			continue // nobody to take it; retried when a region appears
		}
		if _, err := c.dir.Move(ctx, p.Range, p.Epoch, to, c.cfg.NotBefore(c.cfg.Clock.Now())); err == nil {
			c.mu.Lock()
			c.moves++
			c.mu.Unlock()
		}
	}
}

// next is the live region after dead in the preference order.
func (c *Controller) next(dead string, live map[string]bool) string {
	pref := c.cfg.Preference
	at := -1
	for i, r := range pref {
		if r == dead {
			at = i
			break
		}
	}
	for i := 1; i <= len(pref); i++ {
		r := pref[(at+i+len(pref))%len(pref)]
		if r != dead && live[r] {
			return r
		}
	}
	var names []string
	for r, ok := range live {
		if ok && r != dead {
			names = append(names, r)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// failback is the leader's view for moving ranges home: since when each live
// region has been registered (continuously, under its current lease key),
// which are draining, and a token bucket of moves.
type failback struct {
	since    map[string]time.Time
	draining map[string]bool
	rate     float64
	tokens   float64
	last     time.Time
}

func newFailback(rate float64, now time.Time) *failback {
	return &failback{since: map[string]time.Time{}, draining: map[string]bool{}, rate: rate, last: now}
}

// seen records a region key's value (a PUT or the initial read).
func (f *failback) seen(name string, value []byte, now time.Time) {
	if _, ok := f.since[name]; !ok {
		f.since[name] = now
	}
	var ri epoch.RegionInfo
	f.draining[name] = json.Unmarshal(value, &ri) == nil && ri.Draining
}

func (f *failback) gone(name string) {
	delete(f.since, name)
	delete(f.draining, name)
}

// take spends one move from the bucket (refilled at rate per second, at
// most one second's worth banked).
func (f *failback) take(now time.Time) bool {
	f.tokens = min(max(1, f.rate), f.tokens+now.Sub(f.last).Seconds()*f.rate)
	f.last = now
	if f.tokens < 1 {
		return false
	}
	f.tokens--
	return true
}

// failBack moves ranges whose home region has been live and not draining
// for FailbackAfter back to it, as planned moves (the home catches up on the
// current owner's log before it writes), at most FailbackRate per second.
// A range whose owner is dead is left to reconcile (failover); one still
// catching up is left until it settles.
func (c *Controller) failBack(ctx context.Context, live map[string]bool, f *failback) {
	pins, err := c.dir.Pins(ctx)
	if err != nil {
		return // next tick retries
	}
	// The homes are the creation regions recorded in etcd (a region added
	// later may be configured with a longer list: it is home to nothing),
	// and a home that is draining or retired takes nothing back: the ranges
	// of a retired home stay where they are (epoch/doc.go).
	homes, err := c.dir.Homes(ctx)
	if err != nil {
		return
	}
	if len(homes) == 0 {
		homes = c.cfg.Homes // a cluster created before the homes were recorded
	}
	states, err := c.dir.RegistryStates(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for _, p := range pins {
		home := epoch.Home(p.Range, homes)
		if home == "" || home == p.Region || p.CatchUp || !live[p.Region] || !live[home] || f.draining[home] ||
			(states != nil && states[home] != epoch.StateHome) {
			continue
		}
		if since, ok := f.since[home]; !ok || now.Sub(since) < c.cfg.FailbackAfter {
			continue
		}
		if !f.take(now) {
			return
		}
		if _, err := c.dir.Move(ctx, p.Range, p.Epoch, home, c.cfg.NotBefore(c.cfg.Clock.Now()), Planned()); err == nil {
			c.mu.Lock()
			c.failbacks++
			c.mu.Unlock()
		}
	}
}
