package rediscache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/cache/cachetest"
	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
)

var (
	_ api.Limiter  = (*rediscache.Limiter)(nil)
	_ counts.Cache = (*rediscache.Cache)(nil)
	_ edge.Overlay = (*rediscache.Overlay)(nil)
)

// EnvAddr names the environment variable with the host:port of a Redis for
// the contract suite (scripts/servers.sh env sets it).
const EnvAddr = "LIKES_TEST_REDIS_ADDR"

func redisAddr(t *testing.T) string {
	t.Helper()
	a := strings.TrimSpace(os.Getenv(EnvAddr))
	if a == "" {
		t.Skipf("%s is unset; run `scripts/servers.sh up redis && eval \"$(scripts/servers.sh env)\"` "+
			"(or `make test-engines`) to run the Redis contract suite", EnvAddr)
	}
	return a
}

// open returns a Store on the test Redis under a fresh key prefix, whose keys
// are deleted when t ends.
func open(t *testing.T, mod func(*rediscache.Config)) *rediscache.Store {
	t.Helper()
	cfg := rediscache.Config{
		Addr:    redisAddr(t),
		Prefix:  fmt.Sprintf("likes-test:%d:%x:", time.Now().UnixNano(), rand.Uint64()),
		Timeout: 2 * time.Second, // generous: -race on 2 busy cores; the degrade tests use short ones
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := rediscache.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("redis at %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() {
		defer s.Close()
		rdb := redis.NewClient(&redis.Options{Addr: cfg.Addr})
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, cfg.Prefix+"*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
	})
	return s
}

// TestContract runs the shared contract of the caching roles against Redis.
// Redis keeps its own time, so TTLs are checked against the wall clock, with
// tolerance; the limiter takes the suite's fake clock.
func TestContract(t *testing.T) {
	redisAddr(t)
	t.Run("Cache", func(t *testing.T) {
		cachetest.RunCache(t, func(t *testing.T, ttl time.Duration) (counts.Cache, cachetest.Clock) {
			return open(t, func(c *rediscache.Config) { c.CacheTTL = ttl }).Cache(), cachetest.RealClock()
		})
	})
	t.Run("Overlay", func(t *testing.T) {
		cachetest.RunOverlay(t, func(t *testing.T, ttl time.Duration) (edge.Overlay, cachetest.Clock) {
			return open(t, func(c *rediscache.Config) { c.OverlayTTL = ttl }).Overlay(), cachetest.RealClock()
		})
	})
	t.Run("Limiter", func(t *testing.T) {
		cachetest.RunLimiter(t, func(t *testing.T, clk clock.Clock, rate float64, burst int) cachetest.Limiter {
			l, err := open(t, nil).Limiter(rediscache.LimiterConfig{Name: "test", Rate: rate, Burst: burst, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})
}

// TestLimiterServerTime: without a Clock the bucket runs on Redis's TIME.
func TestLimiterServerTime(t *testing.T) {
	s := open(t, nil)
	l, err := s.Limiter(rediscache.LimiterConfig{Name: "srv", Rate: 20, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for i := range 3 {
		if ok, _, err := l.Allow(ctx, "k"); err != nil || !ok {
			t.Fatalf("request %d within the burst: %v %v", i, ok, err)
		}
	}
	ok, wait, err := l.Allow(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Unless the three calls took longer than a refill (50ms at 20/s), the
	// fourth is refused with a wait of at most 50ms.
	if time.Since(start) < 50*time.Millisecond && (ok || wait <= 0 || wait > 50*time.Millisecond) {
		t.Fatalf("4th request: allowed=%v wait=%v; want refused with 0 < wait <= 50ms", ok, wait)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !ok {
		if time.Now().After(deadline) {
			t.Fatal("no token refilled in 5s at 20/s")
		}
		time.Sleep(max(wait, time.Millisecond))
		if ok, wait, err = l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	// Buckets expire once they would be full again.
	rdb := redis.NewClient(&redis.Options{Addr: s.Config().Addr})
	defer rdb.Close()
	ttl, err := rdb.PTTL(ctx, s.Config().Prefix+"l:srv:k").Result()
	if err != nil || ttl <= 0 || ttl > 61*time.Second {
		t.Fatalf("bucket PTTL = %v, %v; want a positive expiry", ttl, err)
	}
}

// TestCacheMalformedValueIsAnError: a value this version cannot decode is an
// error (the reader falls through), never a wrong count.
func TestCacheMalformedValueIsAnError(t *testing.T) {
	s := open(t, nil)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.Config().Addr})
	defer rdb.Close()
	for _, v := range []string{"", "x", "\x01", "\x01\x02\x02", "\x01\x02\x02\x02\x00", "\x02\x02\x02\x02"} {
		if err := rdb.Set(ctx, s.Config().Prefix+"c:bad", v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if e, ok, err := s.Cache().Get(ctx, "bad"); err == nil || ok {
			t.Errorf("value %q: Get = %+v, %v, %v; want an error", v, e, ok, err)
		}
	}
	if err := rdb.HSet(ctx, s.Config().Prefix+"o:1:ui", "e", "1", "o", "x", "s", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Overlay().Get(ctx, "u", "i"); err == nil {
		t.Error("a malformed overlay entry read without error")
	}
}

// TestWrongTypeIsNotAnOutage: a Redis error reply (here WRONGTYPE) is
// returned, and does not open the circuit.
func TestWrongTypeIsNotAnOutage(t *testing.T) {
	s := open(t, func(c *rediscache.Config) { c.BreakAfter = 1 })
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.Config().Addr})
	defer rdb.Close()
	if err := rdb.LPush(ctx, s.Config().Prefix+"c:list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cache().Get(ctx, "list"); err == nil {
		t.Fatal("GET of a list succeeded")
	}
	if _, _, err := s.Cache().Get(ctx, "other"); err != nil {
		t.Fatalf("a reply error opened the circuit: %v", err)
	}
}
