package cachetest

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/counts"
)

// CacheFactory returns a fresh, empty cache whose entries live for ttl, and
// the clock that drives it.
type CacheFactory func(t *testing.T, ttl time.Duration) (counts.Cache, Clock)

// RunCache runs the counts.Cache contract.
func RunCache(t *testing.T, newCache CacheFactory) {
	t.Run("MissThenHit", func(t *testing.T) { cacheMissThenHit(t, newCache) })
	t.Run("ItemsIndependent", func(t *testing.T) { cacheItemsIndependent(t, newCache) })
	t.Run("TTL", func(t *testing.T) { cacheTTL(t, newCache) })
	t.Run("SetRestartsTTL", func(t *testing.T) { cacheSetRestartsTTL(t, newCache) })
	t.Run("RefreshSlot", func(t *testing.T) { cacheRefreshSlot(t, newCache) })
	t.Run("RefreshSlotExpires", func(t *testing.T) { cacheRefreshSlotExpires(t, newCache) })
	t.Run("RefreshSlotConcurrent", func(t *testing.T) { cacheRefreshSlotConcurrent(t, newCache) })
	t.Run("Concurrent", func(t *testing.T) { cacheConcurrent(t, newCache) })
}

type cacheT struct {
	t *testing.T
	c counts.Cache
}

func (h cacheT) get(item string) (counts.Entry, bool) {
	h.t.Helper()
	e, ok, err := h.c.Get(bg, item)
	if err != nil {
		h.t.Fatalf("Get(%q): %v", item, err)
	}
	return e, ok
}

func (h cacheT) set(item string, e counts.Entry) {
	h.t.Helper()
	if err := h.c.Set(bg, item, e); err != nil {
		h.t.Fatalf("Set(%q): %v", item, err)
	}
}

func (h cacheT) try(item string, ttl time.Duration) bool {
	h.t.Helper()
	ok, err := h.c.TryRefresh(bg, item, ttl)
	if err != nil {
		h.t.Fatalf("TryRefresh(%q): %v", item, err)
	}
	return ok
}

func (h cacheT) done(item string) {
	h.t.Helper()
	if err := h.c.DoneRefresh(bg, item); err != nil {
		h.t.Fatalf("DoneRefresh(%q): %v", item, err)
	}
}

func cacheMissThenHit(t *testing.T, newCache CacheFactory) {
	c, _ := newCache(t, time.Minute)
	h := cacheT{t, c}
	if e, ok := h.get("x"); ok {
		t.Fatalf("empty cache hit: %+v", e)
	}
	for _, want := range []counts.Entry{
		{Count: 42, AsOf: 1_893_553_445_000, StoredAt: 1_893_553_445_123},
		{Count: 0, AsOf: 0, StoredAt: 0},
		{Count: -7, AsOf: -1, StoredAt: 1},
		{Count: math.MaxInt64, AsOf: math.MinInt64, StoredAt: math.MaxInt64},
	} {
		h.set("x", want)
		if got, ok := h.get("x"); !ok || got != want {
			t.Fatalf("Get after Set(%+v) = %+v, %v", want, got, ok)
		}
	}
}

func cacheItemsIndependent(t *testing.T, newCache CacheFactory) {
	c, _ := newCache(t, time.Minute)
	h := cacheT{t, c}
	items := []string{"a", "b", "a:b", "a\x00b", "", "ünï©ødé", "c:a", "r:a", strings.Repeat("long", 256)}
	for i, it := range items {
		h.set(it, counts.Entry{Count: int64(i), AsOf: int64(100 + i), StoredAt: int64(200 + i)})
	}
	for i, it := range items {
		if got, ok := h.get(it); !ok || got.Count != int64(i) || got.AsOf != int64(100+i) || got.StoredAt != int64(200+i) {
			t.Errorf("item %q: got %+v %v, want count %d", it, got, ok, i)
		}
	}
	if _, ok := h.get("absent"); ok {
		t.Error("an item never set has an entry")
	}
	// The refresh slot is not an entry, and an entry does not hold the slot.
	if !h.try("slot-only", time.Minute) {
		t.Fatal("free slot refused")
	}
	if _, ok := h.get("slot-only"); ok {
		t.Error("TryRefresh created a cache entry")
	}
	if !h.try("a", time.Minute) {
		t.Error("an item's entry holds its refresh slot")
	}
}

