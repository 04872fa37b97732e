package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/replica"
)

// readFrom reads partition p of l after `after` to its end, in small pages,
// checking order and heads.
func readFrom(t *testing.T, l *Log, p uint32, after uint64) []edge.Event {
	t.Helper()
	var all []edge.Event
	for {
		evs, h, err := l.Read(context.Background(), p, after, 7)
		if err != nil {
			t.Fatalf("Read(%d, %d): %v", p, after, err)
		}
		for _, ev := range evs {
			if ev.Partition != p || ev.Pos <= after || ev.Pos > h.Pos {
				t.Fatalf("Read(%d, %d): event %d/%d with head %d", p, after, ev.Partition, ev.Pos, h.Pos)
			}
			after = ev.Pos
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
	}
}

// With a PositionBase every position is offset + 1 + base: events in order,
// any position below the base reads the whole partition, a position at an
// event reads what follows it, Head.Pos and EndPositions are base + end, and
// a reader that starts at EndPositions sees only what is produced after. With
// base 0 the same holds with Pos = offset + 1 (today's positions).
func TestPositionBase(t *testing.T) {
	for _, base := range []uint64{0, 1 << 40} {
		t.Run(fmt.Sprintf("base=%d", base), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				testPositionBase(t, b, base)
			})
		})
	}
}

