package etcdepoch

import (
	"context"
	"errors"
	"fmt"
	"github.com/likes-dev/likes/epoch"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
)

// AuthorityConfig configures an Authority.
type AuthorityConfig struct {
	epoch.Config
	// Self is this region's name (required).
	Self string
	// Freshness is this region's lease proof, normally its *KeepAlive (required).
	Freshness Freshness
	// Clock is compared with notBefore and the proofs (default clock.Real).
	Clock clock.Clock
	// SyncInterval is how often the whole pin table is re-read linearizably
	// to confirm it is current (default TTL/4, at most (TTL − Margin)/2).
	SyncInterval time.Duration
}

// pinEntry is one range's last known state; modRev orders updates from the
// watch and from re-reads, deleted keeps a tombstone so an older read cannot
// resurrect a deleted pin.
type pinEntry struct {
	pin     epoch.Pin
	modRev  int64
	deleted bool
}

// Authority implements edge.Authority for one region from an in-memory pin
// table kept current by an etcd watch, plus periodic linearizable re-reads
// that prove the table current (the watch alone cannot prove it missed
// nothing). Authorize applies epoch.Decide with the older of the lease proof and
// the table proof.
type Authority struct {
	cli    *clientv3.Client
	cfg    AuthorityConfig
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.RWMutex
	table  []pinEntry
	synced time.Time // send time of the last successful full read
	// lostAt is when this Authority saw each range's pin leave its region
	// (zero: never since startedAt), for a Fencer of several nodes.
	lostAt    []time.Time
	startedAt time.Time
	syncedCh  chan struct{} // closed after the first successful full read

	closeOnce sync.Once
}

var _ edge.Authority = (*Authority)(nil)

// NewAuthority validates cfg and starts the watch loop. It returns at once;
// until the first read succeeds every Authorize fails closed (see WaitSynced).
func NewAuthority(cli *clientv3.Client, cfg AuthorityConfig) (*Authority, error) {
	if cli == nil {
		return nil, errors.New("epoch: NewAuthority needs a client")
	}
	var err error
	if cfg.Config, err = cfg.Config.WithDefaults(); err != nil {
		return nil, err
	}
	if err := epoch.ValidRegion(cfg.Self); err != nil {
		return nil, err
	}
	if cfg.Freshness == nil {
		return nil, errors.New("epoch: AuthorityConfig needs Freshness (the region's KeepAlive)")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.SyncInterval == 0 {
		cfg.SyncInterval = cfg.TTL / 4
	}
	if limit := (cfg.TTL - cfg.Margin) / 2; cfg.SyncInterval <= 0 || cfg.SyncInterval > limit {
		return nil, errors.New("epoch: SyncInterval must be in (0, (TTL-Margin)/2]")
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Authority{
		cli: cli, cfg: cfg, cancel: cancel, done: make(chan struct{}),
		table: make([]pinEntry, cfg.Ranges), syncedCh: make(chan struct{}),
		lostAt: make([]time.Time, cfg.Ranges), startedAt: cfg.Clock.Now(),
	}
	go a.loop(ctx)
	return a, nil
}

// Authorize implements edge.Authority: the epoch under which this region may
// write user's edges now, or *epoch.NotOwnerError / *epoch.FailClosedError.
func (a *Authority) Authorize(_ context.Context, user string) (uint64, error) {
	rng := edge.RangeOf(user, a.cfg.Ranges)
	a.mu.RLock()
	pin, synced := a.pinLocked(rng), a.synced
	a.mu.RUnlock()
	proof := a.cfg.Freshness.LastKeepalive()
	if synced.Before(proof) {
		proof = synced
	}
	return epoch.Decide(pin, a.cfg.Self, a.cfg.Clock.Now(), proof, a.cfg.TTL, a.cfg.Margin)
}

func (a *Authority) pinLocked(rng uint32) epoch.Pin {
	e := a.table[rng]
	if e.deleted || e.modRev == 0 {
		return epoch.Pin{Range: rng}
	}
	return e.pin
}

// Owner is the region pinned for user's range and its epoch, as last seen
// ("" and 0 when unknown): where to forward a write this region refuses.
func (a *Authority) Owner(user string) (region string, ep uint64) {
	rng := edge.RangeOf(user, a.cfg.Ranges)
	a.mu.RLock()
	defer a.mu.RUnlock()
	p := a.pinLocked(rng)
	return p.Region, p.Epoch
}

// Pins is a snapshot of the known pins, by range.
func (a *Authority) Pins() []epoch.Pin {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]epoch.Pin, 0, len(a.table))
	for i := range a.table {
		if p := a.pinLocked(uint32(i)); p.Region != "" {
			out = append(out, p)
		}
	}
	return out
}

// Self is the region this Authority decides for.
func (a *Authority) Self() string { return a.cfg.Self }

// CatchingUp lists the pins naming this region that wait for it to catch up
// after a planned move (epoch.Pin.CatchUp), by range.
func (a *Authority) CatchingUp() []epoch.Pin {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []epoch.Pin
	for i := range a.table {
		if p := a.pinLocked(uint32(i)); p.Region == a.cfg.Self && p.CatchUp {
			out = append(out, p)
		}
	}
	return out
}

