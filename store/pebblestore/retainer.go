package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/store/retain"
)

// DefaultRetention is the log retention horizon (seed 000: 7 days).
const DefaultRetention = 7 * 24 * time.Hour

// DefaultIdemPass bounds a pass of the idempotency sweep: expired records
// are gone within 12 h of their expiry, so the records on disk are at most
// 1.5 × a day's. At the seed's 5 B like events a day a region holds ~5 B
// records (its own and its peers'): a pass reads ~116 k records a second.
const DefaultIdemPass = 12 * time.Hour

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
	// KeepLog disables log and outbox truncation and dedupe pruning
	// (RetentionRound.Log).
	KeepLog bool
	// Relayed, when set, gives every round RetentionRound.Relayed: the
	// aggregators read Kafka, so the log is truncated below what the relay
	// published there (kafkalog.Log.Relayed) and dedupe is kept.
	Relayed func(ctx context.Context) ([]uint64, error)
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

// Retainer owns the retention loop of one store (retain.Loop: one goroutine
// running rounds every Interval on the injected clock; Step, Interval, Stats,
// Close), with the idempotency sweep's budget. Close is idempotent.
type Retainer struct {
	*retain.Loop
	cfg RetainerConfig
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
func NewRetainer(cfg RetainerConfig) (*Retainer, error) { return newRetainer(cfg, false) }

// NewManualRetainer is a Retainer without its loop: Step runs a round (the
// simulation and tests step it). Close is a no-op.
func NewManualRetainer(cfg RetainerConfig) (*Retainer, error) { return newRetainer(cfg, true) }

func newRetainer(cfg RetainerConfig, manual bool) (*Retainer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Retainer{cfg: cfg}
	// An interval runs until nothing is left to do, or until at least
	// retain.MinRoundsPerInterval rounds ran and the idempotency sweep
	// scanned its budget (IdemBudget).
	var scanned uint64
	enough := func(i int, st RetentionStats) bool {
		if i == 0 {
			scanned = 0
		}
		scanned += st.IdemScanned
		// The budget is read again after each round: in a first pass the
		// estimate grows as the sweep sees more of the records.
		return i+1 >= retain.MinRoundsPerInterval && scanned >= r.IdemBudget()
	}
	r.Loop = retain.New(retain.Config{Retain: cfg.Store.Retain, Clock: cfg.Clock, Retention: cfg.Retention,
		Interval: cfg.Interval, Peers: cfg.Peers, KeepLog: cfg.KeepLog, Relayed: cfg.Relayed, Scan: cfg.Scan, Enough: enough, Logger: cfg.Logger}, manual)
	return r, nil
}

// IdemBudget is how many idempotency records this interval's rounds scan at
// least: the store's estimate × Interval ÷ IdemPass, with 10 % to spare (the
// estimate is Pebble's size estimate in a first pass), at most one pass.
func (r *Retainer) IdemBudget() uint64 {
	n := r.cfg.Store.IdemEstimate()
	b := uint64(1.1 * float64(n) * float64(r.cfg.Interval) / float64(r.cfg.IdemPass))
	return min(b, uint64(n))
}
