// Package cachetest is the contract suite of the caching roles, written once
// and run against every implementation: the in-process defaults (inproc) and
// Redis (cache/rediscache). RunCache covers counts.Cache, RunOverlay
// edge.Overlay and RunLimiter api.Limiter.
//
// Time: an implementation that takes a clock.Clock is driven by a fake clock
// (FakeClock), and the suite checks its TTL boundaries exactly. A backend that
// keeps its own time (Redis expires keys by its clock) is driven by
// RealClock: Advance sleeps, every "still there" assertion is made only when
// the real time elapsed allows it, and every "gone" assertion polls with a
// deadline of the TTL plus Slack. The limiter suite always uses a fake clock:
// every implementation must accept one.
//
// Each factory call must return an instance that shares no state with the
// others (a fresh key prefix for a shared server).
package cachetest

import (
	"context"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
)

// Clock drives time for a suite.
type Clock interface {
	// Now is the implementation's current time as the suite should see it.
	Now() time.Time
	// Advance lets d pass for the implementation.
	Advance(d time.Duration)
	// Slack is how long past its TTL an entry may still be seen (0 for a fake
	// clock).
	Slack() time.Duration
}

// FakeClock adapts a clock.Fake: exact time, Slack 0.
func FakeClock(f *clock.Fake) Clock { return fakeClock{f} }

type fakeClock struct{ f *clock.Fake }

func (c fakeClock) Now() time.Time          { return c.f.Now() }
func (c fakeClock) Advance(d time.Duration) { c.f.Advance(d) }
func (c fakeClock) Slack() time.Duration    { return 0 }

// RealClock is the wall clock for backends that keep their own time: Advance
// sleeps, and entries may linger up to 250ms past their TTL.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time          { return time.Now() }
func (realClock) Advance(d time.Duration) { time.Sleep(d) }
func (realClock) Slack() time.Duration    { return 250 * time.Millisecond }

// T0 is the start of the fake clocks the suites and their callers use.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var bg = context.Background()

// step is the poll interval of "gone" checks: fine for a fake clock (so the
// boundary is checked to the millisecond), coarser for real time.
func step(clk Clock) time.Duration {
	if clk.Slack() == 0 {
		return time.Millisecond
	}
	return 10 * time.Millisecond
}

// expectWhile asserts cond() for as long as the time since start (as clk
// measures it after cond returns) is below within: a false cond is a failure
// only if it came provably early. It reports whether cond held.
func expectWhile(t *testing.T, clk Clock, start time.Time, within time.Duration, cond func() bool, what string) bool {
	t.Helper()
	ok := cond()
	if elapsed := clk.Now().Sub(start); !ok && elapsed < within {
		t.Errorf("%s: failed after %v, before %v had passed", what, elapsed, within)
	}
	return ok
}

// eventually advances clk in small steps until cond() holds, and fails if
// the time since start passes limit + Slack first.
func eventually(t *testing.T, clk Clock, start time.Time, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	limit += clk.Slack()
	for {
		if cond() {
			return
		}
		if elapsed := clk.Now().Sub(start); elapsed >= limit {
			t.Errorf("%s: still false after %v (limit %v)", what, elapsed, limit)
			return
		}
		clk.Advance(step(clk))
	}
}
