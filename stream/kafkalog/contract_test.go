package kafkalog

import (
	"context"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
)

// syncLog is the Kafka Log as a tailer right behind the relay sees it: each
// Read first has the relay publish what the source holds at that moment. The
// suite's tailer stops when a round finds nothing new after the writers
// finished, which an asynchronous relay could not promise; the background
// loops keep running too, so Flush and the loops race over the same
// partitions, as they may in production.
type syncLog struct {
	*Log
	relay *Relay
}

func (s syncLog) Read(ctx context.Context, p uint32, after uint64, max int) ([]edge.Event, pipeline.Head, error) {
	if err := s.relay.FlushPartition(ctx, p); err != nil {
		return nil, pipeline.Head{}, err
	}
	return s.Log.Read(ctx, p, after, max)
}

// placementless hides the source position an Apply reports: in Kafka an event
// gets its position (offset + 1) when the relay publishes it, so the source's
// position is not the Log's. Everything else (event time included) is checked.
type placementless struct{ edge.Store }

func (s placementless) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	d, err := s.Store.Apply(ctx, req)
	if d.Event != nil {
		ev := *d.Event
		ev.Partition, ev.Pos = 0, 0
		d.Event = &ev
	}
	return d, err
}

// The shared contract suite: the Pebble store is the outbox the relay reads and
// the CellStore; the Log under test is the Kafka topic.
func TestContract(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct {
			name  string
			parts int
			fake  bool
		}{{"p1-fake", 1, true}, {"p4-fake", 4, true}, {"p3-real", 3, false}} {
			t.Run(tc.name, func(t *testing.T) {
				pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness {
					var fake *clock.Fake
					var clk clock.Clock = clock.Real{}
					if tc.fake {
						fake = clock.NewFake(time.UnixMilli(t0))
						clk = fake
					}
					src := openSource(t, tc.parts, clk)
					cfg := testConfig(t, b, tc.parts)
					relay := newRelay(t, cfg, src)
					l := newLog(t, cfg)
					return pipelinetest.Harness{
						Store: placementless{src}, Log: syncLog{l, relay}, Cells: src, Counts: src,
						Region: src.Region(), Clock: fake,
					}
				})
			})
		}
	})
}
