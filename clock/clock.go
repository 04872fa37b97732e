package clock

import (
	"sync"
	"time"
)

// Clock is the time source of every component that needs one.
type Clock interface {
	Now() time.Time
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of time.Ticker the components use.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Fake is a manual clock. Its tickers fire when Advance passes their period.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves time forward by d and fires due tickers (without blocking: a
// ticker whose channel is full drops the tick, as time.Ticker does).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	ts := append([]*fakeTicker(nil), f.tickers...)
	f.mu.Unlock()
	for _, t := range ts {
		t.fire(now)
	}
}

// NewTicker returns a ticker driven by Advance.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTicker{c: make(chan time.Time, 1), period: d, next: f.now.Add(d), owner: f}
	f.tickers = append(f.tickers, t)
	return t
}

type fakeTicker struct {
	mu      sync.Mutex
	c       chan time.Time
	period  time.Duration
	next    time.Time
	stopped bool
	owner   *Fake
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }

func (t *fakeTicker) Stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

func (t *fakeTicker) fire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || now.Before(t.next) {
		return
	}
	for !now.Before(t.next) {
		t.next = t.next.Add(t.period)
	}
	select {
	case t.c <- now:
	default:
	}
}
