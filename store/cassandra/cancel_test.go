package cassandra

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
)

// TestCancelledCallerStillRelays (found by chaos --engines, seed 12): a
// caller that gives up right after the edge transaction (the client hung
// up, the load stopped) must not leave the event outside the log: it was
// left to the sweeper, which relayed it a minute later, after the user's
// range had moved, so the new owner's catch-up barrier had not waited for
// it and the old owner wrote under a stale epoch.
func TestCancelledCallerStillRelays(t *testing.T) {
	s := openTest(t, FreshKeyspace(t), 2, clock.NewFake(time.UnixMilli(t0)))
	ctx, cancel := context.WithCancel(context.Background())
	s.SetTestHook(func(stage string) error {
		if stage == "edge-written" {
			cancel() // the caller is gone between the edge transaction and the relay
		}
		return nil
	})
	d, err := s.Apply(ctx, edgetest.Like("a", "u1", "k1", 1, t0))
	if err != nil || d.Action != edge.ActWrite {
		t.Fatalf("Apply with the caller gone mid-write: %+v, %v; want the write finished", d.Action, err)
	}
	if evs := eventsOf(logOf(t, s), "a", "u1"); len(evs) != 1 || evs[0].Delta != 1 {
		t.Fatalf("log after the write: %+v, want its event", evs)
	}
}

// TestFinishPendingRelaysYoungIntents: FinishPending (the Fencer's step
// before it reads the heads) relays an event whose writer failed after the
// edge transaction, however young its intent, so the heads a barrier waits
// for include it.
func TestFinishPendingRelaysYoungIntents(t *testing.T) {
	s := openTest(t, FreshKeyspace(t), 2, clock.NewFake(time.UnixMilli(t0)))
	crashAfterEdge(t, s, edgetest.Like("a", "u1", "k1", 1, t0))
	if evs := eventsOf(logOf(t, s), "a", "u1"); len(evs) != 0 {
		t.Fatalf("log holds %+v before the relay", evs)
	}
	if err := s.FinishPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	if evs := eventsOf(logOf(t, s), "a", "u1"); len(evs) != 1 {
		t.Fatalf("log after FinishPending: %+v, want the event", evs)
	}
}

// TestNoCommitPastTheDeadline (found by chaos --engines, seed 12): a write
// whose lease proof ended before its edge transaction (slow Cassandra,
// contention retries) commits nothing and fails closed, instead of landing
// seconds after its range failed over.
func TestNoCommitPastTheDeadline(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, FreshKeyspace(t), 2, clk)
	req := edgetest.Like("a", "u1", "k1", 1, t0)
	req.Deadline = t0 // the proof ends as the write starts
	if _, err := s.Apply(context.Background(), req); !errors.Is(err, edge.ErrFailClosed) {
		t.Fatalf("Apply past its deadline: %v, want ErrFailClosed", err)
	}
	if _, ok, _ := s.Edge(context.Background(), "a", "u1"); ok {
		t.Fatal("an edge was written past the deadline")
	}
	if evs := eventsOf(logOf(t, s), "a", "u1"); len(evs) != 0 {
		t.Fatalf("log holds %+v", evs)
	}
	req.Deadline = t0 + 1000 // in time: written
	if d, err := s.Apply(context.Background(), req); err != nil || d.Action != edge.ActWrite {
		t.Fatalf("Apply in time: %+v %v", d.Action, err)
	}
}

// TestOpenRelaysWhatACrashLeft: a store opened after a process died
// between an edge transaction and its relay relays the event at once, not
// a SweepAge later.
func TestOpenRelaysWhatACrashLeft(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	crashAfterEdge(t, openTest(t, ks, 2, clk), edgetest.Like("a", "u1", "k1", 1, t0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s2, err := Open(ctx, Options{Session: SharedSession(t), Keyspace: ks, Region: "r1", Partitions: 2, Clock: clk, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if evs := eventsOf(logOf(t, s2), "a", "u1"); len(evs) != 1 {
		t.Fatalf("log after reopening: %+v, want the crashed write's event", evs)
	}
}
