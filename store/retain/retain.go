// Package retain is what the stores' retention shares (issue 14): the input
// of a round (Round), what rounds did (Stats), and the loop that runs rounds
// on the injected clock (Loop), under each store's Retainer
// (store/pebblestore, store/cassandra). The rule itself and its argument are
// the stores' (pebblestore.Retain, cassandra.Retain; pipeline's package doc).
package retain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/replica"
)

// Round is the input of one retention round.
type Round struct {
	// Now is the round's time (the Retainer's clock).
	Now time.Time
	// Horizon is the retention: log events, cell outbox entries and dedupe
	// entries younger than it are always kept. Must be > 0.
	Horizon time.Duration
	// Peers are the cursors of the peers that hold truncation back: those that
	// acknowledged within the horizon. A peer left out (down for longer, or not
	// heard from since this process started) no longer holds anything: if its
	// cursor falls below the truncation point it catches up from a snapshot.
	Peers []replica.PeerCursor
	// Log enables log and outbox truncation and dedupe pruning (off when the
	// aggregators read another log, e.g. Kafka, whose positions are not this
	// log's). Idempotency records expire either way.
	Log bool
	// Relayed, when not nil, says the aggregators read another log (Kafka)
	// that a relay fills from this one: per partition, the source position
	// that log holds a copy through (kafkalog.Log.Relayed; a partition past
	// its end holds nothing). The log is then truncated below it instead of
	// below the aggregators' positions, which are the other log's offsets.
	// Dedupe state is not pruned then: a zombie relay's duplicate may reach
	// the aggregators any time later (see pipeline's package doc), and
	// dedupe holds one entry per edge, not per event.
	Relayed []uint64
	// Scan bounds the keys one round looks at per kind (default 4096): a round
	// never holds the writer long, and a backlog is worked off over rounds.
	Scan int
}

// LogBound is the position partition p's own consumer is done with: the
// relayed position when the aggregators read another log, else agg (the
// aggregator's committed position).
func (r Round) LogBound(p int, agg uint64) uint64 {
	if r.Relayed == nil {
		return agg
	}
	if p < len(r.Relayed) {
		return r.Relayed[p]
	}
	return 0
}

// PruneDedupe says whether dedupe state may be pruned this round.
func (r Round) PruneDedupe() bool { return r.Log && r.Relayed == nil }

// Stats is what rounds did (cumulative in a Loop).
type Stats struct {
	Rounds        uint64
	LogDeleted    uint64 // log events deleted
	OutboxDeleted uint64 // cell outbox (Cassandra: cell-change feed) entries deleted
	DedupeDeleted uint64 // dedupe entries pruned
	IdemDeleted   uint64 // expired idempotency records deleted (Cassandra: by TTL, none here)
	IdemScanned   uint64 // idempotency records looked at
	More          bool   // the last round stopped at its Scan bound somewhere
	LastRound     time.Time
	LastError     string
	Failures      uint64
	LogFloors     []uint64 // truncation point per partition after the last round
	OutboxFloor   uint64
}

func (a *Stats) add(b Stats) {
	a.Rounds++
	a.LogDeleted += b.LogDeleted
	a.OutboxDeleted += b.OutboxDeleted
	a.DedupeDeleted += b.DedupeDeleted
	a.IdemDeleted += b.IdemDeleted
	a.IdemScanned += b.IdemScanned
	a.More = b.More
	a.LogFloors = b.LogFloors
	a.OutboxFloor = b.OutboxFloor
}

// MinRoundsPerInterval is the rounds an interval runs when there is more to
// do (the idempotency sweep's budget may ask for more).
const MinRoundsPerInterval = 64

