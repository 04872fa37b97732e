package inproc

// The behaviour the in-process implementations share with Redis is the
// contract suite in cache/cachetest, run by contract_test.go; this file keeps
// what is particular to the in-process ones (sweeping, defaults).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var ctx = context.Background()

func allow(t *testing.T, l *Limiter, key string) (bool, time.Duration) {
	t.Helper()
	ok, wait, err := l.Allow(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return ok, wait
}

func TestLimiterSweepsFullBuckets(t *testing.T) {
	clk := clock.NewFake(t0)
	l := NewLimiter(clk, 10, 1)
	for i := range sweepEvery - 1 {
		allow(t, l, fmt.Sprint("k", i))
	}
	clk.Advance(time.Second) // every bucket refills completely
	allow(t, l, "trigger")
	l.mu.Lock()
	n := len(l.b)
	l.mu.Unlock()
	if n > 1 {
		t.Fatalf("%d buckets kept after a sweep, want only the live one", n)
	}
}

func TestDefaultTTLs(t *testing.T) {
	if d := NewOverlay(nil, 0); d.ttl != 30*time.Second {
		t.Fatalf("default overlay TTL = %v", d.ttl)
	}
	if d := NewCache(nil, -1); d.ttl != 30*time.Second {
		t.Fatalf("default cache TTL = %v", d.ttl)
	}
}

func TestTTLMapSweepsExpired(t *testing.T) {
	var m ttlMap[int]
	for i := range sweepEvery - 1 {
		m.put(fmt.Sprint(i), i, 0, 10)
	}
	m.put("live", 1, 20, 100) // the sweeping write: everything else has expired
	m.mu.Lock()
	n := len(m.m)
	m.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d entries after a sweep, want 1", n)
	}
	if v, ok := m.get("live", 20); !ok || v != 1 {
		t.Fatal("live entry lost")
	}
}
