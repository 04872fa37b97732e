package cachetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
)

// Limiter is api.Limiter (repeated here so the suite does not import the
// HTTP layer).
type Limiter interface {
	Allow(ctx context.Context, key string) (ok bool, retryAfter time.Duration, err error)
}

// LimiterFactory returns a fresh token-bucket limiter of rate tokens per
// second and burst tokens at most, whose time source is clk.
type LimiterFactory func(t *testing.T, clk clock.Clock, rate float64, burst int) Limiter

// RunLimiter runs the rate limiter contract: a token bucket per key, refused
// calls take nothing and announce when a token will be there, rate <= 0
// disables limiting, burst < 1 means 1.
func RunLimiter(t *testing.T, newLimiter LimiterFactory) {
	t.Run("TokenBucket", func(t *testing.T) { limiterTokenBucket(t, newLimiter) })
	t.Run("FractionalRate", func(t *testing.T) { limiterFractional(t, newLimiter) })
	t.Run("Disabled", func(t *testing.T) { limiterDisabled(t, newLimiter) })
	t.Run("Concurrent", func(t *testing.T) { limiterConcurrent(t, newLimiter) })
}

// waitSlack is how far an announced wait may be from the exact one: one
// implementation computes in nanoseconds, another rounds up to microseconds.
const waitSlack = time.Millisecond

func allow(t *testing.T, l Limiter, key string) (bool, time.Duration) {
	t.Helper()
	ok, wait, err := l.Allow(bg, key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return ok, wait
}

func wantRefused(t *testing.T, l Limiter, key string, wait time.Duration, why string) {
	t.Helper()
	ok, got := allow(t, l, key)
	if ok || got < wait-waitSlack || got > wait+waitSlack {
		t.Fatalf("%s: allowed=%v wait %v; want refused, wait %v", why, ok, got, wait)
	}
}

func limiterTokenBucket(t *testing.T, newLimiter LimiterFactory) {
	clk := clock.NewFake(T0)
	l := newLimiter(t, clk, 2, 3) // 2 tokens/s, at most 3

	for i := range 3 {
		if ok, _ := allow(t, l, "u"); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	wantRefused(t, l, "u", 500*time.Millisecond, "4th request (one token at 2/s)")
	clk.Advance(250 * time.Millisecond)
	wantRefused(t, l, "u", 250*time.Millisecond, "after 250ms")
	clk.Advance(250 * time.Millisecond)
	if ok, _ := allow(t, l, "u"); !ok {
		t.Fatal("a token should have refilled after 500ms")
	}
	if ok, _ := allow(t, l, "u"); ok {
		t.Fatal("only one token should have refilled")
	}

	// Keys are independent, whatever they look like.
	for _, k := range []string{"v", "u:", ":u", "", "1.2.3.4", "ünï"} {
		if ok, _ := allow(t, l, k); !ok {
			t.Fatalf("key %q shares a bucket", k)
		}
	}

	// A long idle refills to the burst, not beyond.
	clk.Advance(time.Hour)
	n := 0
	for range 10 {
		if ok, _ := allow(t, l, "u"); ok {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("after an idle hour %d requests passed, want the burst (3)", n)
	}

	// Refused requests do not consume tokens: over 10s at 2/s exactly 20 pass.
	clk.Advance(time.Hour)
	for range 3 {
		allow(t, l, "w")
	}
	passed := 0
	for range 100 {
		clk.Advance(100 * time.Millisecond)
		for range 5 {
			if ok, _ := allow(t, l, "w"); ok {
				passed++
			}
		}
	}
	if passed != 20 {
		t.Fatalf("%d passed over 10s at 2/s, want 20", passed)
	}
}

func limiterFractional(t *testing.T, newLimiter LimiterFactory) {
	clk := clock.NewFake(T0)
	l := newLimiter(t, clk, 0.1, 0) // burst < 1 means 1
	if ok, _ := allow(t, l, "u"); !ok {
		t.Fatal("first request refused")
	}
	wantRefused(t, l, "u", 10*time.Second, "second request at 0.1/s")
	clk.Advance(10 * time.Second)
	if ok, _ := allow(t, l, "u"); !ok {
		t.Fatal("refused after the wait it announced")
	}
}

func limiterDisabled(t *testing.T, newLimiter LimiterFactory) {
	clk := clock.NewFake(T0)
	for _, rate := range []float64{0, -1} {
		off := newLimiter(t, clk, rate, 1)
		for range 1000 {
			if ok, _ := allow(t, off, "u"); !ok {
				t.Fatalf("rate %v should disable limiting", rate)
			}
		}
	}
}

func limiterConcurrent(t *testing.T, newLimiter LimiterFactory) {
	clk := clock.NewFake(T0)
	l := newLimiter(t, clk, 1, 50)
	var passed atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		wg.Go(func() {
			<-start
			ok, _, err := l.Allow(bg, "hot")
			if err != nil {
				t.Errorf("Allow: %v", err)
			}
			if ok {
				passed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if passed.Load() != 50 {
		t.Fatalf("%d of 200 concurrent requests passed a burst of 50", passed.Load())
	}
}
