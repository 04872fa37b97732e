package inproc

import (
	"context"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
)

var (
	_ edge.Overlay = (*Overlay)(nil)
	_ counts.Cache = (*Cache)(nil)
)

// ttlMap is a mutex-guarded map whose entries expire; it sweeps itself every
// sweepEvery writes so it stays bounded by the live set.
type ttlMap[V any] struct {
	mu     sync.Mutex
	m      map[string]ttlEntry[V]
	writes int
}

type ttlEntry[V any] struct {
	v       V
	expires int64
}

const sweepEvery = 4096

func (t *ttlMap[V]) get(key string, now int64) (V, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok || e.expires <= now {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (t *ttlMap[V]) put(key string, v V, now, expires int64) {
	t.putIf(key, v, now, expires, nil)
}

// putIf stores v unless keep(live current value) says to keep the current one;
// the check and the write are one critical section.
func (t *ttlMap[V]) putIf(key string, v V, now, expires int64, keep func(cur V) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[key]; ok && keep != nil && e.expires > now && keep(e.v) {
		return
	}
	if t.m == nil {
		t.m = map[string]ttlEntry[V]{}
	}
	t.m[key] = ttlEntry[V]{v: v, expires: expires}
	t.writes++
	if t.writes >= sweepEvery {
		t.writes = 0
		for k, e := range t.m {
			if e.expires <= now {
				delete(t.m, k)
			}
		}
	}
}

func (t *ttlMap[V]) del(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}

// Overlay is the in-process session overlay.
type Overlay struct {
	clock clock.Clock
	ttl   time.Duration
	m     ttlMap[edge.OverlayEntry]
}

// NewOverlay keeps entries for ttl (default 30s).
func NewOverlay(c clock.Clock, ttl time.Duration) *Overlay {
	if c == nil {
		c = clock.Real{}
	}
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	return &Overlay{clock: c, ttl: ttl}
}

func overlayKey(user, item string) string { return user + "\x00" + item }

// Put implements edge.Overlay. A newer version is never replaced by an older one.
func (o *Overlay) Put(_ context.Context, user, item string, e edge.OverlayEntry) error {
	now := o.clock.Now()
	// Compare and write under one lock: two Puts of one edge racing must not
	// let the older version land last.
	o.m.putIf(overlayKey(user, item), e, now.UnixMilli(), now.Add(o.ttl).UnixMilli(),
		func(old edge.OverlayEntry) bool { return e.Version.Less(old.Version) })
	return nil
}

// Get implements edge.Overlay.
func (o *Overlay) Get(_ context.Context, user, item string) (edge.OverlayEntry, bool, error) {
	e, ok := o.m.get(overlayKey(user, item), o.clock.Now().UnixMilli())
	return e, ok, nil
}

// Cache is the in-process count cache.
type Cache struct {
	clock   clock.Clock
	ttl     time.Duration
	entries ttlMap[counts.Entry]
	locks   ttlMap[struct{}]
	lockMu  sync.Mutex // makes TryRefresh's check-and-set atomic
}

// NewCache keeps entries for ttl (default 30s).
func NewCache(c clock.Clock, ttl time.Duration) *Cache {
	if c == nil {
		c = clock.Real{}
	}
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	return &Cache{clock: c, ttl: ttl}
}

// Get implements counts.Cache.
func (c *Cache) Get(_ context.Context, item string) (counts.Entry, bool, error) {
	e, ok := c.entries.get(item, c.clock.Now().UnixMilli())
	return e, ok, nil
}

// Set implements counts.Cache.
func (c *Cache) Set(_ context.Context, item string, e counts.Entry) error {
	now := c.clock.Now()
	c.entries.put(item, e, now.UnixMilli(), now.Add(c.ttl).UnixMilli())
	return nil
}

// TryRefresh implements counts.Cache.
func (c *Cache) TryRefresh(_ context.Context, item string, ttl time.Duration) (bool, error) {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	now := c.clock.Now()
	if _, held := c.locks.get(item, now.UnixMilli()); held {
		return false, nil
	}
	c.locks.put(item, struct{}{}, now.UnixMilli(), now.Add(ttl).UnixMilli())
	return true, nil
}

// DoneRefresh implements counts.Cache.
func (c *Cache) DoneRefresh(_ context.Context, item string) error {
	c.locks.del(item)
	return nil
}

// Limiter is a token bucket per key: Rate tokens per second, Burst at most.
type Limiter struct {
	clock clock.Clock
	rate  float64
	burst float64
	mu    sync.Mutex
	b     map[string]*bucket
	ops   int
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewLimiter returns a limiter; rate <= 0 disables limiting.
func NewLimiter(c clock.Clock, rate float64, burst int) *Limiter {
	if c == nil {
		c = clock.Real{}
	}
	if burst < 1 {
		burst = 1
	}
	return &Limiter{clock: c, rate: rate, burst: float64(burst), b: map[string]*bucket{}}
}

// Allow takes one token for key, or says how long until one is available.
func (l *Limiter) Allow(_ context.Context, key string) (bool, time.Duration, error) {
	if l.rate <= 0 {
		return true, 0, nil
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops++
	if l.ops >= sweepEvery { // drop buckets that have refilled completely
		l.ops = 0
		full := time.Duration(l.burst / l.rate * float64(time.Second))
		for k, b := range l.b {
			if now.Sub(b.last) > full {
				delete(l.b, k)
			}
		}
	}
	b, ok := l.b[key]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.b[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0, nil
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait, nil
}
