package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"likes/clock"
	"likes/edge"
	"likes/epoch"
	"likes/replication"
)

// The planned-move barrier (DESIGN section 5). A planned move (likectl pins
// move/drain) stores the new pin with CatchUp set, and epoch.Decide refuses
// writes under it. The new owner's catchUp loop then asks every live region
// for its own-log heads (the Heads RPC; the asked region first confirms it has
// seen the new pin and waits for its in-flight writes, see fencer), waits
// until its replication cursor from each has reached those heads, and clears
// CatchUp in etcd (Directory.Settle). From then on every write the old owner
// (or any earlier owner) made to the range, with its idempotency records and
// erasure marks, is applied here before the new owner writes: no retry is
// applied twice across a drain and no branch correction arises.
//
// The old owner is always waited for, even after its lease has expired (the
// planned move promised its tail). Other regions are waited for while they
// are live: one whose lease has expired is dead, and its tail, if it ever
// returns, merges through corrections as after a failover. A region that
// cannot be reached keeps the range closed: the operator either heals the
// link or settles the pin by hand (likectl pins settle), accepting an
// unplanned move's window.

// headsAsker is the part of the replication transport the barrier uses.
type headsAsker interface {
	Heads(ctx context.Context, peer replication.Peer, req replication.HeadsRequest) (replication.HeadsResponse, error)
}

// cursorReader reads what this region has applied from a peer.
type cursorReader interface {
	Cursor(ctx context.Context, from string) (replication.Cursor, error)
}

// pinTable is what the barrier reads of the region's epoch.Authority.
type pinTable interface {
	CatchingUp() []epoch.Pin
	Seen(rng uint32, epoch uint64) bool
}

// pinDirectory is what the barrier reads and writes in etcd.
type pinDirectory interface {
	Regions(ctx context.Context) ([]epoch.RegionInfo, error)
	Settle(ctx context.Context, rng uint32, epoch uint64) (epoch.Pin, error)
}

var (
	_ headsAsker   = (*replication.GRPCTransport)(nil)
	_ pinTable     = (*epoch.Authority)(nil)
	_ pinDirectory = (*epoch.Directory)(nil)
)

// catchUpConfig configures the barrier loop.
type catchUpConfig struct {
	Self       string
	Partitions int
	Pins       pinTable
	Dir        pinDirectory
	Cursors    cursorReader
	Asker      headsAsker
	// Resolve finds a region's gRPC address (overrides, then gossip); the
	// address a region registered with its lease is the fallback.
	Resolve func(region string) (string, bool)
	Clock   clock.Clock
	Logger  *slog.Logger
	// Interval between checks (default 100ms); CallTimeout bounds one Heads
	// call (default 2s).
	Interval    time.Duration
	CallTimeout time.Duration
}

// catchUpRound is one barrier pass over a fixed set of pins: the heads each
// live region answered, kept until this region's cursor reaches them.
type catchUpRound struct {
	pins    []epoch.Pin
	refs    []replication.PinRef
	heads   map[string][]uint64
	started time.Time
	logged  time.Time
}

// catchUp owns one goroutine loop that settles this region's planned moves.
type catchUp struct {
	cfg    catchUpConfig
	round  *catchUpRound
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startCatchUp(cfg catchUpConfig) *catchUp {
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &catchUp{cfg: cfg, cancel: cancel, done: make(chan struct{})}
	go c.loop(ctx)
	return c
}

func (c *catchUp) loop(ctx context.Context) {
	defer close(c.done)
	tick := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			c.step(ctx)
		}
	}
}

// Close stops the loop and waits for it. Idempotent.
func (c *catchUp) Close() {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
}

// step advances the current round by one check; it returns whether the
// round's pins were settled (for tests).
func (c *catchUp) step(ctx context.Context) bool {
	now := c.cfg.Clock.Now()
	if c.round == nil {
		pins := c.cfg.Pins.CatchingUp()
		if len(pins) == 0 {
			return false
		}
		r := &catchUpRound{pins: pins, heads: map[string][]uint64{}, started: now, logged: now}
		for _, p := range pins {
			r.refs = append(r.refs, replication.PinRef{Range: p.Range, Epoch: p.Epoch})
		}
		c.round = r
	}
	r := c.round
	waiting, err := c.check(ctx, r)
	if err == nil && len(waiting) == 0 {
		if err = c.settle(ctx, r); err == nil {
			c.cfg.Logger.Info("planned move caught up; writing the ranges now",
				"ranges", len(r.pins), "took", now.Sub(r.started).Round(time.Millisecond))
			c.round = nil
			return true
		}
	}
	if now.Sub(r.logged) >= 10*time.Second {
		r.logged = now
		c.cfg.Logger.Warn("planned move still catching up: its ranges refuse writes until every live region's log is applied here (likectl pins settle forces it)",
			"ranges", len(r.pins), "waiting for", waiting, "err", err, "for", now.Sub(r.started).Round(time.Second))
	}
	return false
}

