package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/likes-dev/likes/edge"
)

// Write health: a write whose attempts all ended in a Cassandra write
// failure or timeout (the outcome-unknown cases apply settles, unavailable,
// overloaded) opens a breaker: for BreakerCooldown later writes are refused at
// once with edge.ErrStorageUnavailable instead of each spending its whole
// timeout, then one write at a time is let through as a probe; the first that
// succeeds closes the breaker. Nothing refused was acknowledged; an
// outcome-unknown write that did land is replayed by the client's retry of its
// key, as before.

// breaker is the store's write health, guarded by its mutex.
type breaker struct {
	mu      sync.Mutex
	open    bool
	probing bool // a probe write is in flight
	until   time.Time
	since   time.Time
	lastErr error
	faults  uint64
}

// storageFailure reports whether err says Cassandra could not take a write
// (as opposed to a refusal of the request, or the caller's own deadline).
func storageFailure(err error) bool {
	return err != nil && retryable(err)
}

// admit refuses a write at once while the breaker is open, except one probe
// when its cooldown has passed. probe reports whether this write is the probe.
func (s *Store) admit() (probe bool, err error) {
	b := &s.health
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return false, nil
	}
	now := s.opts.Clock.Now()
	if b.probing || now.Before(b.until) {
		return false, fmt.Errorf("%w: cassandra refuses writes (since %s): %v", edge.ErrStorageUnavailable, b.since.Format(time.RFC3339), b.lastErr)
	}
	b.probing = true
	return true, nil
}

// observe records a write's outcome and wraps a storage failure with
// edge.ErrStorageUnavailable.
func (s *Store) observe(probe bool, err error) error {
	b := &s.health
	fail := storageFailure(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	now := s.opts.Clock.Now()
	switch {
	case fail:
		if !b.open {
			b.open, b.since = true, now
			b.faults++
			s.opts.Logger.Error("cassandra refuses writes; refusing writes fast", "keyspace", s.opts.Keyspace, "err", err)
		}
		b.lastErr, b.until = err, now.Add(s.opts.BreakerCooldown)
		return fmt.Errorf("%w: %w", edge.ErrStorageUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The caller gave up: says nothing about Cassandra.
	case err == nil || !errors.Is(err, edge.ErrStorageUnavailable):
		// A success, or an answer Cassandra gave: it takes writes.
		if b.open && (err == nil || probe) {
			b.open = false
			s.opts.Logger.Info("cassandra accepts writes again", "keyspace", s.opts.Keyspace, "refusedFor", now.Sub(b.since).String())
		}
	}
	return err
}

// Health reports whether writes are being refused, why, and how many times
// the breaker opened.
func (s *Store) Health() (writable bool, reason string, faults uint64) {
	b := &s.health
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		return false, fmt.Sprintf("cassandra refuses writes since %s: %v", b.since.Format(time.RFC3339), b.lastErr), b.faults
	}
	return true, "", b.faults
}
