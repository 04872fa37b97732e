package inproc_test

import (
	"testing"
	"time"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/cache/cachetest"
	"github.com/likes-dev/likes/cache/inproc"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
)

var _ api.Limiter = (*inproc.Limiter)(nil)

// TestContract runs the shared contract of the caching roles (cache/cachetest)
// against the in-process implementations, on a fake clock: every TTL boundary
// is checked to the millisecond.
func TestContract(t *testing.T) {
	t.Run("Cache", func(t *testing.T) {
		cachetest.RunCache(t, func(t *testing.T, ttl time.Duration) (counts.Cache, cachetest.Clock) {
			clk := clock.NewFake(cachetest.T0)
			return inproc.NewCache(clk, ttl), cachetest.FakeClock(clk)
		})
	})
	t.Run("Overlay", func(t *testing.T) {
		cachetest.RunOverlay(t, func(t *testing.T, ttl time.Duration) (edge.Overlay, cachetest.Clock) {
			clk := clock.NewFake(cachetest.T0)
			return inproc.NewOverlay(clk, ttl), cachetest.FakeClock(clk)
		})
	})
	t.Run("Limiter", func(t *testing.T) {
		cachetest.RunLimiter(t, func(t *testing.T, clk clock.Clock, rate float64, burst int) cachetest.Limiter {
			return inproc.NewLimiter(clk, rate, burst)
		})
	})
}
