package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

var (
	testItems = []string{"i0", "i1", "i2", "i3", "ü", "日本"}
	testUsers = []string{"a", "b", "c", "d", "e", "f", "g", "ü"}
)

// workload applies n random likes, unlikes, client retries, retractions and
// erasures, advancing the fake clock.
type workload struct {
	s       edge.Store
	clk     *clock.Fake
	rng     *rand.Rand
	history []edge.Request
	i       int
}

func newWorkload(s edge.Store, clk *clock.Fake, seed uint64) *workload {
	return &workload{s: s, clk: clk, rng: rand.New(rand.NewPCG(seed, seed+1))}
}

func (w *workload) run(t testing.TB, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		w.i++
		if w.clk != nil {
			w.clk.Advance(time.Duration(w.rng.IntN(3)) * time.Millisecond)
		}
		now := t0 + int64(w.i)
		item, user := testItems[w.rng.IntN(len(testItems))], testUsers[w.rng.IntN(len(testUsers))]
		key := fmt.Sprintf("k%d", w.i)
		var req edge.Request
		switch r := w.rng.IntN(100); {
		case r < 45:
			req = edgetest.Like(item, user, key, 1, now)
		case r < 80:
			req = edgetest.Unlike(item, user, key, 1, now)
		case r < 95 && len(w.history) > 0:
			req = w.history[w.rng.IntN(len(w.history))] // a client retry
			req.Now = now
		case r < 98:
			req = edgetest.Unlike(item, user, "", 1, now)
			req.Kind = edge.KindRetraction
		default:
			req = edgetest.Erase(item, user, 1, now)
		}
		if _, err := w.s.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
		if req.IdemKey != "" {
			w.history = append(w.history, req)
		}
	}
}

func totalEvents(t *testing.T, l pipeline.Log) int {
	n := 0
	for p := range l.Partitions() {
		n += len(pipelinetest.ReadAll(t, l, uint32(p), 1000))
	}
	return n
}

// Relay + Log: every source event arrives once, in order, in its partition,
// while writers run concurrently with the relay.
func TestRelayDeliversEveryEventOnceInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := clock.NewFake(time.UnixMilli(t0))
		src := openSource(t, 4, clk)
		cfg := testConfig(t, b, 4)
		cfg.MaxBatch = 17
		r := newRelay(t, cfg, src)
		l := newLog(t, cfg)
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				newWorkload(src, nil, uint64(w)).run(t, 200)
			}()
		}
		wg.Wait()
		flush(t, r)
		checkSameLog(t, src, l)
		var published uint64
		for _, st := range r.Stats() {
			published += st.Events
		}
		if want := totalEvents(t, src); published != uint64(want) {
			t.Fatalf("relay produced %d event records, the source holds %d", published, want)
		}
	})
}

// A relay closed mid-stream and a new one started later publish the source
// exactly once: no gap, no duplicate. The position comes from Kafka, whether
// the partition's last record is an event or a heartbeat.
func TestRelayRestartResumesWithoutGaps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := clock.NewFake(time.UnixMilli(t0))
		src := openSource(t, 3, clk)
		cfg := testConfig(t, b, 3)
		cfg.MaxBatch = 5
		l := newLog(t, cfg)
		w := newWorkload(src, clk, 7)

		r1 := newRelay(t, cfg, src)
		w.run(t, 100)
		waitFor(t, "the first relay to publish something", 30*time.Second, func() bool {
			var n uint64
			for _, st := range r1.Stats() {
				n += st.Events
			}
			return n > 0
		})
		w.run(t, 100)
		_ = r1.Close() // mid-stream: it may be in the middle of a batch
		w.run(t, 100)

		r2 := newRelay(t, cfg, src)
		flush(t, r2)
		checkSameLog(t, src, l)

		// Now let an idle heartbeat be every partition's last record.
		clk.Advance(time.Minute)
		want := clk.Now().UnixMilli()
		waitFor(t, "heartbeats", 30*time.Second, func() bool {
			for _, st := range r2.Stats() {
				if st.Watermark < want {
					return false
				}
			}
			return true
		})
		_ = r2.Close()
		for _, rec := range lastRecords(t, cfg) {
			if len(rec.Value) != 0 {
				t.Fatalf("partition %d: last record is not a heartbeat", rec.Partition)
			}
		}
		w.run(t, 100)
		r3 := newRelay(t, cfg, src)
		flush(t, r3)
		checkSameLog(t, src, l)
		for _, st := range r3.Stats() {
			if st.Resumes != 1 {
				t.Fatalf("relay 3 stats %+v: want one resume", st)
			}
		}
	})
}

