package cachetest

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// OverlayFactory returns a fresh, empty overlay whose entries live for ttl,
// and the clock that drives it.
type OverlayFactory func(t *testing.T, ttl time.Duration) (edge.Overlay, Clock)

// RunOverlay runs the edge.Overlay contract.
func RunOverlay(t *testing.T, newOverlay OverlayFactory) {
	t.Run("KeepsNewestVersion", func(t *testing.T) { overlayKeepsNewest(t, newOverlay) })
	t.Run("LargeVersions", func(t *testing.T) { overlayLargeVersions(t, newOverlay) })
	t.Run("PerUserAndItem", func(t *testing.T) { overlayPerUserItem(t, newOverlay) })
	t.Run("ConcurrentPutsKeepMax", func(t *testing.T) { overlayConcurrent(t, newOverlay) })
	t.Run("TTL", func(t *testing.T) { overlayTTL(t, newOverlay) })
}

func ver(epoch, op uint64) crdt.Version { return crdt.Version{Epoch: epoch, Op: op} }

type overlayT struct {
	t *testing.T
	o edge.Overlay
}

func (h overlayT) get(user, item string) (edge.OverlayEntry, bool) {
	h.t.Helper()
	e, ok, err := h.o.Get(bg, user, item)
	if err != nil {
		h.t.Fatalf("Get(%q, %q): %v", user, item, err)
	}
	return e, ok
}

func (h overlayT) put(user, item string, st crdt.State, v crdt.Version) {
	h.t.Helper()
	if err := h.o.Put(bg, user, item, edge.OverlayEntry{State: st, Version: v}); err != nil {
		h.t.Fatalf("Put(%q, %q, %v): %v", user, item, v, err)
	}
}

func (h overlayT) want(user, item string, st crdt.State, v crdt.Version, why string) {
	h.t.Helper()
	e, ok := h.get(user, item)
	if !ok || e.State != st || e.Version != v {
		h.t.Fatalf("%s: got %+v (present %v), want %v at %v", why, e, ok, st, v)
	}
}

func overlayKeepsNewest(t *testing.T, newOverlay OverlayFactory) {
	o, _ := newOverlay(t, time.Minute)
	h := overlayT{t, o}
	if _, ok := h.get("u", "i"); ok {
		t.Fatal("empty overlay has an entry")
	}
	h.put("u", "i", crdt.Liked, ver(1, 3))
	h.put("u", "i", crdt.Unliked, ver(1, 2))
	h.want("u", "i", crdt.Liked, ver(1, 3), "an older op replaced a newer one")
	h.put("u", "i", crdt.Unliked, ver(1, 4))
	h.want("u", "i", crdt.Unliked, ver(1, 4), "a newer op was not taken")
	h.put("u", "i", crdt.Liked, ver(2, 1)) // a higher epoch wins over a higher op
	h.put("u", "i", crdt.Unliked, ver(1, 9))
	h.want("u", "i", crdt.Liked, ver(2, 1), "epoch order")
	h.put("u", "i", crdt.Erased, ver(2, 2))
	h.want("u", "i", crdt.Erased, ver(2, 2), "an erasure is an ordinary newer write")
	// Decimal traps: 10 > 9 although "10" < "9" as text.
	h.put("u", "d", crdt.Liked, ver(9, 9))
	h.put("u", "d", crdt.Unliked, ver(10, 0))
	h.put("u", "d", crdt.Liked, ver(9, 99))
	h.want("u", "d", crdt.Unliked, ver(10, 0), "epoch 10 vs 9")
	h.put("u", "d", crdt.Liked, ver(10, 10))
	h.put("u", "d", crdt.Unliked, ver(10, 9))
	h.want("u", "d", crdt.Liked, ver(10, 10), "op 10 vs 9")
}

func overlayLargeVersions(t *testing.T, newOverlay OverlayFactory) {
	o, _ := newOverlay(t, time.Minute)
	h := overlayT{t, o}
	// Above 2^53 a double cannot tell these apart; the overlay must.
	big := uint64(1) << 60
	h.put("u", "i", crdt.Liked, ver(big+1, 5))
	h.put("u", "i", crdt.Unliked, ver(big, math.MaxUint64))
	h.want("u", "i", crdt.Liked, ver(big+1, 5), "large epochs")
	h.put("u", "i", crdt.Unliked, ver(big+1, big+1))
	h.put("u", "i", crdt.Liked, ver(big+1, big))
	h.want("u", "i", crdt.Unliked, ver(big+1, big+1), "large ops")
	h.put("u", "i", crdt.Liked, ver(math.MaxUint64, math.MaxUint64))
	h.want("u", "i", crdt.Liked, ver(math.MaxUint64, math.MaxUint64), "max version")
}

func overlayPerUserItem(t *testing.T, newOverlay OverlayFactory) {
	o, _ := newOverlay(t, time.Minute)
	h := overlayT{t, o}
	h.put("u", "i", crdt.Liked, ver(1, 1))
	for _, k := range [][2]string{{"u", "j"}, {"v", "i"}, {"u\x00i", ""}, {"", "u\x00i"}, {"ui", ""}, {"", "ui"}, {"u:i", ""}} {
		if e, ok := h.get(k[0], k[1]); ok {
			t.Errorf("(%q, %q) sees the entry of (u, i): %+v", k[0], k[1], e)
		}
	}
	// Writes to other keys leave (u, i) alone, however low their version.
	h.put("u", "j", crdt.Unliked, ver(5, 5))
	h.put("v", "i", crdt.Unliked, ver(0, 0))
	h.want("u", "i", crdt.Liked, ver(1, 1), "(u, i) after writes to neighbours")
	h.want("v", "i", crdt.Unliked, ver(0, 0), "a first write at version 0.0")
}

func overlayConcurrent(t *testing.T, newOverlay OverlayFactory) {
	// Two writes of one edge can finish at once (a like and an unlike in
	// flight, or a forwarded write racing a local one); whatever order their
	// Puts run in, the overlay must end at the newer version.
	o, _ := newOverlay(t, time.Minute)
	for round := range 100 {
		user := fmt.Sprint("u", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 8 {
			wg.Go(func() {
				<-start
				if err := o.Put(bg, user, "i", edge.OverlayEntry{State: crdt.State(i % 2), Version: ver(1, uint64(i))}); err != nil {
					t.Errorf("Put: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if e, ok, err := o.Get(bg, user, "i"); err != nil || !ok || e.Version != ver(1, 7) || e.State != crdt.Liked {
			t.Fatalf("round %d: concurrent Puts ended at %+v (%v, %v), want the newest 1.7 Liked", round, e, ok, err)
		}
	}
}

func overlayTTL(t *testing.T, newOverlay OverlayFactory) {
	const ttl = 400 * time.Millisecond
	o, clk := newOverlay(t, ttl)
	h := overlayT{t, o}
	before := clk.Now()
	h.put("u", "i", crdt.Liked, ver(1, 5))
	after := clk.Now()
	present := func() bool { _, ok := h.get("u", "i"); return ok }
	clk.Advance(ttl - time.Millisecond)
	expectWhile(t, clk, before, ttl, present, "entry present just before its TTL")
	eventually(t, clk, after, ttl, func() bool { return !present() }, "entry gone at its TTL")
	// After expiry any version may be written again.
	h.put("u", "i", crdt.Unliked, ver(1, 1))
	h.want("u", "i", crdt.Unliked, ver(1, 1), "after expiry")
}
