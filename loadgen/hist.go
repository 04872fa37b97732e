package loadgen

import (
	"math/bits"
	"time"
)

// Histogram is a fixed-size log-linear histogram of non-negative durations
// recorded in microseconds, in the spirit of HdrHistogram: values below 64 µs
// are exact; above, each power of two is split into 64 linear buckets, so a
// quantile is within ~1.6 % of the true value (reported at the bucket midpoint).
// Max, min and sum are exact. The zero value is ready to use; it is not safe for
// concurrent use (give each goroutine its own and Merge them).
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    uint64 // µs
	min    uint64
	max    uint64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histMaxExp  = 40 // 2^40 µs ≈ 12.7 days; larger values are clamped
	histBuckets = (histMaxExp - histSubBits + 2) * histSub
)

func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - 1
	if e > histMaxExp {
		return histBuckets - 1
	}
	shift := e - histSubBits
	return (shift+1)*histSub + int(v>>shift) - histSub
}

// histValue is the midpoint of bucket i, in µs.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	shift := i/histSub - 1
	sub := uint64(i%histSub + histSub)
	lo := sub << shift
	return lo + (uint64(1)<<shift)/2
}

// Record adds one duration (negative durations count as zero).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(0, d.Microseconds()))
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

// Merge adds o's samples into h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest sample.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) * time.Microsecond }

// Mean is the mean sample.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum/h.n) * time.Microsecond
}

// Quantile returns the q-quantile (0 <= q <= 1), clamped to [min, max].
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := min(max(histValue(i), h.min), h.max)
			return time.Duration(v) * time.Microsecond
		}
	}
	return h.Max()
}