// lastRecords returns each partition's last record.
func lastRecords(t *testing.T, cfg Config) map[int32]*kgo.Record {
	last := map[int32]*kgo.Record{}
	for _, rec := range readTopic(t, cfg, cfg.Topic) {
		last[rec.Partition] = rec
	}
	return last
}

// positionZero makes fresh aggregators start from position 0 (keeping the
// watermark), as consumers that lost their positions would.
type positionZero struct{ pipeline.CellStore }

func (z positionZero) Position(ctx context.Context, p uint32) (uint64, int64, error) {
	_, wm, err := z.CellStore.Position(ctx, p)
	return 0, wm, err
}

// Duplicates in Kafka (a relay retry republishing what was already published)
// land at new offsets, so the cell fence does not see them; the aggregator's
// (edge, version) dedupe drops them, and every count equals its LIKED edges.
func TestDuplicatePublishAbsorbedByAggregator(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := clock.NewFake(time.UnixMilli(t0))
		src := openSource(t, 4, clk)
		cfg := testConfig(t, b, 4)
		r := newRelay(t, cfg, src)
		l := newLog(t, cfg)
		raw := rawProducer(t, cfg)
		w := newWorkload(src, clk, 11)
		aggs := pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: l, Cells: src, Clock: clk, MaxEvents: 13})
		ctx := context.Background()

		republish := func(fraction int) int {
			n := 0
			for p := range src.Partitions() {
				evs := pipelinetest.ReadAll(t, src, uint32(p), 1000)
				var recs []*kgo.Record
				for i, ev := range evs {
					if i%fraction == 0 {
						recs = append(recs, eventRecord(cfg.Topic, ev))
					}
				}
				if len(recs) > 0 {
					produce(t, raw, recs...)
				}
				n += len(recs)
			}
			return n
		}

		w.run(t, 300)
		flush(t, r)
		for _, a := range aggs {
			for range 3 {
				if _, _, err := a.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		dups := republish(1) // everything again
		w.run(t, 300)
		flush(t, r)
		dups += republish(3) // a third of it once more
		w.run(t, 100)
		flush(t, r)
		pipelinetest.CatchUp(t, aggs)
		pipelinetest.CheckCounts(t, src, src, testItems)

		if got, want := totalEvents(t, l), totalEvents(t, src)+dups; got != want {
			t.Fatalf("Kafka holds %d events, want source + duplicates = %d", got, want)
		}
		var events uint64
		for _, a := range aggs {
			events += a.Stats().Events
		}
		if events != uint64(totalEvents(t, l)) {
			t.Fatalf("aggregators read %d events, Kafka holds %d", events, totalEvents(t, l))
		}
		before := map[string]int64{}
		for _, item := range testItems {
			n, err := src.Count(ctx, item)
			if err != nil {
				t.Fatal(err)
			}
			before[item] = n
		}
		// A new owner replaying everything (a rebalance that lost positions)
		// changes nothing either: the hwm fence and the dedupe both hold.
		replay := pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: l, Cells: positionZero{src}, Clock: clk, MaxEvents: 29})
		pipelinetest.CatchUp(t, replay)
		for _, item := range testItems {
			if n, _ := src.Count(ctx, item); n != before[item] {
				t.Fatalf("replay moved Count(%q) from %d to %d", item, before[item], n)
			}
		}
		pipelinetest.CheckCounts(t, src, src, testItems)
	})
}

