// Package rediscache holds the Redis implementations of the production
// engines' caching roles (DESIGN.md §7): the count cache (counts.Cache), the
// session overlay (edge.Overlay) and the rate limiter (api.Limiter). They pass
// the same contract suite as the in-process defaults (cache/cachetest).
//
// Redis is an accelerator, never a dependency of correctness: every call is
// bounded by Config.Timeout (dial, write and read alike, no retries), and a
// circuit breaker turns a dead or blackholed Redis into an immediate
// ErrUnavailable after Config.BreakAfter consecutive failures, letting one
// probe through every Config.BreakFor. Callers already treat these errors as
// misses: counts.Reader falls through to the store, edge.Service reads the
// replica, and api's limiter check fails open.
//
// Keys (all under Config.Prefix, default "likes:"):
//
//	c:ITEM            count cache entry: 1 format byte + 3 zigzag varints, PX CacheTTL
//	r:ITEM            refresh slot of ITEM (SET NX PX)
//	o:LEN:USERITEM    overlay hash {e, o, s} (LEN = byte length of USER), PX OverlayTTL
//	l:NAME:KEY        token bucket hash {t, l}, expires once it would be full
//
// Concurrency: a Store and the values it hands out are safe for concurrent
// use; the compare-and-set of the overlay and the token bucket are single Lua
// scripts, so they are atomic in Redis.
package rediscache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrUnavailable is returned without contacting Redis while the circuit
// breaker is open.
var ErrUnavailable = errors.New("rediscache: redis unavailable (circuit open)")

// Config configures a Store. Zero values take the documented defaults.
type Config struct {
	// Addr is Redis's host:port (required).
	Addr     string
	Username string
	Password string
	DB       int
	// TLS, when set, encrypts the connections (Redis's tls-port).
	TLS *tls.Config
	// Prefix is prepended to every key (default "likes:").
	Prefix string
	// Timeout bounds each call, including the dial of a new connection and
	// the wait for a pooled one (default 100ms). Calls are never retried.
	Timeout time.Duration
	// PoolSize is the connection pool size (default: go-redis's, 10 per CPU).
	PoolSize int
	// BreakAfter consecutive transport failures open the circuit (default 5).
	BreakAfter int
	// BreakFor is how long an open circuit fails calls at once before one
	// probe goes through (default 1s).
	BreakFor time.Duration
	// CacheTTL is how long a count cache entry lives (default 1m).
	CacheTTL time.Duration
	// OverlayTTL is how long an overlay entry lives (default 30s).
	OverlayTTL time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if strings.TrimSpace(c.Addr) == "" {
		return c, errors.New("rediscache: Config.Addr is required")
	}
	if c.Prefix == "" {
		c.Prefix = "likes:"
	}
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d < 0 {
			return fmt.Errorf("rediscache: Config.%s must not be negative, got %v", name, *d)
		}
		if *d == 0 {
			*d = v
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{
		{&c.Timeout, 100 * time.Millisecond, "Timeout"},
		{&c.BreakFor, time.Second, "BreakFor"},
		{&c.CacheTTL, time.Minute, "CacheTTL"},
		{&c.OverlayTTL, 30 * time.Second, "OverlayTTL"},
	} {
		if err := def(f.d, f.v, f.name); err != nil {
			return c, err
		}
	}
	if c.Timeout < time.Millisecond || c.CacheTTL < time.Millisecond || c.OverlayTTL < time.Millisecond {
		return c, errors.New("rediscache: Timeout, CacheTTL and OverlayTTL must be at least 1ms")
	}
	if c.PoolSize < 0 || c.DB < 0 {
		return c, errors.New("rediscache: PoolSize and DB must not be negative")
	}
	if c.BreakAfter < 0 {
		return c, fmt.Errorf("rediscache: Config.BreakAfter must not be negative, got %d", c.BreakAfter)
	}
	if c.BreakAfter == 0 {
		c.BreakAfter = 5
	}
	return c, nil
}

// Store is one Redis connection pool and the roles served from it.
type Store struct {
	cfg Config
	rdb *redis.Client
	br  breaker
}

// Open validates cfg and returns a Store. It does not dial: Redis may be down
// when the process starts, and comes into use when it is up (see Ping).
func Open(cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:                  cfg.Addr,
		Username:              cfg.Username,
		Password:              cfg.Password,
		DB:                    cfg.DB,
		TLSConfig:             cfg.TLS,
		PoolSize:              cfg.PoolSize,
		MaxRetries:            -1, // a retry doubles what a dead Redis costs
		DialerRetries:         1,
		DialTimeout:           cfg.Timeout,
		ReadTimeout:           cfg.Timeout,
		WriteTimeout:          cfg.Timeout,
		PoolTimeout:           cfg.Timeout,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true, // no CLIENT SETINFO round trip per connection
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	return &Store{cfg: cfg, rdb: rdb, br: breaker{after: int32(cfg.BreakAfter), cool: cfg.BreakFor, now: time.Now}}, nil
}

// Config returns the configuration in force (defaults filled in).
func (s *Store) Config() Config { return s.cfg }

// Ping checks that Redis answers within Timeout.
func (s *Store) Ping(ctx context.Context) error {
	return s.do(ctx, func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() })
}

// Close closes the connection pool. Idempotent enough: a second Close
// returns go-redis's "client is closed" error.
func (s *Store) Close() error { return s.rdb.Close() }

// do runs f under the breaker with the per-call timeout.
func (s *Store) do(ctx context.Context, f func(ctx context.Context) error) error {
	if !s.br.allow() {
		return ErrUnavailable
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := f(cctx)
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		s.br.success()
	case isReply(err):
		// Redis answered (e.g. a script error): the transport is fine.
		s.br.success()
	case ctx.Err() != nil:
		// The caller gave up; that says nothing about Redis.
	default:
		s.br.failure()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("rediscache: %w", err)
	}
	return err
}

func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// breaker is a consecutive-failure circuit breaker. Closed: calls go
// through. After `after` consecutive failures it opens for `cool`; the first
// call after that is a probe (the window is pushed forward so the others
// still fail fast) and closes it again on success.
type breaker struct {
	after     int32
	cool      time.Duration
	now       func() time.Time
	fails     atomic.Int32
	openUntil atomic.Int64 // UnixNano; 0 = closed
}

func (b *breaker) allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	now := b.now().UnixNano()
	if now < until {
		return false
	}
	return b.openUntil.CompareAndSwap(until, now+int64(b.cool))
}

func (b *breaker) success() {
	b.fails.Store(0)
	b.openUntil.Store(0)
}

func (b *breaker) failure() {
	if b.fails.Add(1) >= b.after {
		b.openUntil.Store(b.now().Add(b.cool).UnixNano())
	}
}

// ms rounds d up to whole milliseconds, at least 1 (PX takes milliseconds).
func ms(d time.Duration) int64 {
	m := (d + time.Millisecond - 1) / time.Millisecond
	return max(1, int64(m))
}
