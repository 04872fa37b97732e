package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
)

// DefaultRetention is the log retention horizon (seed 000: 7 days).
const DefaultRetention = 7 * 24 * time.Hour

// RetainerConfig configures a Retainer.
type RetainerConfig struct {
	// Store is the database kept bounded. Required.
	Store *Store
	// Clock drives the rounds and is the rounds' Now (default: wall clock).
	Clock clock.Clock
	// Retention is the horizon (default DefaultRetention).
	Retention time.Duration
	// Interval is the time between rounds (default 1 minute); a round that
	// stopped at its scan bound is followed by another at once (at most 64 in
	// a row).
	Interval time.Duration
	// Peers returns the cursors of the peers that hold truncation back (see
	// RetentionRound.Peers); nil: no peer holds anything.
	Peers func() []PeerCursor
	// KeepLog disables log and outbox truncation and dedupe pruning (the
	// aggregators read another log; see RetentionRound.Log).
	KeepLog bool
	// Scan bounds one round's keys per kind (default 4096).
	Scan int
	// Logger receives failed rounds (default: slog.Default()).
	Logger *slog.Logger
}

// Retainer owns the retention loop of one store: one goroutine running a
// Retain round every Interval on the injected clock. Close stops it and
// waits; it is idempotent.
type Retainer struct {
	cfg    RetainerConfig
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu sync.Mutex
	st RetentionStats
}

func (c RetainerConfig) withDefaults() (RetainerConfig, error) {
	if c.Store == nil {
		return c, errors.New("pebblestore: RetainerConfig.Store is required")
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.Retention < 0 || c.Interval < 0 || c.Scan < 0 {
		return c, fmt.Errorf("pebblestore: RetainerConfig: Retention (%v), Interval (%v) and Scan (%d) must be positive",
			c.Retention, c.Interval, c.Scan)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// NewRetainer validates cfg and starts the loop (its first round is one
// Interval away).
func NewRetainer(cfg RetainerConfig) (*Retainer, error) {
	r, err := newRetainer(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
	return r, nil
}

// NewManualRetainer is a Retainer without its loop: Step runs a round (the
// simulation and tests step it). Close is a no-op.
func NewManualRetainer(cfg RetainerConfig) (*Retainer, error) {
	r, err := newRetainer(cfg)
	if err != nil {
		return nil, err
	}
	close(r.done)
	return r, nil
}

func newRetainer(cfg RetainerConfig) (*Retainer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Retainer{cfg: cfg, cancel: func() {}, done: make(chan struct{})}, nil
}

func (r *Retainer) run(ctx context.Context) {
	defer close(r.done)
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		for i := 0; i < 64 && ctx.Err() == nil; i++ {
			st, err := r.Step(ctx)
			if err != nil {
				if !failing && ctx.Err() == nil {
					r.cfg.Logger.Warn("retention round failed; retrying next interval", "err", err)
				}
				failing = true
				break
			}
			failing = false
			if !st.More {
				break
			}
		}
	}
}

// Step runs one round now and returns what it did. Not safe for concurrent
// use with itself (the loop is its caller, or a test when manual).
func (r *Retainer) Step(ctx context.Context) (RetentionStats, error) {
	in := RetentionRound{Now: r.cfg.Clock.Now(), Horizon: r.cfg.Retention, Log: !r.cfg.KeepLog, Scan: r.cfg.Scan}
	if r.cfg.Peers != nil {
		in.Peers = r.cfg.Peers()
	}
	st, err := r.cfg.Store.Retain(ctx, in)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.add(st)
	r.st.LastRound = in.Now
	if err != nil {
		r.st.Failures++
		r.st.LastError = err.Error()
	}
	return st, err
}

// Stats returns what the rounds did so far.
func (r *Retainer) Stats() RetentionStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.LogFloors = append([]uint64(nil), st.LogFloors...)
	return st
}

// Retention is the configured horizon.
func (r *Retainer) Retention() time.Duration { return r.cfg.Retention }

// Close stops the loop and waits for it. Idempotent.
func (r *Retainer) Close() error {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
	return nil
}