// check asks every live region it has no heads from yet and compares the
// cursors; it returns the regions still waited for.
func (c *catchUp) check(ctx context.Context, r *catchUpRound) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	live, err := c.cfg.Dir.Regions(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read live regions: %w", err)
	}
	// Wait for every live region, and for each pin's old owner even when its
	// lease has expired: the old owner's tail is exactly what a planned move
	// promises to deliver (a dead one blocks until it returns or an operator
	// settles the pin).
	fallback := map[string]string{} // region → the gRPC address it registered
	for _, ri := range live {
		fallback[ri.Name] = ri.GRPC
	}
	for _, p := range r.pins {
		if _, ok := fallback[p.From]; !ok && p.From != "" {
			fallback[p.From] = ""
		}
	}
	names := make([]string, 0, len(fallback))
	for name := range fallback {
		if name != c.cfg.Self {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var waiting []string
	for _, name := range names {
		ri := epoch.RegionInfo{Name: name, GRPC: fallback[name]}
		heads, ok := r.heads[ri.Name]
		if !ok {
			addr, found := c.cfg.Resolve(ri.Name)
			if !found {
				addr = ri.GRPC
			}
			if addr == "" {
				waiting = append(waiting, ri.Name+" (no address: not live)")
				continue
			}
			hctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
			resp, err := c.cfg.Asker.Heads(hctx, replication.Peer{Region: ri.Name, GRPCAddr: addr},
				replication.HeadsRequest{From: c.cfg.Self, Partitions: c.cfg.Partitions, Pins: r.refs})
			cancel()
			if err != nil {
				waiting = append(waiting, ri.Name+" (heads: "+err.Error()+")")
				continue
			}
			heads = resp.Log
			r.heads[ri.Name] = heads
		}
		cur, err := c.cfg.Cursors.Cursor(ctx, ri.Name)
		if err != nil {
			return waiting, fmt.Errorf("cursor from %s: %w", ri.Name, err)
		}
		if !reached(cur.Log, heads) {
			waiting = append(waiting, ri.Name+" (replicating)")
		}
	}
	return waiting, nil
}

func (c *catchUp) settle(ctx context.Context, r *catchUpRound) error {
	for len(r.pins) > 0 {
		p := r.pins[0]
		sctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		_, err := c.cfg.Dir.Settle(sctx, p.Range, p.Epoch)
		cancel()
		if err != nil && !errors.Is(err, epoch.ErrEpochChanged) {
			return fmt.Errorf("settle range %d: %w", p.Range, err)
		}
		r.pins = r.pins[1:]
	}
	return nil
}

// reached reports cursor[p] >= heads[p] for every partition.
func reached(cursor, heads []uint64) bool {
	for p, h := range heads {
		var c uint64
		if p < len(cursor) {
			c = cursor[p]
		}
		if c < h {
			return false
		}
	}
	return true
}

// fencer answers Heads for this region (replication.Fencer).
type fencer struct {
	pins    pinTable
	service func() *edge.Service // set once the service exists
	log     interface {
		Partitions() int
		Head(ctx context.Context, partition uint32) (uint64, error)
	}
}

var _ replication.Fencer = (*fencer)(nil)

func (f *fencer) Heads(ctx context.Context, pins []replication.PinRef) ([]uint64, error) {
	for _, p := range pins {
		if !f.pins.Seen(p.Range, p.Epoch) {
			return nil, fmt.Errorf("range %d epoch %d: %w", p.Range, p.Epoch, replication.ErrPinNotSeen)
		}
	}
	svc := f.service()
	if svc == nil {
		return nil, fmt.Errorf("region is starting: %w", replication.ErrPinNotSeen)
	}
	if err := svc.Quiesce(ctx); err != nil {
		return nil, err
	}
	heads := make([]uint64, f.log.Partitions())
	for p := range heads {
		h, err := f.log.Head(ctx, uint32(p))
		if err != nil {
			return nil, err
		}
		heads[p] = h
	}
	return heads, nil
}

// sourceHeads reads log heads through a replication.Source.
type sourceHeads struct{ src replication.Source }

func (s sourceHeads) Partitions() int { return s.src.Partitions() }

func (s sourceHeads) Head(ctx context.Context, p uint32) (uint64, error) {
	_, h, err := s.src.Read(ctx, p, math.MaxUint64, 0)
	return h.Pos, err
}
