package cassandra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
)

// TestBreaker: a write that failed on Cassandra write timeouts opens the
// breaker; later writes are refused at once with edge.ErrStorageUnavailable
// until the cooldown has passed; then one probe goes through at a time, and
// its success closes the breaker. The caller's own deadline and Cassandra's
// answers (a key conflict) say nothing about its health.
func TestBreaker(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s := &Store{opts: Options{Clock: clk, BreakerCooldown: time.Second, Logger: slog.New(slog.DiscardHandler), Keyspace: "k"}}
	timeout := fmt.Errorf("%w: apply: %w", ErrContention, &gocql.RequestErrWriteTimeout{})

	if err := s.observe(false, context.DeadlineExceeded); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if w, _, _ := s.Health(); !w {
		t.Fatal("the caller's deadline opened the breaker")
	}
	if err := s.observe(false, timeout); !errors.Is(err, edge.ErrStorageUnavailable) || !errors.Is(err, ErrContention) {
		t.Fatalf("a write timeout's error: %v", err)
	}
	if w, reason, faults := s.Health(); w || faults != 1 || reason == "" {
		t.Fatalf("health after a write timeout: %v %q %d", w, reason, faults)
	}
	if _, err := s.admit(); !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("a write inside the cooldown: %v", err)
	}
	clk.Advance(1100 * time.Millisecond)
	probe, err := s.admit()
	if err != nil || !probe {
		t.Fatalf("after the cooldown: probe=%v %v", probe, err)
	}
	if _, err := s.admit(); !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("a second write while the probe is in flight: %v", err)
	}
	// The probe fails: refused again for a cooldown.
	_ = s.observe(true, timeout)
	if _, err := s.admit(); !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("after a failed probe: %v", err)
	}
	clk.Advance(1100 * time.Millisecond)
	if probe, err = s.admit(); err != nil || !probe {
		t.Fatalf("second probe: %v %v", probe, err)
	}
	if err := s.observe(true, edge.ErrKeyConflict); !errors.Is(err, edge.ErrKeyConflict) {
		t.Fatal(err)
	}
	if w, _, faults := s.Health(); !w || faults != 1 {
		t.Fatalf("an answer from Cassandra did not close the breaker: %v %d", w, faults)
	}
	if probe, err := s.admit(); err != nil || probe {
		t.Fatalf("closed breaker: %v %v", probe, err)
	}
}