// A record that does not decode is parked in the DLQ and skipped; a record of
// a newer format is not poison and stalls its partition with an error.
func TestPoisonRecordGoesToDLQ(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := clock.NewFake(time.UnixMilli(t0))
		src := openSource(t, 2, clk)
		cfg := testConfig(t, b, 2)
		var mu sync.Mutex
		var poisonOffsets []int64
		cfg.OnPoison = func(p uint32, off int64, err error) {
			mu.Lock()
			defer mu.Unlock()
			if !errors.Is(err, errPoison) {
				t.Errorf("OnPoison(%d, %d, %v)", p, off, err)
			}
			if p == 0 {
				poisonOffsets = append(poisonOffsets, off)
			}
		}
		r := newRelay(t, cfg, src)
		l := newLog(t, cfg)
		raw := rawProducer(t, cfg)
		w := newWorkload(src, clk, 3)
		w.run(t, 50)
		flush(t, r)
		v1 := []kgo.RecordHeader{{Key: HeaderFormat, Value: []byte(formatV1)}}
		produce(t, raw,
			&kgo.Record{Topic: cfg.Topic, Partition: 0, Value: []byte("garbage"), Headers: v1},
			&kgo.Record{Topic: cfg.Topic, Partition: 0, Value: []byte("a foreign record without headers")},
		)
		w.run(t, 50)
		flush(t, r)
		checkSameLog(t, src, l) // the Kafka view skips both
		if n := l.Stats().Poisoned; n != 2 {
			t.Fatalf("Poisoned = %d, want 2", n)
		}
		checkSameLog(t, src, l) // re-reading parks nothing twice
		if n := l.Stats().Poisoned; n != 2 {
			t.Fatalf("Poisoned = %d after a re-read, want 2", n)
		}
		dlq := readTopic(t, cfg, cfg.DLQTopic)
		if len(dlq) != 2 {
			t.Fatalf("DLQ holds %d records, want 2", len(dlq))
		}
		mu.Lock()
		for i, rec := range dlq {
			off, _ := header(rec, HeaderDLQOffset)
			part, _ := header(rec, HeaderDLQPartition)
			topic, _ := header(rec, HeaderDLQTopic)
			if reason, _ := header(rec, HeaderDLQError); reason == "" || topic != cfg.Topic || part != "0" || off != strconv.FormatInt(poisonOffsets[i], 10) {
				t.Fatalf("DLQ record %d headers %+v, poison offsets %v", i, rec.Headers, poisonOffsets)
			}
		}
		mu.Unlock()
		if string(dlq[0].Value) != "garbage" {
			t.Fatalf("DLQ record value %q", dlq[0].Value)
		}

		// A poison record last in a partition: a new relay scans past it to the
		// last relay record.
		_ = r.Close()
		produce(t, raw, &kgo.Record{Topic: cfg.Topic, Partition: 1, Value: []byte("junk"), Headers: v1})
		w.run(t, 50)
		r2 := newRelay(t, cfg, src)
		flush(t, r2)
		checkSameLog(t, src, l)

		// A newer format is not poison: Read fails until this build is upgraded.
		after := uint64(0)
		if kevs := pipelinetest.ReadAll(t, l, 1, 1000); len(kevs) > 0 {
			after = kevs[len(kevs)-1].Pos
		}
		produce(t, raw, &kgo.Record{Topic: cfg.Topic, Partition: 1, Value: []byte{1}, Headers: []kgo.RecordHeader{{Key: HeaderFormat, Value: []byte("3")}}})
		if _, _, err := l.Read(context.Background(), 1, after, 10); !errors.Is(err, ErrUnknownFormat) {
			t.Fatalf("Read over a format-3 record: %v, want ErrUnknownFormat", err)
		}
		if n := l.Stats().Poisoned; n != 3 {
			t.Fatalf("Poisoned = %d, want 3", n)
		}
	})
}

