package cassandra

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
)

// erasingEvents counts the user's KindErasing events in the log.
func erasingEvents(t *testing.T, s *Store, user string) int {
	t.Helper()
	n := 0
	for _, ev := range logOf(t, s) {
		if ev.Kind == edge.KindErasing && ev.User == user {
			n++
		}
	}
	return n
}

// TestErasureStartAnnouncedAfterCrash: a start that failed after its row
// (the marker: the user's writes are refused) but before its log event is
// announced by the next PutErasure of the job, once.
func TestErasureStartAnnouncedAfterCrash(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	ctx := context.Background()
	job := edge.ErasureJob{User: "u1", State: edge.ErasureRunning, StartedAt: t0}
	crashOnce(s, "erasure-row-written")
	if err := s.PutErasure(ctx, job); !errors.Is(err, errCrash) {
		t.Fatalf("PutErasure: %v, want the simulated crash", err)
	}
	if _, had, err := s.Erasure(ctx, "u1"); err != nil || !had {
		t.Fatalf("after the crash: job stored %v, %v; want the row (the marker)", had, err)
	}
	if n := erasingEvents(t, s, "u1"); n != 0 {
		t.Fatalf("%d erasing events before the retry, want 0", n)
	}
	if err := s.PutErasure(ctx, job); err != nil {
		t.Fatal(err)
	}
	job.Cursor = "x" // the eraser saving its progress
	if err := s.PutErasure(ctx, job); err != nil {
		t.Fatal(err)
	}
	if n := erasingEvents(t, s, "u1"); n != 1 {
		t.Fatalf("%d erasing events after the retry and a progress save, want 1", n)
	}
}

// TestSnapshotHoldsEveryStartItsHeadsCover: a snapshot opened right after an
// erasure start's event was appended (its heads cover the event, so the
// receiver will not get it from the log) has the user's mark: the row was
// written before the event.
func TestSnapshotHoldsEveryStartItsHeadsCover(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	ctx := context.Background()
	var found, covered bool
	var hookErr error
	s.SetTestHook(func(stage string) error {
		if stage != "erasure-announced" {
			return nil
		}
		rd, err := s.OpenSnapshot(ctx)
		if err != nil {
			hookErr = err
			return nil
		}
		defer rd.Close()
		head, _, err := s.HeadOf(ctx, 0)
		if err != nil {
			hookErr = err
			return nil
		}
		covered = rd.Mark().Log[0] >= head
		for {
			c, more, err := rd.Next(ctx, 100)
			if err != nil {
				hookErr = err
				return nil
			}
			for _, x := range c.Erasures {
				found = found || x.User == "u1"
			}
			if !more {
				return nil
			}
		}
	})
	if err := s.PutErasure(ctx, edge.ErasureJob{User: "u1", State: edge.ErasureRunning, StartedAt: t0}); err != nil {
		t.Fatal(err)
	}
	s.SetTestHook(nil)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !covered {
		t.Fatal("the snapshot's heads do not cover the start's event: the test proves nothing")
	}
	if !found {
		t.Fatal("a snapshot whose heads cover an erasure start lacks the user's mark")
	}
}
