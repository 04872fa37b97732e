package catchup

import (
	"context"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
)

// Loop steps a Barrier on a ticker in its own goroutine.
type Loop struct {
	b      *Barrier
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start runs b every interval (default 100ms) on clk until Close.
func Start(b *Barrier, clk clock.Clock, interval time.Duration) *Loop {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if clk == nil {
		clk = clock.Real{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{b: b, cancel: cancel, done: make(chan struct{})}
	go l.run(ctx, clk, interval)
	return l
}

func (l *Loop) run(ctx context.Context, clk clock.Clock, interval time.Duration) {
	defer close(l.done)
	tick := clk.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			l.b.Step(ctx)
		}
	}
}

// Close stops the loop and waits for it. Idempotent.
func (l *Loop) Close() {
	l.once.Do(func() {
		l.cancel()
		<-l.done
	})
}