// Config configures a Loop.
type Config struct {
	// Retain is the store's round. Required.
	Retain func(ctx context.Context, in Round) (Stats, error)
	// Clock drives the rounds and is the rounds' Now (default: wall clock).
	Clock clock.Clock
	// Retention is the horizon (> 0).
	Retention time.Duration
	// Interval is the time between intervals of rounds (> 0).
	Interval time.Duration
	// Peers returns the cursors of the peers that hold truncation back (see
	// Round.Peers); nil: no peer holds anything.
	Peers func() []replica.PeerCursor
	// KeepLog disables log and outbox truncation and dedupe pruning (Round.Log).
	KeepLog bool
	// Relayed, when set, is asked at every round for Round.Relayed (the
	// aggregators read Kafka); an error fails the round, which truncates
	// nothing and is retried next interval.
	Relayed func(ctx context.Context) ([]uint64, error)
	// Scan bounds one round's keys per kind.
	Scan int
	// Enough, when set, is asked after round i (from 0) of an interval that
	// left more to do whether the interval may stop; default: after
	// MinRoundsPerInterval rounds.
	Enough func(i int, st Stats) bool
	// Logger receives failed rounds (default: slog.Default()).
	Logger *slog.Logger
}

// Loop owns the retention loop of one store: one goroutine running an
// interval of rounds every Interval on the injected clock. Close stops it
// and waits; it is idempotent.
type Loop struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu sync.Mutex
	st Stats
}

// New returns a Loop for cfg (whose fields the store's Retainer validated);
// manual: no goroutine, its owner calls Step or Interval (tests, the
// simulation), otherwise the first interval is one Interval away.
func New(cfg Config, manual bool) *Loop {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Enough == nil {
		cfg.Enough = func(i int, _ Stats) bool { return i+1 >= MinRoundsPerInterval }
	}
	l := &Loop{cfg: cfg, cancel: func() {}, done: make(chan struct{})}
	if manual {
		close(l.done)
		return l
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx)
	return l
}

func (l *Loop) run(ctx context.Context) {
	defer close(l.done)
	t := l.cfg.Clock.NewTicker(l.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		failing = l.Interval(ctx, failing)
	}
}

// Interval runs one interval's rounds: until nothing is left to do, or until
// Enough says so. It returns whether the last round failed (failing: whether
// the one before did, so a persistent failure is logged once).
func (l *Loop) Interval(ctx context.Context, failing bool) bool {
	for i := 0; ctx.Err() == nil; i++ {
		st, err := l.Step(ctx)
		if err != nil {
			if !failing && ctx.Err() == nil {
				l.cfg.Logger.Warn("retention round failed; retrying next interval", "err", err)
			}
			return true
		}
		if !st.More || l.cfg.Enough(i, st) {
			return false
		}
	}
	return failing
}

// Step runs one round now and returns what it did. Not safe for concurrent
// use with itself (the loop is its caller, or a test when manual).
func (l *Loop) Step(ctx context.Context) (Stats, error) {
	in := Round{Now: l.cfg.Clock.Now(), Horizon: l.cfg.Retention, Log: !l.cfg.KeepLog, Scan: l.cfg.Scan}
	if l.cfg.Peers != nil {
		in.Peers = l.cfg.Peers()
	}
	var rerr error
	if in.Log && l.cfg.Relayed != nil {
		if in.Relayed, rerr = l.cfg.Relayed(ctx); rerr != nil {
			// Unknown bound: keep the log this round, expire the rest.
			in.Log, in.Relayed = false, nil
			rerr = fmt.Errorf("retain: the relayed positions (the log is kept this round): %w", rerr)
		} else if in.Relayed == nil {
			in.Relayed = []uint64{}
		}
	}
	st, err := l.cfg.Retain(ctx, in)
	err = errors.Join(rerr, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.add(st)
	l.st.LastRound = in.Now
	if err != nil {
		l.st.Failures++
		l.st.LastError = err.Error()
	}
	return st, err
}

// Stats returns what the rounds did so far.
func (l *Loop) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	st.LogFloors = append([]uint64(nil), st.LogFloors...)
	return st
}

// Retention is the configured horizon.
func (l *Loop) Retention() time.Duration { return l.cfg.Retention }

// Close stops the loop and waits for it. Idempotent.
func (l *Loop) Close() error {
	l.once.Do(func() {
		l.cancel()
		<-l.done
	})
	return nil
}
