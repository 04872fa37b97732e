package rediscache_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// These tests need no Redis: they point the store at a closed port (Redis
// stopped) and at a listener that never answers (Redis hung, or a network
// that drops packets), and check that every role fails fast and that a count
// read still answers from the store.

// closedAddr returns a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// silentAddr returns a loopback address that accepts connections and never
// answers; they are closed when t ends.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// fixedStore is a counts.CountStore with one answer.
type fixedStore struct{ n int64 }

func (f fixedStore) Count(context.Context, string) (int64, error) { return f.n, nil }
func (f fixedStore) Watermarks(context.Context) (crdt.Watermarks, error) {
	return crdt.Watermarks{"r1": 1_000}, nil
}

const (
	deadTimeout = 50 * time.Millisecond
	// fast bounds one failing call: the timeout plus scheduling on a busy
	// 2-core machine under -race.
	fast = 750 * time.Millisecond
)

func openDead(t *testing.T, addr string, breakAfter int) *rediscache.Store {
	t.Helper()
	s, err := rediscache.Open(rediscache.Config{Addr: addr, Timeout: deadTimeout, BreakAfter: breakAfter, BreakFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestDeadRedisDegrades(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"Stopped", closedAddr},
		{"Silent", silentAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openDead(t, tc.addr(t), 1000) // breaker out of the way: every call reaches the network
			timed := func(what string, f func() error) {
				t.Helper()
				start := time.Now()
				err := f()
				if took := time.Since(start); took > fast {
					t.Errorf("%s took %v with Redis down; want < %v", what, took, fast)
				}
				if err == nil {
					t.Errorf("%s succeeded with Redis down", what)
				}
			}
			c := s.Cache()
			timed("Cache.Get", func() error { _, _, err := c.Get(ctx, "x"); return err })
			timed("Cache.Set", func() error { return c.Set(ctx, "x", counts.Entry{Count: 1}) })
			timed("Cache.TryRefresh", func() error { _, err := c.TryRefresh(ctx, "x", time.Second); return err })
			timed("Cache.DoneRefresh", func() error { return c.DoneRefresh(ctx, "x") })
			o := s.Overlay()
			timed("Overlay.Put", func() error { return o.Put(ctx, "u", "i", edge.OverlayEntry{State: crdt.Liked}) })
			timed("Overlay.Get", func() error { _, _, err := o.Get(ctx, "u", "i"); return err })
			l, err := s.Limiter(rediscache.LimiterConfig{Name: "user", Rate: 1, Burst: 1})
			if err != nil {
				t.Fatal(err)
			}
			timed("Limiter.Allow", func() error { _, _, err := l.Allow(ctx, "u"); return err })

			// The read path answers from the store.
			r, err := counts.NewReader(counts.Config{Store: fixedStore{n: 42}, Cache: c})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for range 3 {
				start := time.Now()
				res, err := r.Count(ctx, "x")
				if err != nil || res.Count != 42 {
					t.Fatalf("Count with Redis down = %+v, %v; want 42 from the store", res, err)
				}
				if took := time.Since(start); took > 2*fast {
					t.Errorf("Count took %v with Redis down", took)
				}
			}
		})
	}
}

// TestBreakerOpens: after BreakAfter consecutive failures calls fail at once
// with ErrUnavailable, without waiting for a silent Redis.
func TestBreakerOpens(t *testing.T) {
	ctx := context.Background()
	s := openDead(t, silentAddr(t), 3)
	c := s.Cache()
	for i := range 3 {
		if _, _, err := c.Get(ctx, "x"); err == nil || errors.Is(err, rediscache.ErrUnavailable) {
			t.Fatalf("call %d: %v; want a transport error", i, err)
		}
	}
	start := time.Now()
	for range 100 {
		if _, _, err := c.Get(ctx, "x"); !errors.Is(err, rediscache.ErrUnavailable) {
			t.Fatalf("open circuit: %v; want ErrUnavailable", err)
		}
	}
	if took := time.Since(start); took > fast {
		t.Errorf("100 calls on an open circuit took %v", took)
	}
	// The caller's own cancellation is not Redis's failure, and an open
	// circuit fails it the same way.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := c.Get(cctx, "x"); err == nil {
		t.Error("a call on an open circuit succeeded")
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []rediscache.Config{
		{},
		{Addr: " "},
		{Addr: "a:1", Timeout: -1},
		{Addr: "a:1", Timeout: time.Microsecond},
		{Addr: "a:1", CacheTTL: -time.Second},
		{Addr: "a:1", OverlayTTL: time.Microsecond},
		{Addr: "a:1", BreakAfter: -1},
		{Addr: "a:1", BreakFor: -1},
		{Addr: "a:1", PoolSize: -1},
		{Addr: "a:1", DB: -1},
	} {
		if s, err := rediscache.Open(cfg); err == nil {
			_ = s.Close()
			t.Errorf("Open(%+v) accepted", cfg)
		}
	}
	s, err := rediscache.Open(rediscache.Config{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := s.Config()
	if got.Prefix != "likes:" || got.Timeout != 100*time.Millisecond || got.BreakAfter != 5 ||
		got.BreakFor != time.Second || got.CacheTTL != time.Minute || got.OverlayTTL != 30*time.Second {
		t.Errorf("defaults: %+v", got)
	}
	for _, name := range []string{"", "a:b", "a b", "ü"} {
		if _, err := s.Limiter(rediscache.LimiterConfig{Name: name, Rate: 1}); err == nil {
			t.Errorf("limiter name %q accepted", name)
		}
	}
}
