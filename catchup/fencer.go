package catchup

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/likes-dev/likes/clock"

	"github.com/likes-dev/likes/replication"
)

// Quiescer waits for the writes in flight (edge.Service.Quiesce).
type Quiescer interface {
	Quiesce(ctx context.Context) error
}

// Pending finishes the store's decided writes whose events have not reached
// its log yet (cassandra.Store.FinishPending); the embedded store has none.
type Pending interface {
	FinishPending(ctx context.Context) error
}

// HeadReader reads this region's own-log heads.
type HeadReader interface {
	Partitions() int
	Head(ctx context.Context, partition uint32) (uint64, error)
}

// Fencer answers Heads for this region (replication.Fencer): only once this
// region has seen every asked pin (so it writes none of those ranges under an
// older epoch any more) and its writes in flight have reached the log.
type Fencer struct {
	Pins interface {
		Seen(rng uint32, ep uint64) bool
	}
	// Writes returns the region's write path, or nil while it is starting.
	Writes func() Quiescer
	Log    HeadReader
	// Pending, if set, runs after the writes in flight are waited for and
	// before the heads are read.
	Pending Pending
	// Settle, when positive, is how long after the region's pin of a range
	// left it the region's other nodes may still commit under the older
	// epoch (a region of several nodes: Quiesce sees only this node's
	// writes). Heads answers "not yet" until Settle has passed since
	// Pins.LastSelfWrite of every asked range. Why that is enough: a node
	// authorizes only with a pin table proven current within TTL − Margin
	// (epoch.Decide), and a commit on the shared store is refused past that
	// proof (edge.Request.Deadline); so TTL + MaxSkew + one store request
	// after the pin changed, no node commits under the older epoch any more,
	// and Pending relays what committed. A range this node saw another
	// region own since it started needs no wait.
	Settle time.Duration
	// SelfWrites bounds, per range, when this node may last have written it
	// under its region's pin (etcdepoch.Authority.LastSelfWrite); required
	// with Settle.
	SelfWrites interface {
		LastSelfWrite(rng uint32) time.Time
	}
	// Clock times Settle (default clock.Real).
	Clock clock.Clock
}

var _ replication.Fencer = (*Fencer)(nil)

// Heads implements replication.Fencer.
func (f *Fencer) Heads(ctx context.Context, pins []replication.PinRef) ([]uint64, error) {
	for _, p := range pins {
		if !f.Pins.Seen(p.Range, p.Epoch) {
			return nil, fmt.Errorf("range %d epoch %d: %w", p.Range, p.Epoch, replication.ErrPinNotSeen)
		}
	}
	if err := f.settled(pins); err != nil {
		return nil, err
	}
	w := f.Writes()
	if w == nil {
		return nil, fmt.Errorf("region is starting: %w", replication.ErrPinNotSeen)
	}
	if err := w.Quiesce(ctx); err != nil {
		return nil, err
	}
	if f.Pending != nil {
		if err := f.Pending.FinishPending(ctx); err != nil {
			return nil, fmt.Errorf("finish pending writes: %w", err)
		}
	}
	heads := make([]uint64, f.Log.Partitions())
	for p := range heads {
		h, err := f.Log.Head(ctx, uint32(p))
		if err != nil {
			return nil, err
		}
		heads[p] = h
	}
	return heads, nil
}

// settled says "not yet" until Settle has passed since this region may
// last have written any asked range.
func (f *Fencer) settled(pins []replication.PinRef) error {
	if f.Settle <= 0 {
		return nil
	}
	if f.SelfWrites == nil {
		return fmt.Errorf("catchup: a Fencer with Settle needs SelfWrites: %w", replication.ErrPinNotSeen)
	}
	clk := f.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	now := clk.Now()
	var wait time.Duration
	for _, p := range pins {
		wait = max(wait, f.Settle-now.Sub(f.SelfWrites.LastSelfWrite(p.Range)))
	}
	if wait > 0 {
		return fmt.Errorf("the region's other nodes may write under older epochs for %v more: %w", wait, replication.ErrPinNotSeen)
	}
	return nil
}

// SourceHeads reads log heads through a replication.Source.
func SourceHeads(src replication.Source) HeadReader { return sourceHeads{src} }

type sourceHeads struct{ src replication.Source }

func (s sourceHeads) Partitions() int { return s.src.Partitions() }

func (s sourceHeads) Head(ctx context.Context, p uint32) (uint64, error) {
	_, h, err := s.src.Read(ctx, p, math.MaxUint64, 0)
	return h.Pos, err
}
