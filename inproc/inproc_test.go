package inproc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"likes/clock"
	"likes/counts"
	"likes/crdt"
	"likes/edge"
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

func TestLimiterTokenBucket(t *testing.T) {
	clk := clock.NewFake(t0)
	l := NewLimiter(clk, 2, 3) // 2 tokens/s, at most 3

	for i := range 3 {
		if ok, _ := allow(t, l, "u"); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	ok, wait := allow(t, l, "u")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th = %v, wait %v; want refused, 500ms (one token at 2/s)", ok, wait)
	}
	clk.Advance(250 * time.Millisecond)
	if ok, wait := allow(t, l, "u"); ok || wait != 250*time.Millisecond {
		t.Fatalf("after 250ms = %v, wait %v; want refused, 250ms", ok, wait)
	}
	clk.Advance(250 * time.Millisecond)
	if ok, _ := allow(t, l, "u"); !ok {
		t.Fatal("a token should have refilled after 500ms")
	}
	if ok, _ := allow(t, l, "u"); ok {
		t.Fatal("only one token should have refilled")
	}

	// Keys are independent.
	if ok, _ := allow(t, l, "v"); !ok {
		t.Fatal("another key shares the bucket")
	}

	// A long idle refills to the burst, not beyond.
	clk.Advance(time.Hour)
	n := 0
	for {
		if ok, _ := allow(t, l, "u"); !ok {
			break
		}
		n++
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

func TestLimiterFractionalRateAndDisabled(t *testing.T) {
	clk := clock.NewFake(t0)
	l := NewLimiter(clk, 0.1, 0) // burst < 1 means 1
	if ok, _ := allow(t, l, "u"); !ok {
		t.Fatal("first request refused")
	}
	if ok, wait := allow(t, l, "u"); ok || wait != 10*time.Second {
		t.Fatalf("second = %v wait %v, want refused for 10s", ok, wait)
	}
	clk.Advance(10 * time.Second)
	if ok, _ := allow(t, l, "u"); !ok {
		t.Fatal("refused after the wait it announced")
	}

	for _, rate := range []float64{0, -1} {
		off := NewLimiter(clk, rate, 1)
		for range 1000 {
			if ok, _ := allow(t, off, "u"); !ok {
				t.Fatalf("rate %v should disable limiting", rate)
			}
		}
	}
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

func TestLimiterConcurrent(t *testing.T) {
	clk := clock.NewFake(t0)
	l := NewLimiter(clk, 1, 50)
	var passed atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if ok, _, _ := l.Allow(ctx, "hot"); ok {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	if passed.Load() != 50 {
		t.Fatalf("%d of 200 concurrent requests passed a burst of 50", passed.Load())
	}
}

func v(epoch, op uint64) crdt.Version { return crdt.Version{Epoch: epoch, Op: op} }

func TestOverlayKeepsNewestVersion(t *testing.T) {
	clk := clock.NewFake(t0)
	o := NewOverlay(clk, 30*time.Second)
	get := func(user, item string) (edge.OverlayEntry, bool) {
		e, ok, err := o.Get(ctx, user, item)
		if err != nil {
			t.Fatal(err)
		}
		return e, ok
	}
	if _, ok := get("u", "i"); ok {
		t.Fatal("empty overlay has an entry")
	}
	put := func(st crdt.State, ver crdt.Version) {
		if err := o.Put(ctx, "u", "i", edge.OverlayEntry{State: st, Version: ver}); err != nil {
			t.Fatal(err)
		}
	}
	put(crdt.Liked, v(1, 3))
	put(crdt.Unliked, v(1, 2)) // older: ignored
	if e, _ := get("u", "i"); e.State != crdt.Liked || e.Version != v(1, 3) {
		t.Fatalf("older version replaced a newer one: %+v", e)
	}
	put(crdt.Unliked, v(1, 4))
	if e, _ := get("u", "i"); e.State != crdt.Unliked || e.Version != v(1, 4) {
		t.Fatalf("newer op not taken: %+v", e)
	}
	put(crdt.Liked, v(2, 1)) // higher epoch wins over a higher op
	put(crdt.Unliked, v(1, 9))
	if e, _ := get("u", "i"); e.State != crdt.Liked || e.Version != v(2, 1) {
		t.Fatalf("epoch order broken: %+v", e)
	}
	// Entries are per (user, item), and the separator cannot be forged.
	if _, ok := get("u\x00i", ""); ok {
		t.Fatal("key collision")
	}
	if _, ok := get("u", "j"); ok {
		t.Fatal("entry leaked to another item")
	}
}

func TestOverlayConcurrentPutsKeepMax(t *testing.T) {
	// Two writes of one edge can finish at once (a like and an unlike in flight,
	// or a forwarded write racing a local one); whatever order their Puts run
	// in, the overlay must end at the newer version.
	for round := range 200 {
		o := NewOverlay(clock.NewFake(t0), time.Minute)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 8 {
			wg.Go(func() {
				<-start
				_ = o.Put(ctx, "u", "i", edge.OverlayEntry{State: crdt.State(i % 2), Version: v(1, uint64(i))})
			})
		}
		close(start)
		wg.Wait()
		if e, _, _ := o.Get(ctx, "u", "i"); e.Version != v(1, 7) || e.State != crdt.Liked {
			t.Fatalf("round %d: concurrent Puts ended at %+v, want the newest 1.7", round, e)
		}
	}
}

func TestOverlayTTL(t *testing.T) {
	clk := clock.NewFake(t0)
	o := NewOverlay(clk, 30*time.Second)
	_ = o.Put(ctx, "u", "i", edge.OverlayEntry{State: crdt.Liked, Version: v(1, 5)})
	clk.Advance(30*time.Second - time.Millisecond)
	if _, ok, _ := o.Get(ctx, "u", "i"); !ok {
		t.Fatal("expired early")
	}
	clk.Advance(time.Millisecond)
	if _, ok, _ := o.Get(ctx, "u", "i"); ok {
		t.Fatal("not expired at its TTL")
	}
	// After expiry any version may be written again.
	_ = o.Put(ctx, "u", "i", edge.OverlayEntry{State: crdt.Unliked, Version: v(1, 1)})
	if e, ok, _ := o.Get(ctx, "u", "i"); !ok || e.Version != v(1, 1) {
		t.Fatalf("after expiry: %+v %v", e, ok)
	}
	if d := NewOverlay(nil, 0); d.ttl != 30*time.Second {
		t.Fatalf("default overlay TTL = %v", d.ttl)
	}
}

func TestCacheTTL(t *testing.T) {
	clk := clock.NewFake(t0)
	c := NewCache(clk, time.Minute)
	if _, ok, _ := c.Get(ctx, "x"); ok {
		t.Fatal("empty cache hit")
	}
	want := counts.Entry{Count: 42, AsOf: 100, StoredAt: 200}
	if err := c.Set(ctx, "x", want); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Millisecond)
	if got, ok, _ := c.Get(ctx, "x"); !ok || got != want {
		t.Fatalf("get = %+v %v", got, ok)
	}
	clk.Advance(time.Millisecond)
	if _, ok, _ := c.Get(ctx, "x"); ok {
		t.Fatal("entry outlived its TTL")
	}
	// A Set restarts the TTL.
	_ = c.Set(ctx, "x", want)
	clk.Advance(50 * time.Second)
	_ = c.Set(ctx, "x", counts.Entry{Count: 43})
	clk.Advance(50 * time.Second)
	if got, ok, _ := c.Get(ctx, "x"); !ok || got.Count != 43 {
		t.Fatalf("after re-set: %+v %v", got, ok)
	}
}

func TestCacheRefreshSlot(t *testing.T) {
	clk := clock.NewFake(t0)
	c := NewCache(clk, time.Minute)
	try := func(item string) bool {
		ok, err := c.TryRefresh(ctx, item, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !try("x") {
		t.Fatal("free slot refused")
	}
	if try("x") {
		t.Fatal("slot granted twice")
	}
	if !try("y") {
		t.Fatal("slots are per item")
	}
	_ = c.DoneRefresh(ctx, "x")
	if !try("x") {
		t.Fatal("released slot refused")
	}
	// A holder that never finishes loses the slot after its ttl.
	clk.Advance(10*time.Second - time.Millisecond)
	if try("x") {
		t.Fatal("slot expired early")
	}
	clk.Advance(time.Millisecond)
	if !try("x") {
		t.Fatal("abandoned slot never expires")
	}

	var granted atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			if ok, _ := c.TryRefresh(ctx, "hot", time.Second); ok {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if granted.Load() != 1 {
		t.Fatalf("%d concurrent claims granted, want 1", granted.Load())
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
