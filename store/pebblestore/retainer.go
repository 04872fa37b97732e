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

// DefaultIdemPass bounds a pass of the idempotency sweep: expired records
// are gone within 12 h of their expiry, so the records on disk are at most
// 1.5 × a day's. At the seed's 5 B like events a day a region holds ~5 B
// records (its own and its peers'): a pass reads ~116 k records a second.
const DefaultIdemPass = 12 * time.Hour

// minRoundsPerInterval is the rounds an interval runs when there is more to
// do, whatever the sweep's budget.
const minRoundsPerInterval = 64

// RetainerConfig configures a Retainer.
type RetainerConfig struct {
	// Store is the database kept bounded. Required.
	Store *Store
	// Clock drives the rounds and is the rounds' Now (default: wall clock).
	Clock clock.Clock
	// Retention is the horizon (default DefaultRetention).
	Retention time.Duration
	// Interval is the time between rounds (default 1 minute); a round that
	// stopped at its scan bound is followed by another at once, for at least
	// 64 rounds and until the idempotency sweep's budget is spent (IdemPass).
	Interval time.Duration
	// Peers returns the cursors of the peers that hold truncation back (see
	// RetentionRound.Peers); nil: no peer holds anything.
	Peers func() []PeerCursor
	// KeepLog disables log and outbox truncation and dedupe pruning (the
	// aggregators read another log; see RetentionRound.Log).
	KeepLog bool
	// Scan bounds one round's keys per kind (default 4096).
	Scan int
	// IdemPass is how long one pass of the idempotency sweep over every
	// record may take (default DefaultIdemPass). Records then stay on disk at
	// most their 24 h expiry + IdemPass, so the sweep keeps up with any write
	// rate: each interval it scans at least the records × Interval ÷ IdemPass
	// (and never fewer than 64 rounds of Scan, nor more than one pass).
	IdemPass time.Duration
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
	if c.IdemPass == 0 {
		c.IdemPass = DefaultIdemPass
	}
	if c.Scan == 0 {
		c.Scan = 4096
	}
	if c.Retention < 0 || c.Interval < 0 || c.Scan < 0 || c.IdemPass < 0 {
		return c, fmt.Errorf("pebblestore: RetainerConfig: Retention (%v), Interval (%v), IdemPass (%v) and Scan (%d) must be positive",
			c.Retention, c.Interval, c.IdemPass, c.Scan)
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
		failing = r.Interval(ctx, failing)
	}
}

// Interval runs one interval's rounds: until nothing is left to do, or
// until at least minRoundsPerInterval rounds ran and the idempotency sweep
// scanned its budget (IdemBudget). It returns whether the last round failed (failing:
// whether the one before did, so a persistent failure is logged once). The
// loop calls it every Interval; a manual Retainer's owner may call it.
func (r *Retainer) Interval(ctx context.Context, failing bool) bool {
	var scanned uint64
	for i := 0; ctx.Err() == nil; i++ {
		st, err := r.Step(ctx)
		if err != nil {
			if !failing && ctx.Err() == nil {
				r.cfg.Logger.Warn("retention round failed; retrying next interval", "err", err)
			}
			return true
		}
		scanned += st.IdemScanned
		// The budget is read again after each round: in a first pass the
		// estimate grows as the sweep sees more of the records.
		if !st.More || (i+1 >= minRoundsPerInterval && scanned >= r.IdemBudget()) {
			return false
		}
	}
	return failing
}

// IdemBudget is how many idempotency records this interval's rounds scan at
// least: the store's estimate × Interval ÷ IdemPass, with 10 % to spare (the
// estimate is Pebble's size estimate in a first pass), at most one pass.
func (r *Retainer) IdemBudget() uint64 {
	n := r.cfg.Store.IdemEstimate()
	b := uint64(1.1 * float64(n) * float64(r.cfg.Interval) / float64(r.cfg.IdemPass))
	return min(b, uint64(n))
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
