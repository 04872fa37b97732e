package catchup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/replication"
)

// HeadsAsker asks a region for its own-log heads (replication's Heads RPC).
type HeadsAsker interface {
	Heads(ctx context.Context, peer replication.Peer, req replication.HeadsRequest) (replication.HeadsResponse, error)
}

// CursorReader reads what this region has applied from a peer.
type CursorReader interface {
	Cursor(ctx context.Context, from string) (replication.Cursor, error)
}

// PinTable is what the barrier reads of this region's view of the pins.
type PinTable interface {
	// CatchingUp lists the pins naming this region that are still catching up.
	CatchingUp() []epoch.Pin
	// Seen reports whether this region's view holds range rng at epoch ≥ ep.
	Seen(rng uint32, ep uint64) bool
}

// Directory is what the barrier reads and writes in the pin directory (etcd).
type Directory interface {
	// Regions lists the live regions (those whose lease exists).
	Regions(ctx context.Context) ([]epoch.RegionInfo, error)
	// Settle clears CatchUp of range rng if it is still at epoch ep; it
	// returns an error matching epoch.ErrEpochChanged if it moved on.
	Settle(ctx context.Context, rng uint32, ep uint64) (epoch.Pin, error)
}

// Config configures a Barrier.
type Config struct {
	Self       string
	Partitions int
	Pins       PinTable
	Dir        Directory
	Cursors    CursorReader
	Asker      HeadsAsker
	// Resolve finds a region's gRPC address (overrides, then gossip); the
	// address a region registered with its lease is the fallback.
	Resolve func(region string) (string, bool)
	Clock   clock.Clock
	Logger  *slog.Logger
	// CallTimeout bounds one call (default 2s).
	CallTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Self == "":
		return c, errors.New("catchup: Config.Self is required")
	case c.Partitions <= 0:
		return c, fmt.Errorf("catchup: Config.Partitions must be > 0, got %d", c.Partitions)
	case c.Pins == nil || c.Dir == nil || c.Cursors == nil || c.Asker == nil:
		return c, errors.New("catchup: Config.Pins, Dir, Cursors and Asker are required")
	}
	if c.Resolve == nil {
		c.Resolve = func(string) (string, bool) { return "", false }
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 2 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// round is one barrier pass over a fixed set of pins: the heads each live
// region answered, kept until this region's cursor reaches them.
type round struct {
	pins    []epoch.Pin
	refs    []replication.PinRef
	heads   map[string][]uint64
	started time.Time
	logged  time.Time
}

// Barrier settles this region's planned moves, one Step at a time. It is not
// safe for concurrent use.
type Barrier struct {
	cfg   Config
	round *round
}

// NewBarrier validates cfg.
func NewBarrier(cfg Config) (*Barrier, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Barrier{cfg: cfg}, nil
}

// Step advances the current round by one check (starting one over the pins
// catching up when there is none); it reports whether the round's pins were
// settled.
func (b *Barrier) Step(ctx context.Context) bool {
	now := b.cfg.Clock.Now()
	if b.round == nil {
		pins := b.cfg.Pins.CatchingUp()
		if len(pins) == 0 {
			return false
		}
		r := &round{pins: pins, heads: map[string][]uint64{}, started: now, logged: now}
		for _, p := range pins {
			r.refs = append(r.refs, replication.PinRef{Range: p.Range, Epoch: p.Epoch})
		}
		b.round = r
	}
	r := b.round
	waiting, err := b.check(ctx, r)
	if err == nil && len(waiting) == 0 {
		if err = b.settle(ctx, r); err == nil {
			b.cfg.Logger.Info("planned move caught up; writing the ranges now",
				"ranges", len(r.refs), "took", now.Sub(r.started).Round(time.Millisecond))
			b.round = nil
			return true
		}
	}
	if now.Sub(r.logged) >= 10*time.Second {
		r.logged = now
		b.cfg.Logger.Warn("planned move still catching up: its ranges refuse writes until every live region's log is applied here (likectl pins settle forces it)",
			"ranges", len(r.pins), "waiting for", waiting, "err", err, "for", now.Sub(r.started).Round(time.Second))
	}
	return false
}

// Waiting returns the regions the current round still waits for (nil when
// there is no round).
func (b *Barrier) Waiting(ctx context.Context) ([]string, error) {
	if b.round == nil {
		return nil, nil
	}
	return b.check(ctx, b.round)
}

// check asks every live region it has no heads from yet and compares the
// cursors; it returns the regions still waited for.
func (b *Barrier) check(ctx context.Context, r *round) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	live, err := b.cfg.Dir.Regions(rctx)
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
		if name != b.cfg.Self {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var waiting []string
	for _, name := range names {
		heads, ok := r.heads[name]
		if !ok {
			addr, found := b.cfg.Resolve(name)
			if !found {
				addr = fallback[name]
			}
			if addr == "" {
				waiting = append(waiting, name+" (no address: not live)")
				continue
			}
			hctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
			resp, err := b.cfg.Asker.Heads(hctx, replication.Peer{Region: name, GRPCAddr: addr},
				replication.HeadsRequest{From: b.cfg.Self, Partitions: b.cfg.Partitions, Pins: r.refs})
			cancel()
			if err != nil {
				waiting = append(waiting, name+" (heads: "+err.Error()+")")
				continue
			}
			heads = resp.Log
			r.heads[name] = heads
		}
		cur, err := b.cfg.Cursors.Cursor(ctx, name)
		if err != nil {
			return waiting, fmt.Errorf("cursor from %s: %w", name, err)
		}
		if !Reached(cur.Log, heads) {
			waiting = append(waiting, name+" (replicating)")
		}
	}
	return waiting, nil
}

func (b *Barrier) settle(ctx context.Context, r *round) error {
	for len(r.pins) > 0 {
		p := r.pins[0]
		sctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
		_, err := b.cfg.Dir.Settle(sctx, p.Range, p.Epoch)
		cancel()
		if err != nil && !errors.Is(err, epoch.ErrEpochChanged) {
			return fmt.Errorf("settle range %d: %w", p.Range, err)
		}
		r.pins = r.pins[1:]
	}
	return nil
}

// Reached reports cursor[p] >= heads[p] for every partition.
func Reached(cursor, heads []uint64) bool {
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