// Seen reports whether this region's table holds range rng at epoch or later:
// once it does, Authorize refuses that range's writes under older epochs.
func (a *Authority) Seen(rng uint32, ep uint64) bool {
	if int(rng) >= len(a.table) {
		return false
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.pinLocked(rng).Epoch >= ep
}

// LastSelfWrite bounds when this node may have written range rng under its
// region's pin: the moment it saw the pin leave the region, or, if it never
// saw the region own rng, the moment it started (another node of the region
// may have written it before). A range still owned says now.
func (a *Authority) LastSelfWrite(rng uint32) time.Time {
	if int(rng) >= len(a.table) {
		return a.startedAt
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if p := a.pinLocked(rng); p.Region == a.cfg.Self {
		return a.cfg.Clock.Now()
	}
	if t := a.lostAt[rng]; !t.IsZero() {
		return t
	}
	return a.startedAt
}

// WaitSynced waits for the first full read of the pins.
func (a *Authority) WaitSynced(ctx context.Context) error {
	select {
	case <-a.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the loop and waits for it. Idempotent. Afterwards Authorize
// still answers, failing closed once the proofs age.
func (a *Authority) Close() {
	a.closeOnce.Do(func() {
		a.cancel()
		<-a.done
	})
}

// loop: full read, then watch from the read's revision; re-read every
// SyncInterval; on any watch failure, start over.
func (a *Authority) loop(ctx context.Context) {
	defer close(a.done)
	tick := time.NewTicker(a.cfg.SyncInterval)
	defer tick.Stop()
	for ctx.Err() == nil {
		rev, err := a.sync(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
			continue
		}
		a.watch(ctx, rev, tick.C)
	}
}

// watch applies events until the watch fails or ctx ends; on each tick it
// re-reads the table (a failed re-read leaves the proof to age).
func (a *Authority) watch(ctx context.Context, rev int64, tick <-chan time.Time) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := a.cli.Watch(wctx, a.cfg.PinsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if _, err := a.sync(ctx); err != nil {
				return // etcd trouble: restart the watch too
			}
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return
			}
			a.mu.Lock()
			for _, ev := range wr.Events {
				a.applyLocked(ev.Kv, ev.Type == mvccpb.DELETE)
			}
			a.mu.Unlock()
		}
	}
}

// sync reads every pin linearizably and merges them; on success the table is
// proven current as of the read's send time.
func (a *Authority) sync(ctx context.Context) (int64, error) {
	sent := a.cfg.Clock.Now()
	cctx, cancel := context.WithTimeout(ctx, a.cfg.SyncInterval)
	defer cancel()
	resp, err := a.cli.Get(cctx, a.cfg.PinsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make([]bool, len(a.table))
	for _, kv := range resp.Kvs {
		if rng, ok := a.applyLocked(kv, false); ok {
			seen[rng] = true
		}
	}
	// Absent at rev: deleted, unless the watch already saw a later write.
	for i := range a.table {
		if e := &a.table[i]; !seen[i] && e.modRev != 0 && e.modRev <= rev && !e.deleted {
			e.deleted, e.modRev = true, rev
		}
	}
	if sent.After(a.synced) {
		a.synced = sent
	}
	select {
	case <-a.syncedCh:
	default:
		close(a.syncedCh)
	}
	return rev, nil
}

// applyLocked merges one key version if it is newer than what the table has.
func (a *Authority) applyLocked(kv *mvccpb.KeyValue, deleted bool) (uint32, bool) {
	rng, ok := parsePinKey(a.cfg.Config, kv.Key)
	if !ok {
		return 0, false
	}
	e := &a.table[rng]
	if kv.ModRevision <= e.modRev {
		return rng, true
	}
	wasSelf := e.modRev != 0 && !e.deleted && e.pin.Region == a.cfg.Self
	defer func() {
		if wasSelf && (e.deleted || e.pin.Region != a.cfg.Self) {
			a.lostAt[rng] = a.cfg.Clock.Now()
		}
	}()
	if deleted {
		*e = pinEntry{modRev: kv.ModRevision, deleted: true}
		return rng, true
	}
	p, err := decodePin(rng, kv.Value)
	if err != nil {
		// A corrupt pin fails closed: treat it as absent.
		*e = pinEntry{modRev: kv.ModRevision, deleted: true}
		return rng, true
	}
	*e = pinEntry{pin: p, modRev: kv.ModRevision}
	return rng, true
}

var _ edge.Deadliner = (*Authority)(nil)

// ValidUntil implements edge.Deadliner: the end of the current lease proof
// (the last keepalive or pin read etcd confirmed, plus ttl − margin), after
// which Authorize fails closed and a store commits nothing it granted.
func (a *Authority) ValidUntil() time.Time {
	a.mu.RLock()
	synced := a.synced
	a.mu.RUnlock()
	proof := a.cfg.Freshness.LastKeepalive()
	if synced.Before(proof) {
		proof = synced
	}
	if proof.IsZero() {
		return time.Time{}
	}
	return proof.Add(a.cfg.TTL - a.cfg.Margin)
}

// ErrNoLeaseProof is wrapped by LeaseProof's errors: the region cannot prove
// its lease (or that its pin table is current) and so writes nothing.
var ErrNoLeaseProof = errors.New("epoch: no fresh lease proof")

// LeaseProof reports whether this region can prove, now, both its lease and
// that its pin table is current: the freshness rule Authorize applies to
// every write (epoch.Decide), independent of any pin. A region that has lost etcd
// (unreachable, or its credentials revoked) fails it within ttl − margin.
func (a *Authority) LeaseProof() error {
	a.mu.RLock()
	synced := a.synced
	a.mu.RUnlock()
	proof := a.cfg.Freshness.LastKeepalive()
	if synced.Before(proof) {
		proof = synced
	}
	limit := a.cfg.TTL - a.cfg.Margin
	switch age := a.cfg.Clock.Now().Sub(proof); {
	case proof.IsZero():
		return fmt.Errorf("%w: no lease keepalive or pin read yet", ErrNoLeaseProof)
	case age >= limit:
		return fmt.Errorf("%w: the last lease keepalive or pin read etcd confirmed is %v old (limit %v)", ErrNoLeaseProof, age.Round(time.Millisecond), limit)
	}
	return nil
}