// An idle partition's watermark advances through heartbeats; the aggregator's
// position stays at its last event and a Read past it returns nothing.
func TestIdleWatermarkAdvances(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clock.NewFake(time.UnixMilli(t0))
		src := openSource(t, 2, clk)
		cfg := testConfig(t, b, 2)
		r := newRelay(t, cfg, src)
		l := newLog(t, cfg)
		if _, err := src.Apply(ctx, edgetest.Like("x", "u", "k", 1, t0)); err != nil {
			t.Fatal(err)
		}
		flush(t, r)
		aggs := pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: l, Cells: src, Clock: clk})
		pipelinetest.CatchUp(t, aggs)
		var before []uint64
		for _, a := range aggs {
			before = append(before, a.Stats().Position)
		}
		for round := range 3 {
			clk.Advance(time.Minute)
			want := clk.Now().UnixMilli()
			waitFor(t, "an idle watermark heartbeat", 30*time.Second, func() bool {
				for p := range 2 {
					_, h, err := l.Read(ctx, uint32(p), before[p], 10)
					if err != nil {
						t.Fatal(err)
					}
					if h.CompleteThrough < want {
						return false
					}
				}
				return true
			})
			pipelinetest.CatchUp(t, aggs)
			for p, a := range aggs {
				st := a.Stats()
				if st.Watermark < want || st.Position != before[p] {
					t.Fatalf("round %d partition %d: %+v, want watermark >= %d at position %d", round, p, st, want, before[p])
				}
				evs, _, err := l.Read(ctx, uint32(p), st.Position, 10)
				if err != nil || len(evs) != 0 {
					t.Fatalf("Read past the last event: %v, %v", evs, err)
				}
			}
		}
		if n := l.Stats().Heartbeats; n == 0 {
			t.Fatal("no heartbeat crossed")
		}
		if n, _ := src.Count(ctx, "x"); n != 1 {
			t.Fatalf("Count(x) = %d", n)
		}
	})
}

// Many heartbeats between events: Read crosses them (in several small
// fetches) and remembers it did, so the next Read from the same position
// starts after them.
func TestReadCrossesHeartbeats(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		cfg := testConfig(t, b, 1)
		cfg.FetchMaxBytes = 1024
		l := newLog(t, cfg)
		raw := rawProducer(t, cfg)
		ev := edge.Event{Partition: 0, Pos: 1, Item: "i", User: "u", Bucket: edge.BucketOf("u"), Version: crdt.Version{Epoch: 1, Op: 1},
			State: crdt.Liked, Delta: 1, EventTime: t0, Kind: edge.KindFlip}
		// Each produce call is its own batch, bigger than one fetch's 1 KiB,
		// so crossing the heartbeats takes one fetch per 50 of them.
		var recs []*kgo.Record
		batch := func(rs ...*kgo.Record) {
			produce(t, raw, rs...)
			recs = append(recs, rs...)
		}
		heartbeats := func(n int, srcPos uint64, from int64) {
			for i := 0; i < n; i += 50 {
				var rs []*kgo.Record
				for j := i; j < i+50 && j < n; j++ {
					rs = append(rs, heartbeatRecord(cfg.Topic, 0, srcPos, from+int64(j)))
				}
				batch(rs...)
			}
		}
		batch(eventRecord(cfg.Topic, ev))
		heartbeats(500, 1, t0)
		ev2 := ev
		ev2.Pos, ev2.Version.Op, ev2.State, ev2.Delta, ev2.EventTime = 2, 2, crdt.Unliked, -1, t0+1000
		batch(eventRecord(cfg.Topic, ev2))
		heartbeats(300, 2, t0+2000)

		evs, h, err := l.Read(ctx, 0, 0, 1)
		if err != nil || len(evs) != 1 || evs[0].Pos != 1 || !sameEvent(evs[0], ev) {
			t.Fatalf("first Read: %+v, %v", evs, err)
		}
		if h.Pos != uint64(len(recs)) {
			t.Fatalf("head %+v, want Pos %d", h, len(recs))
		}
		evs, _, err = l.Read(ctx, 0, 1, 10)
		if err != nil || len(evs) != 1 || evs[0].Pos != 502 || !sameEvent(evs[0], ev2) {
			t.Fatalf("second Read: %+v, %v", evs, err)
		}
		f0 := l.Stats().Fetches
		evs, h, err = l.Read(ctx, 0, 502, 10)
		if err != nil || len(evs) != 0 || h.CompleteThrough != t0+2299 || h.Pos != uint64(len(recs)) {
			t.Fatalf("Read at the end: %+v %+v, %v", evs, h, err)
		}
		f1 := l.Stats().Fetches
		if f1-f0 < 2 {
			t.Fatalf("crossing 300 heartbeats in 1 KiB fetches took %d fetches", f1-f0)
		}
		if _, _, err := l.Read(ctx, 0, 502, 10); err != nil {
			t.Fatal(err)
		}
		if n := l.Stats().Fetches - f1; n != 1 {
			t.Fatalf("a repeated Read at the end took %d fetches, want 1 (skip cache)", n)
		}
		// Positions outside the partition are errors, not empty reads.
		if _, _, err := l.Read(ctx, 0, uint64(len(recs))+5, 10); !errors.Is(err, errOutOfRange) {
			t.Fatalf("Read beyond the end: %v", err)
		}
	})
}

func TestEnsureTopicsPartitionMismatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		cfg := testConfig(t, b, 3)
		if err := EnsureTopics(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if err := EnsureTopics(ctx, cfg); err != nil {
			t.Fatalf("second EnsureTopics: %v", err)
		}
		bad := cfg
		bad.Partitions = 4
		_, err := NewLog(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), "exists with 3 partitions") {
			t.Fatalf("NewLog on a 3-partition topic with Partitions 4: %v", err)
		}
		src := openSource(t, 4, nil)
		if _, err := NewRelay(ctx, bad, src); err == nil || !strings.Contains(err.Error(), "exists with 3 partitions") {
			t.Fatalf("NewRelay: %v", err)
		}
		if _, err := NewRelay(ctx, cfg, src); err == nil || !strings.Contains(err.Error(), "source log has 4 partitions") {
			t.Fatalf("NewRelay with a 4-partition source: %v", err)
		}
	})
}

// A relay whose topic claims more than its source holds refuses to publish.
func TestRelayRefusesForeignTopic(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := clock.NewFake(time.UnixMilli(t0))
		a := openSource(t, 1, clk)
		cfg := testConfig(t, b, 1)
		newWorkload(a, clk, 5).run(t, 30)
		r := newRelay(t, cfg, a)
		flush(t, r)
		_ = r.Close()

		other, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Region: "r1", Partitions: 1, Clock: clk, CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		var errs atomic.Int64
		cfg.OnError = func(uint32, error) { errs.Add(1) }
		r2 := newRelay(t, cfg, other)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r2.Flush(ctx); err == nil || !strings.Contains(err.Error(), "another source") {
			t.Fatalf("Flush: %v", err)
		}
		waitFor(t, "the loop to report the error", 30*time.Second, func() bool { return errs.Load() > 0 })
	})
}