func testPositionBase(t *testing.T, b backend, base uint64) {
	ctx := context.Background()
	const parts = 2
	clk := clock.NewFake(time.UnixMilli(t0))
	src := openSource(t, parts, clk)
	cfg := testConfig(t, b, parts)
	cfg.PositionBase = base
	cfg.FetchMaxBytes = 1024 // crossing the heartbeats below takes several fetches
	l := newLog(t, cfg)

	ends, err := l.EndPositions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p, e := range ends {
		if e != base {
			t.Fatalf("empty partition %d: EndPositions %d, want the base %d", p, e, base)
		}
		evs, h, err := l.Read(ctx, uint32(p), 0, 10)
		if err != nil || len(evs) != 0 || h.Pos != base {
			t.Fatalf("empty partition %d: Read(0) = %v, %+v, %v; want nothing, head %d", p, evs, h, err, base)
		}
	}

	r := newRelay(t, cfg, src)
	w := newWorkload(src, clk, 5)
	w.run(t, 80)
	flush(t, r)
	_ = r.Close() // nothing may move the ends while they are measured
	checkSameLog(t, src, l)

	// Partition 0 ends with one batch holding a copy of its last event (as a
	// relay retry would publish) and heartbeats, then heartbeat batches each
	// bigger than a fetch.
	rel, err := l.Relayed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srcEvs := pipelinetest.ReadAll(t, src, 0, 1000)
	raw := rawProducer(t, cfg)
	mixed := []*kgo.Record{eventRecord(cfg.Topic, srcEvs[len(srcEvs)-1])}
	for j := range 50 {
		mixed = append(mixed, heartbeatRecord(cfg.Topic, 0, rel[0], t0+int64(j)))
	}
	produce(t, raw, mixed...)
	for i := 1; i <= 4; i++ {
		var rs []*kgo.Record
		for j := range 50 {
			rs = append(rs, heartbeatRecord(cfg.Topic, 0, rel[0], t0+int64(50*i+j)))
		}
		produce(t, raw, rs...)
	}

	offsets := make([][]int64, parts) // the offsets of event records
	for _, rec := range readTopic(t, cfg, cfg.Topic) {
		if len(rec.Value) != 0 {
			offsets[rec.Partition] = append(offsets[rec.Partition], rec.Offset)
		}
	}
	if ends, err = l.EndPositions(ctx); err != nil {
		t.Fatal(err)
	}
	srcHeads := make([]uint64, parts)
	for p := range parts {
		all := readFrom(t, l, uint32(p), 0)
		if len(all) != len(offsets[p]) || len(all) < 3 {
			t.Fatalf("partition %d: read %d events, the topic holds %d (want at least 3)", p, len(all), len(offsets[p]))
		}
		for i, ev := range all {
			if want := uint64(offsets[p][i]) + 1 + base; ev.Pos != want {
				t.Fatalf("partition %d event %d: Pos %d, want offset %d + 1 + base %d = %d", p, i, ev.Pos, offsets[p][i], base, want)
			}
		}
		_, end, err := l.f.bounds(ctx, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		if ends[p] != uint64(end)+base {
			t.Fatalf("partition %d: EndPositions %d, want end %d + base %d", p, ends[p], end, base)
		}
		last := all[len(all)-1].Pos
		evs, h, err := l.Read(ctx, uint32(p), last, 10)
		if err != nil || len(evs) != 0 || h.Pos != uint64(end)+base {
			t.Fatalf("partition %d: Read after the last event: %v, %+v, %v; want nothing, head %d + %d", p, evs, h, err, end, base)
		}

		// Each position reads the events after it.
		afters := []uint64{0, all[len(all)/2].Pos, last}
		if base > 0 {
			afters = append(afters, base/2, base-1, base)
		}
		for _, after := range afters {
			k := 0
			for k < len(all) && all[k].Pos <= after {
				k++
			}
			got := readFrom(t, l, uint32(p), after)
			if len(got) != len(all)-k {
				t.Fatalf("partition %d: Read after %d: %d events, want %d", p, after, len(got), len(all)-k)
			}
			for i := range got {
				if got[i].Pos != all[k+i].Pos || !sameEvent(got[i], all[k+i]) {
					t.Fatalf("partition %d: Read after %d, event %d: %+v, want %+v", p, after, i, got[i], all[k+i])
				}
			}
		}
		_, sh, err := src.Read(ctx, uint32(p), math.MaxUint64, 1)
		if err != nil {
			t.Fatal(err)
		}
		srcHeads[p] = sh.Pos
	}

	// The skip cache works in offsets: a Read that returns the last event
	// remembers the heartbeats its fetch crossed after it, the next Read
	// after that event starts past them and crosses the rest, and a third
	// starts at the end.
	n0 := len(offsets[0])
	last0 := uint64(offsets[0][n0-1]) + 1 + base
	skip := func() (int64, int64) {
		l.parts[0].mu.Lock()
		defer l.parts[0].mu.Unlock()
		return l.parts[0].skipFrom, l.parts[0].skipTo
	}
	l.parts[0].mu.Lock()
	l.parts[0].skipFrom = -1 // forget what the reads above learnt
	l.parts[0].mu.Unlock()
	if evs, _, err := l.Read(ctx, 0, uint64(offsets[0][n0-2])+1+base, 10); err != nil || len(evs) != 1 || evs[0].Pos != last0 {
		t.Fatalf("Read of the last event: %v, %v", evs, err)
	}
	if from, to := skip(); from != int64(last0-base) || to <= from || uint64(to)+base >= ends[0] {
		t.Fatalf("skip cache [%d, %d) after the last event's Read, want [%d, below %d)", from, to, last0-base, ends[0]-base)
	}
	f0 := l.Stats().Fetches
	if evs, _, err := l.Read(ctx, 0, last0, 10); err != nil || len(evs) != 0 {
		t.Fatalf("Read after the last event: %v, %v", evs, err)
	}
	f1 := l.Stats().Fetches
	if f1-f0 < 2 {
		t.Fatalf("crossing 200 heartbeats in 1 KiB fetches took %d fetches", f1-f0)
	}
	if from, to := skip(); from != int64(last0-base) || uint64(to)+base != ends[0] {
		t.Fatalf("skip cache [%d, %d), want offsets [%d, %d)", from, to, last0-base, ends[0]-base)
	}
	if evs, h, err := l.Read(ctx, 0, last0, 10); err != nil || len(evs) != 0 || h.Pos != ends[0] {
		t.Fatalf("repeated Read after the last event: %v, %+v, %v", evs, h, err)
	}
	if n := l.Stats().Fetches - f1; n != 1 {
		t.Fatalf("a repeated Read at the end took %d fetches, want 1 (skip cache)", n)
	}

	// Positions beyond the end, or beyond any offset, are errors.
	if _, _, err := l.Read(ctx, 0, ends[0]+5, 10); !errors.Is(err, errOutOfRange) {
		t.Fatalf("Read beyond the end: %v", err)
	}
	if _, _, err := l.Read(ctx, 0, math.MaxUint64, 10); err == nil || !strings.Contains(err.Error(), "beyond any Kafka offset") {
		t.Fatalf("Read after MaxUint64: %v", err)
	}

	// An aggregator-style loop from EndPositions finds only what comes later.
	for p := range parts {
		evs, h, err := l.Read(ctx, uint32(p), ends[p], 10)
		if err != nil || len(evs) != 0 || h.Pos != ends[p] {
			t.Fatalf("partition %d: Read at EndPositions: %v, %+v, %v", p, evs, h, err)
		}
	}
	r2 := newRelay(t, cfg, src)
	w.run(t, 40)
	flush(t, r2)
	fresh := 0
	for p := range parts {
		var want []edge.Event
		for _, ev := range pipelinetest.ReadAll(t, src, uint32(p), 1000) {
			if ev.Pos > srcHeads[p] {
				want = append(want, ev)
			}
		}
		got := readFrom(t, l, uint32(p), ends[p])
		if len(got) != len(want) {
			t.Fatalf("partition %d: %d events after EndPositions, the source appended %d", p, len(got), len(want))
		}
		for i := range want {
			if !sameEvent(got[i], want[i]) {
				t.Fatalf("partition %d index %d: %+v, want %+v", p, i, got[i], want[i])
			}
		}
		fresh += len(got)
	}
	if fresh == 0 {
		t.Fatal("the workload appended nothing")
	}
	_ = l.Close()
	if _, err := l.EndPositions(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("EndPositions after Close: %v", err)
	}
}

func TestConfigValidatePositionBase(t *testing.T) {
	if MaxPositionBase+uint64(1)<<60 > replica.MaxHWM {
		t.Fatalf("MaxPositionBase %d leaves less than 2^60 positions below replica.MaxHWM", uint64(MaxPositionBase))
	}
	ok := Config{PositionBase: MaxPositionBase}
	if err := ok.Validate(); err != nil {
		t.Fatalf("PositionBase = MaxPositionBase: %v", err)
	}
	bad := Config{PositionBase: MaxPositionBase + 1}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "PositionBase") {
		t.Fatalf("PositionBase = MaxPositionBase + 1: %v", err)
	}
}

