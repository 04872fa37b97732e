package kafkalog

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

// truncatingSource fails the next read of a partition with ErrTruncated when
// armed, as a source another relay let retention cut looks to a relay behind.
type truncatingSource struct {
	pipeline.Log
	armed atomic.Bool
}

func (s *truncatingSource) Read(ctx context.Context, p uint32, after uint64, max int) ([]edge.Event, pipeline.Head, error) {
	if after != math.MaxUint64 && s.armed.CompareAndSwap(true, false) {
		return nil, pipeline.Head{}, pipeline.ErrTruncated
	}
	return s.Log.Read(ctx, p, after, max)
}

// Log.Relayed is the bound of the source's retention when the aggregators
// read Kafka: it is what the relay published, partition by partition (a
// partition never published: 0); a retention round below it truncates the
// source with no aggregator position at all (the aggregators' positions are
// Kafka offsets), keeps dedupe state, and everything stays in the topic. A
// relay that finds the source truncated under it reloads its position from
// Kafka instead of failing forever.
func TestRelayedBoundsSourceRetention(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clock.NewFake(time.UnixMilli(t0))
		src := openSource(t, 3, clk)
		cfg := testConfig(t, b, 3)
		cfg.MaxBatch = 9
		l := newLog(t, cfg)
		rel, err := l.Relayed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p, pos := range rel {
			if pos != 0 {
				t.Fatalf("empty topic: partition %d relayed through %d", p, pos)
			}
		}
		ts := &truncatingSource{Log: src}
		r := newRelay(t, cfg, ts)
		w := newWorkload(src, clk, 11)
		w.run(t, 120)
		flush(t, r)
		ts.armed.Store(true)
		w.run(t, 60)
		for p := range 3 {
			r.Kick(uint32(p))
		}
		waitFor(t, "the relay to reload its position after a truncated read", 30*time.Second, func() bool {
			var n uint64
			for _, st := range r.Stats() {
				n += st.Resumes
			}
			return n >= 4 && !ts.armed.Load()
		})
		flush(t, r)
		checkSameLog(t, src, l)
		heads := make([]uint64, 3)
		total := uint64(0)
		for p := range heads {
			_, h, err := src.Read(ctx, uint32(p), math.MaxUint64, 1)
			if err != nil {
				t.Fatal(err)
			}
			heads[p] = h.Pos
			total += h.Pos
		}
		if rel, err = l.Relayed(ctx); err != nil {
			t.Fatal(err)
		}
		for p := range heads {
			if rel[p] != heads[p] {
				t.Fatalf("partition %d: relayed through %d, source head %d", p, rel[p], heads[p])
			}
		}
		in := pebblestore.RetentionRound{Now: clk.Now().Add(2 * time.Hour), Horizon: time.Hour, Log: true, Relayed: rel}
		st, err := src.Retain(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if st.LogDeleted != total || st.DedupeDeleted != 0 {
			t.Fatalf("round %+v: want %d log events deleted below the relayed positions and no dedupe pruned", st, total)
		}
		for p := range heads {
			if _, _, err := src.Read(ctx, uint32(p), 0, 1); err == nil {
				t.Fatalf("partition %d: read below the floor succeeded", p)
			}
			if got := len(pipelinetest.ReadAll(t, l, uint32(p), 50)); uint64(got) != heads[p] {
				t.Fatalf("partition %d: the topic holds %d events, want %d", p, got, heads[p])
			}
		}
		// Nothing relayed yet is cut: new events stay until published.
		w.run(t, 30)
		in.Relayed = rel
		if st, err = src.Retain(ctx, in); err != nil || st.LogDeleted != 0 {
			t.Fatalf("round after new events: %+v, %v: want nothing deleted above the relayed positions", st, err)
		}
		flush(t, r)
		if rel, err = l.Relayed(ctx); err != nil {
			t.Fatal(err)
		}
		in.Relayed = rel
		if st, err = src.Retain(ctx, in); err != nil || st.LogDeleted == 0 {
			t.Fatalf("round after the relay caught up: %+v, %v: want the new events deleted", st, err)
		}
	})
}