func TestConfigValidate(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Brokers[0] != "127.0.0.1:9092" || c.Topic != "likes.log" || c.DLQTopic != "likes.log.dlq" ||
		c.Partitions != 16 || c.ReplicationFactor != 1 || c.ClientID != "likes-kafkalog" ||
		c.MaxBatch != 500 || c.PoisonRetries != 3 || c.HeartbeatInterval != time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	bad := []Config{
		{Brokers: []string{""}},
		{Brokers: []string{"a:1,b:2"}},
		{Topic: "bad topic"},
		{Topic: ".."},
		{Topic: "t", DLQTopic: "t"},
		{Partitions: -1},
		{Partitions: 1 << 17},
		{ReplicationFactor: -1},
		{MaxBatch: -5},
		{PollInterval: -time.Second},
		{Linger: -time.Millisecond},
		{Linger: 2 * time.Second},
		{FetchMaxBytes: 10},
		{PoisonRetries: -1},
	}
	for i, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("bad config %d validated: %+v", i, c)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		ev := edge.Event{
			Item: testItems[rng.IntN(len(testItems))], User: testUsers[rng.IntN(len(testUsers))],
			Version:   crdt.Version{Epoch: rng.Uint64N(5), Op: rng.Uint64()},
			State:     crdt.State(rng.IntN(3)),
			Delta:     int32(rng.IntN(3) - 1),
			EventTime: rng.Int64(),
			Kind:      edge.Kind(1 + rng.IntN(int(edge.LastKind))),
		}
		if !ev.Kind.HasItem() {
			ev.Item = "" // a purge or an erasure mark: the store's log carries them (they used to be refused as poison)
		}
		if i%7 == 0 {
			ev.Delta = int32(rng.Uint32())
		}
		ev.Bucket = edge.BucketOf(ev.User)
		if rng.IntN(2) == 0 {
			ev.Idem = &edge.IdemRef{Key: fmt.Sprint("k", i), Fingerprint: "fp", ExpiresAt: rng.Int64(), Liked: rng.IntN(2) == 0, Changed: rng.IntN(2) == 0}
		}
		for name, f := range map[string]struct {
			enc func(edge.Event) []byte
			dec func([]byte) (edge.Event, error)
		}{"format 1": {encodeEvent, decodeEvent}, "format 2": {encodeEventV2, decodeEventV2}} {
			got, err := f.dec(f.enc(ev))
			if err != nil || !sameEvent(got, ev) {
				t.Fatalf("%s round trip of %+v: %+v, %v", name, ev, got, err)
			}
			if _, err := f.dec(append(f.enc(ev), 0)); err == nil {
				t.Fatalf("%s: a trailing byte decoded", name)
			}
		}
		enc := encodeEvent(ev)
		for cut := range len(enc) {
			if _, err := decodeEvent(enc[:cut]); err == nil {
				t.Fatalf("a truncation to %d of %d bytes decoded", cut, len(enc))
			}
		}
		if _, err := decodeEvent(append(enc, 0)); err == nil {
			t.Fatal("trailing byte decoded")
		}
	}
	// The rule the other way round: an item where there is none, none where
	// there must be one.
	for _, ev := range []edge.Event{
		{Kind: edge.KindFlip, User: "u", Bucket: edge.BucketOf("u")},
		{Kind: edge.KindErasing, Item: "i", User: "u", Bucket: edge.BucketOf("u")},
		{Kind: edge.KindPurge, Item: "i", User: "u", Bucket: edge.BucketOf("u")},
	} {
		if _, err := decodeEventV2(encodeEventV2(ev)); err == nil {
			t.Fatalf("%s event with item %q decoded", ev.Kind, ev.Item)
		}
	}
	for range 5000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		_, _ = decodeEvent(b) // never panics
		_, _ = decodeEventV2(b)
	}
}

// Close stops every goroutine the Relay and the Log started, and is idempotent.
func TestCloseStopsGoroutines(t *testing.T) {
	b := kfakeBackend()
	clk := clock.NewFake(time.UnixMilli(t0))
	src := openSource(t, 4, clk)
	cfg := testConfig(t, b, 4)
	if err := EnsureTopics(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	for range 3 {
		r, err := NewRelay(context.Background(), cfg, src)
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLog(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		newWorkload(src, clk, 1).run(t, 20)
		flush(t, r)
		checkSameLog(t, src, l)
		for range 2 {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Flush after Close: %v", err)
		}
		if _, _, err := l.Read(context.Background(), 0, 0, 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("Read after Close: %v", err)
		}
	}
	waitFor(t, "goroutines to stop", 10*time.Second, func() bool { return runtime.NumGoroutine() <= base })
}