// flooredLog is a one-partition source whose events are all above its floor
// and which refuses reads below it, as a store rebuilt (or cut by retention)
// looks to a relay: Read after a position below LogFloor fails with
// ErrTruncated. It never changes, so concurrent reads need no lock.
type flooredLog struct {
	floor uint64
	evs   []edge.Event // Pos ascending, all above floor
}

func newFlooredLog(floor uint64, positions ...uint64) *flooredLog {
	s := &flooredLog{floor: floor}
	for _, pos := range positions {
		user := fmt.Sprint("u", pos)
		s.evs = append(s.evs, edge.Event{Partition: 0, Pos: pos, Item: "i", User: user, Bucket: edge.BucketOf(user),
			Version: crdt.Version{Epoch: 1, Op: pos}, State: crdt.Liked, Delta: 1, EventTime: t0 + int64(pos), Kind: edge.KindFlip})
	}
	return s
}

func (s *flooredLog) Partitions() int { return 1 }

func (s *flooredLog) LogFloor(_ context.Context, p uint32) (uint64, error) {
	if p != 0 {
		return 0, fmt.Errorf("flooredLog: partition %d", p)
	}
	return s.floor, nil
}

func (s *flooredLog) Read(_ context.Context, p uint32, after uint64, limit int) ([]edge.Event, pipeline.Head, error) {
	if p != 0 {
		return nil, pipeline.Head{}, fmt.Errorf("flooredLog: partition %d", p)
	}
	if after < s.floor {
		return nil, pipeline.Head{}, pipeline.ErrTruncated
	}
	h := pipeline.Head{Pos: s.floor, CompleteThrough: t0 + int64(s.floor)}
	if n := len(s.evs); n > 0 {
		h = pipeline.Head{Pos: s.evs[n-1].Pos, CompleteThrough: s.evs[n-1].EventTime}
	}
	var out []edge.Event
	for _, ev := range s.evs {
		if ev.Pos > after && len(out) < limit {
			out = append(out, ev)
		}
	}
	return out, h, nil
}

// A relay over a source whose floor is above the topic's last src-pos (a
// source rebuilt behind its old topic) resumes at the floor: it publishes
// what lies above it once and does not loop on ErrTruncated. Without
// LogFloor the relay reads below the floor and fails, as before.
func TestRelayResumesAtSourceFloor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		cfg := testConfig(t, b, 1)
		l := newLog(t, cfg)
		old := newFlooredLog(0, 1, 2, 3, 4, 5)
		r1 := newRelay(t, cfg, old)
		flush(t, r1)
		_ = r1.Close()

		rebuilt := newFlooredLog(100, 101, 102, 103)

		// Without LogFloor: resume at src-pos 5, fail, resume at 5 again.
		hidden := newRelay(t, cfg, struct{ pipeline.Log }{rebuilt})
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := hidden.Flush(fctx)
		cancel()
		if !errors.Is(err, pipeline.ErrTruncated) {
			t.Fatalf("Flush over a truncated source without LogFloor: %v, want ErrTruncated", err)
		}
		waitFor(t, "the relay without LogFloor to retry", 30*time.Second, func() bool {
			st := hidden.Stats()[0]
			return st.Resumes >= 3 && st.SourcePos == 5 && st.Events == 0
		})
		_ = hidden.Close()

		var errs []error
		cfg.OnError = func(_ uint32, err error) { errs = append(errs, err) } // one partition: one loop goroutine
		r2 := newRelay(t, cfg, rebuilt)
		waitFor(t, "the relay to publish above the floor", 30*time.Second, func() bool {
			return r2.Stats()[0].SourcePos == 103
		})
		flush(t, r2)
		_ = r2.Close()
		if st := r2.Stats()[0]; st.Resumes != 1 || st.Errors != 0 || st.Events != 3 {
			t.Fatalf("relay stats %+v (errors %v): want one resume, no error, 3 events", st, errs)
		}
		got := pipelinetest.ReadAll(t, l, 0, 10)
		want := append(append([]edge.Event(nil), old.evs...), rebuilt.evs...)
		if len(got) != len(want) {
			t.Fatalf("the topic holds %d events, want %d", len(got), len(want))
		}
		for i := range want {
			if !sameEvent(got[i], want[i]) {
				t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
			}
		}
		rel, err := l.Relayed(ctx)
		if err != nil || rel[0] != 103 {
			t.Fatalf("Relayed = %v, %v; want [103]", rel, err)
		}
	})
}
