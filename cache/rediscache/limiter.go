package rediscache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/likes-dev/likes/clock"
)

// LimiterConfig configures a Limiter.
type LimiterConfig struct {
	// Name separates limiters sharing one Redis ("user", "ip"); letters,
	// digits, '-' and '_' only.
	Name string
	// Rate is tokens per second; <= 0 disables limiting (every call passes
	// without contacting Redis).
	Rate float64
	// Burst is the bucket size (values < 1 mean 1).
	Burst int
	// Clock, when set, is the time source (tests pass a fake clock). Nil uses
	// Redis's own clock (TIME inside the script), so processes whose clocks
	// disagree still share one bucket consistently.
	Clock clock.Clock
}

// Limiter is a token bucket per key in Redis, with the in-process
// limiter's semantics: Burst tokens at most, Rate per second refill, a refused
// call takes nothing and says how long until a token is available.
type Limiter struct {
	s     *Store
	cfg   LimiterConfig
	burst float64
	ttl   int64 // ms: a bucket idle this long is full, so it may vanish
}

// Limiter returns a rate limiter of s. It implements api.Limiter.
func (s *Store) Limiter(cfg LimiterConfig) (*Limiter, error) {
	if cfg.Name == "" || strings.IndexFunc(cfg.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return nil, fmt.Errorf("rediscache: limiter name %q: want letters, digits, '-' or '_'", cfg.Name)
	}
	if math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) {
		return nil, fmt.Errorf("rediscache: limiter rate %v", cfg.Rate)
	}
	burst := float64(max(1, cfg.Burst))
	var ttl int64
	if cfg.Rate > 0 {
		// Time to refill completely, plus a margin for clock disagreement.
		ttl = int64(math.Ceil(burst/cfg.Rate*1000)) + 60_000
	}
	return &Limiter{s: s, cfg: cfg, burst: burst, ttl: ttl}, nil
}

// limiterAllow is the token bucket. Time is in microseconds: ARGV[3], or
// Redis's TIME when it is empty. The bucket never refills backwards (a caller
// whose clock is behind the last one sees no refill, not a negative one).
// KEYS[1] = bucket; ARGV = rate (tokens/s), burst, now µs or "", ttl ms.
// Returns {1, 0} when allowed, else {0, µs until a token}.
var limiterAllow = redis.NewScript(`
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3])
end
local b = redis.call('HMGET', KEYS[1], 't', 'l')
local tokens, last = burst, now
if b[1] and b[2] then
  tokens = tonumber(b[1])
  last = tonumber(b[2])
end
if now > last then
  tokens = math.min(burst, tokens + (now - last) / 1000000 * rate)
  last = now
end
local ok, wait = 0, 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
else
  wait = math.ceil((1 - tokens) / rate * 1000000)
end
redis.call('HSET', KEYS[1], 't', string.format('%.17g', tokens), 'l', string.format('%d', last))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {ok, wait}
`)

// Allow takes one token for key, or says how long until one is available.
// An error (Redis down) is for the caller to decide on; api fails open.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, time.Duration, error) {
	if l.cfg.Rate <= 0 {
		return true, 0, nil
	}
	now := ""
	if l.cfg.Clock != nil {
		now = strconv.FormatInt(l.cfg.Clock.Now().UnixMicro(), 10)
	}
	var res []int64
	err := l.s.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = limiterAllow.Run(ctx, l.s.rdb, []string{l.s.cfg.Prefix + "l:" + l.cfg.Name + ":" + key},
			strconv.FormatFloat(l.cfg.Rate, 'g', -1, 64), strconv.FormatFloat(l.burst, 'g', -1, 64), now, l.ttl).Int64Slice()
		return err
	})
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, errors.New("rediscache: limiter script answered the wrong shape")
	}
	return res[0] == 1, time.Duration(res[1]) * time.Microsecond, nil
}
