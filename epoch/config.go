package epoch

import (
	"fmt"
	"strings"
	"time"
)

// Defaults of Config.
const (
	DefaultPrefix  = "/likes/"
	DefaultRanges  = 256
	DefaultTTL     = 5 * time.Second
	DefaultMargin  = 1 * time.Second
	DefaultMaxSkew = 500 * time.Millisecond
	// MaxRanges is the largest range count the 5-digit pin keys can hold.
	MaxRanges = 100000
)

// Config is the timing and layout shared by every component of the package.
// The zero value of a field means its default.
type Config struct {
	// Prefix is the etcd key prefix of every key (default "/likes/"; must
	// start and end with "/"). Tests use a fresh prefix to share one etcd.
	Prefix string
	// Ranges is R, the number of user ranges (default 256, at most 100000).
	// It is fixed at cluster creation: Directory.Init refuses another value.
	Ranges int
	// TTL is the region lease TTL (default 5s; a whole number of seconds,
	// at least 1s, because etcd leases count seconds). etcd may raise a very
	// short TTL to its own minimum (1.5 election timeouts); that only makes the
	// lease outlive the holder's own TTL − Margin limit, which stays safe.
	TTL time.Duration
	// Margin is the safety margin (default 1s; 0 < Margin < TTL): a node
	// stops writing once its proof is TTL − Margin old.
	Margin time.Duration
	// MaxSkew is the assumed bound on clock skew between regions (default
	// 500ms). Moves set notBefore = now + TTL + MaxSkew.
	MaxSkew time.Duration
}

// WithDefaults fills zero fields with their defaults and validates the result.
func (c Config) WithDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Ranges == 0 {
		c.Ranges = DefaultRanges
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = DefaultMaxSkew
	}
	switch {
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return c, fmt.Errorf("epoch: Prefix %q must start and end with /", c.Prefix)
	case c.Ranges < 1 || c.Ranges > MaxRanges:
		return c, fmt.Errorf("epoch: Ranges must be in [1, %d], got %d", MaxRanges, c.Ranges)
	case c.TTL < time.Second || c.TTL%time.Second != 0:
		return c, fmt.Errorf("epoch: TTL must be a whole number of seconds >= 1s, got %v", c.TTL)
	case c.Margin <= 0 || c.Margin >= c.TTL:
		return c, fmt.Errorf("epoch: Margin must be in (0, TTL=%v), got %v", c.TTL, c.Margin)
	case c.MaxSkew < 0:
		return c, fmt.Errorf("epoch: MaxSkew must not be negative, got %v", c.MaxSkew)
	}
	return c, nil
}

// NotBefore is the earliest time a range moved at now may be written by its
// new owner: now + TTL + MaxSkew.
func (c Config) NotBefore(now time.Time) time.Time { return now.Add(c.TTL + c.MaxSkew) }

// ttlSeconds is the TTL as etcd lease seconds.
func (c Config) TTLSeconds() int64 { return int64(c.TTL / time.Second) }

func (c Config) PinsPrefix() string    { return c.Prefix + "pins/" }
func (c Config) RegionsPrefix() string { return c.Prefix + "regions/" }
func (c Config) RangesKey() string     { return c.Prefix + "meta/ranges" }
func (c Config) HomesKey() string      { return c.Prefix + "meta/homes" }
func (c Config) ElectionPrefix() string {
	return c.Prefix + "controller/election/"
}

func (c Config) PinKey(rng uint32) string { return fmt.Sprintf("%s%05d", c.PinsPrefix(), rng) }
func (c Config) RegionKey(name string) string {
	return c.RegionsPrefix() + name
}