func cacheTTL(t *testing.T, newCache CacheFactory) {
	const ttl = 400 * time.Millisecond
	c, clk := newCache(t, ttl)
	h := cacheT{t, c}
	want := counts.Entry{Count: 42, AsOf: 100, StoredAt: 200}
	before := clk.Now()
	h.set("x", want)
	after := clk.Now()
	present := func() bool {
		got, ok := h.get("x")
		if ok && got != want {
			t.Fatalf("entry changed to %+v", got)
		}
		return ok
	}
	expectWhile(t, clk, before, ttl, present, "fresh entry present")
	clk.Advance(ttl - time.Millisecond)
	expectWhile(t, clk, before, ttl, present, "entry present just before its TTL")
	eventually(t, clk, after, ttl, func() bool { return !present() }, "entry gone at its TTL")
}

func cacheSetRestartsTTL(t *testing.T, newCache CacheFactory) {
	const ttl = 500 * time.Millisecond
	c, clk := newCache(t, ttl)
	h := cacheT{t, c}
	h.set("x", counts.Entry{Count: 1})
	clk.Advance(ttl * 6 / 10)
	before := clk.Now()
	h.set("x", counts.Entry{Count: 2})
	clk.Advance(ttl * 6 / 10) // past the first Set's TTL, within the second's
	expectWhile(t, clk, before, ttl, func() bool {
		got, ok := h.get("x")
		if ok && got.Count != 2 {
			t.Fatalf("after the second Set: %+v", got)
		}
		return ok
	}, "entry present within the TTL of its latest Set")
}

func cacheRefreshSlot(t *testing.T, newCache CacheFactory) {
	c, _ := newCache(t, time.Minute)
	h := cacheT{t, c}
	if !h.try("x", time.Minute) {
		t.Fatal("free slot refused")
	}
	if h.try("x", time.Minute) {
		t.Fatal("slot granted twice")
	}
	if !h.try("y", time.Minute) {
		t.Fatal("slots are not per item")
	}
	h.done("x")
	if !h.try("x", time.Minute) {
		t.Fatal("released slot refused")
	}
	h.done("never-claimed") // releasing a free slot is harmless
	if !h.try("never-claimed", time.Minute) {
		t.Fatal("slot refused after a release of a free slot")
	}
}

func cacheRefreshSlotExpires(t *testing.T, newCache CacheFactory) {
	const slot = 300 * time.Millisecond
	c, clk := newCache(t, time.Minute)
	h := cacheT{t, c}
	before := clk.Now()
	if !h.try("x", slot) {
		t.Fatal("free slot refused")
	}
	after := clk.Now()
	clk.Advance(slot - time.Millisecond)
	// A holder that never finishes keeps the slot for its ttl, then loses it.
	// A probe that finds the slot free takes it: that is the end of the test.
	freed := false
	probe := func() bool {
		if !freed {
			freed = h.try("x", slot)
		}
		return freed
	}
	expectWhile(t, clk, before, slot, func() bool { return !probe() }, "slot held until its ttl")
	eventually(t, clk, after, slot, probe, "abandoned slot free at its ttl")
}

func cacheRefreshSlotConcurrent(t *testing.T, newCache CacheFactory) {
	c, _ := newCache(t, time.Minute)
	var granted atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			<-start
			ok, err := c.TryRefresh(bg, "hot", time.Minute)
			if err != nil {
				t.Errorf("TryRefresh: %v", err)
			}
			if ok {
				granted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := granted.Load(); n != 1 {
		t.Fatalf("%d concurrent claims granted, want 1", n)
	}
}

func cacheConcurrent(t *testing.T, newCache CacheFactory) {
	c, _ := newCache(t, time.Minute)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				item := fmt.Sprint("item", i%5)
				if err := c.Set(bg, item, counts.Entry{Count: int64(w), AsOf: int64(w), StoredAt: int64(w)}); err != nil {
					t.Errorf("Set: %v", err)
					return
				}
				e, ok, err := c.Get(bg, item)
				if err != nil || !ok {
					t.Errorf("Get after Set: %+v %v %v", e, ok, err)
					return
				}
				if e.Count != e.AsOf || e.Count != e.StoredAt || e.Count < 0 || e.Count >= 8 {
					t.Errorf("torn entry %+v", e)
					return
				}
			}
		})
	}
	wg.Wait()
}
