package kafkalog

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
)

// readCounter is a source log that counts the relay's reads.
type readCounter struct {
	pipeline.Log
	reads atomic.Int64
}

func (c *readCounter) Read(ctx context.Context, p uint32, after uint64, limit int) ([]edge.Event, pipeline.Head, error) {
	c.reads.Add(1)
	return c.Log.Read(ctx, p, after, limit)
}

// With a linger, the writes that wake a partition's relay close together go
// out in one source read (and one produce), not one each; without, each kick
// may cost a read. Every event is published either way.
func TestRelayLingerGathersKickedWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		src := openSource(t, 1, nil)
		counted := &readCounter{Log: src}
		cfg := testConfig(t, b, 1)
		cfg.PollInterval = time.Hour // only kicks wake the relay
		cfg.Linger = time.Second
		r := newRelay(t, cfg, counted)
		write := func(i int) {
			req := edgetest.Like(fmt.Sprintf("item-%d", i), "u", fmt.Sprintf("k%d", i), 1, t0+int64(i))
			if _, err := src.Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			r.Kick(0)
		}
		published := func() uint64 { return r.Stats()[0].SourcePos }
		write(0)
		waitFor(t, "the first event published", 30*time.Second, func() bool { return published() >= 1 })
		before := counted.reads.Load()
		const burst = 10
		for i := 1; i <= burst; i++ {
			write(i)
		}
		waitFor(t, "the burst published", 30*time.Second, func() bool { return published() >= burst+1 })
		if n := counted.reads.Load() - before; n > 2 {
			t.Errorf("%d source reads for %d writes kicked within the linger, want at most 2", n, burst)
		}
	})
}
