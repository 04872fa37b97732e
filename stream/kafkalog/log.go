package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// Log is pipeline.Log over the log topic: an event's Pos is its Kafka offset
// + 1 + Config.PositionBase, so aggregator positions and cell HWMs are Kafka
// offsets shifted by the data set's fixed base.
type Log struct {
	cfg   Config
	cl    *kgo.Client
	f     *fetcher
	parts []*logPart

	closed atomic.Bool
	once   sync.Once

	fetches    atomic.Uint64
	heartbeats atomic.Uint64
	poisoned   atomic.Uint64
}

var _ pipeline.Log = (*Log)(nil)

// logPart's offsets are Kafka offsets (no PositionBase): Read converts at its
// edges only.
type logPart struct {
	mu sync.Mutex
	// The highest watermark seen and the offset of the record carrying it:
	// every event with EventTime <= wm is at an offset below wmOff.
	wm    int64
	wmOff int64
	// [skipFrom, skipTo) holds no events: a Read after skipFrom starts at
	// skipTo. It saves rescanning trailing heartbeats on every poll.
	skipFrom, skipTo int64
	parked           map[int64]bool // poison offsets this process parked
}

// LogStats counts what the Log skipped.
type LogStats struct {
	Fetches    uint64
	Heartbeats uint64 // heartbeat records crossed
	Poisoned   uint64 // records parked in the DLQ and skipped
}

// NewLog ensures the topics exist and returns the consumer side.
func NewLog(ctx context.Context, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(cfg.clientOpts("log",
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.ProduceTimeout),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: log client: %w", err)
	}
	f := newFetcher(cl, cfg.Topic, cfg.Partitions, cfg.FetchMaxBytes)
	if err := ensureTopics(ctx, cl, cfg); err != nil {
		cl.Close()
		return nil, err
	}
	l := &Log{cfg: cfg, cl: cl, f: f}
	for range cfg.Partitions {
		l.parts = append(l.parts, &logPart{wmOff: -1, skipFrom: -1, parked: map[int64]bool{}})
	}
	return l, nil
}

// Close closes the client. Idempotent.
func (l *Log) Close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		l.cl.Close()
	})
	return nil
}

// Partitions implements pipeline.Log.
func (l *Log) Partitions() int { return l.cfg.Partitions }

// Stats returns the counters.
func (l *Log) Stats() LogStats {
	return LogStats{Fetches: l.fetches.Load(), Heartbeats: l.heartbeats.Load(), Poisoned: l.poisoned.Load()}
}

// Relayed returns, per partition, the source position the relay published
// through as Kafka holds it (the src-pos of the partition's last relay
// record: acknowledged by every in-sync replica, so it survives the relay).
// Every source event at or below it has a copy in the topic and a relay that
// starts now resumes after it, so the source log is no longer needed there
// for the aggregators: it is the bound under which a store may truncate its
// own log when the aggregators read this topic (retain.Round.Relayed). A
// partition whose position is lost (retention emptied it) is an error.
func (l *Log) Relayed(ctx context.Context) ([]uint64, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("kafkalog: log closed")
	}
	out := make([]uint64, l.cfg.Partitions)
	for p := range out {
		pos, _, err := l.f.lastPublished(ctx, uint32(p))
		if err != nil {
			return nil, err
		}
		out[p] = pos
	}
	return out, nil
}

// EndPositions returns, per partition, the position just past every record
// the topic holds now: PositionBase + the partition's end (last stable
// offset, the end Read reports in Head.Pos); PositionBase for an empty
// partition. An aggregator that commits it skips every record in the topic
// now and reads only records produced later (a rebuilt data set over the old
// topic starts there).
func (l *Log) EndPositions(ctx context.Context) ([]uint64, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	out := make([]uint64, l.cfg.Partitions)
	for p := range out {
		end, err := l.f.stableEnd(ctx, uint32(p))
		if err != nil {
			return nil, err
		}
		out[p] = l.cfg.PositionBase + uint64(end)
	}
	return out, nil
}

// Read implements pipeline.Log. Events are returned with their original item,
// user, version and event time; Pos is the Kafka offset + 1 + PositionBase.
// Head.Pos is PositionBase + the partition's end (last stable offset) when
// the read scanned up to it, and Head.CompleteThrough the highest relay
// watermark seen below Head.Pos.
func (l *Log) Read(ctx context.Context, p uint32, after uint64, max int) ([]edge.Event, pipeline.Head, error) {
	if l.closed.Load() {
		return nil, pipeline.Head{}, ErrClosed
	}
	if int(p) >= len(l.parts) {
		return nil, pipeline.Head{}, fmt.Errorf("kafkalog: partition %d out of range [0, %d)", p, len(l.parts))
	}
	if max < 1 {
		return nil, pipeline.Head{}, fmt.Errorf("kafkalog: Read max must be positive, got %d", max)
	}
	// Pos = offset + 1 + base, so the first offset wanted is after − base. A
	// position below the base is before this data set's first record (an
	// earlier data set's, or none yet): read from the start.
	base := l.cfg.PositionBase
	var first uint64
	if after >= base {
		first = after - base
	}
	if first >= math.MaxInt64 {
		return nil, pipeline.Head{}, fmt.Errorf("kafkalog: position %d is beyond any Kafka offset (PositionBase %d)", after, base)
	}
	lp := l.parts[p]
	next := int64(first)
	lp.mu.Lock()
	if lp.skipFrom == next && lp.skipTo > next {
		next = lp.skipTo
	}
	lp.mu.Unlock()

	var evs []edge.Event
	var end int64
	// Keep fetching across records that are not events (heartbeats, poison)
	// until an event or the end: an empty answer means "nothing up to the
	// head", which callers rely on.
	for {
		fr, err := l.f.fetch(ctx, p, next)
		l.fetches.Add(1)
		if err != nil {
			if base != 0 && errors.Is(err, errOutOfRange) {
				// The fetcher speaks offsets; name the position too.
				err = fmt.Errorf("kafkalog: position %d with PositionBase %d is offset %d: %w", after, base, first, err)
			}
			return nil, pipeline.Head{}, err
		}
		end = fr.end
		full := false
		for _, rec := range fr.records {
			ps, err := parseRecord(rec)
			if errors.Is(err, ErrUnknownFormat) {
				return nil, pipeline.Head{}, fmt.Errorf("kafkalog: %s/%d: %w", l.cfg.Topic, p, err)
			}
			if err != nil {
				var skip bool
				if ps, skip, err = l.poison(ctx, p, rec, err); err != nil {
					return nil, pipeline.Head{}, err
				}
				if skip {
					next = rec.Offset + 1
					continue
				}
			}
			if ps.hasWM {
				lp.mu.Lock()
				if ps.wm > lp.wm {
					lp.wm, lp.wmOff = ps.wm, rec.Offset
				}
				lp.mu.Unlock()
			}
			next = rec.Offset + 1
			if ps.event == nil {
				l.heartbeats.Add(1)
				continue
			}
			ev := *ps.event
			ev.Partition, ev.Pos = p, uint64(rec.Offset)+1+base
			evs = append(evs, ev)
			if len(evs) == max {
				full = true
				break
			}
		}
		if full {
			break
		}
		if fr.next <= next && len(fr.records) == 0 && next < fr.end {
			return nil, pipeline.Head{}, fmt.Errorf("kafkalog: %s/%d@%d: fetch made no progress below end %d", l.cfg.Topic, p, next, fr.end)
		}
		next = max64(next, fr.next)
		if len(evs) > 0 || next >= fr.end {
			break
		}
	}
	// What lies between the last event (or `after`) and next is not events
	// (offsets: the offset after the last event, or the first one wanted).
	from := int64(first)
	if len(evs) > 0 {
		from = int64(evs[len(evs)-1].Pos - base)
	}
	if next > from {
		lp.mu.Lock()
		lp.skipFrom, lp.skipTo = from, next
		lp.mu.Unlock()
	}
	h := pipeline.Head{Pos: uint64(end) + base}
	lp.mu.Lock()
	if lp.wmOff >= 0 && lp.wmOff < end {
		h.CompleteThrough = lp.wm
	}
	lp.mu.Unlock()
	if len(evs) > 0 && evs[len(evs)-1].Pos > h.Pos {
		h.Pos = evs[len(evs)-1].Pos // never: events come from below the end
	}
	return evs, h, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// poison handles a record that failed to parse: it is fetched and decoded
// again up to PoisonRetries times in all; if it still fails it is copied to
// the DLQ (acked) and skipped. If it cannot be parked, Read fails rather than
// drop it unrecorded.
func (l *Log) poison(ctx context.Context, p uint32, rec *kgo.Record, perr error) (parsed, bool, error) {
	lp := l.parts[p]
	lp.mu.Lock()
	done := lp.parked[rec.Offset]
	lp.mu.Unlock()
	if done {
		return parsed{}, true, nil
	}
	for attempt := 1; attempt < l.cfg.PoisonRetries; attempt++ {
		fr, err := l.f.fetch(ctx, p, rec.Offset)
		l.fetches.Add(1)
		if err != nil {
			return parsed{}, false, err
		}
		if len(fr.records) == 0 || fr.records[0].Offset != rec.Offset {
			return parsed{}, false, fmt.Errorf("kafkalog: %s/%d@%d: record vanished on refetch", l.cfg.Topic, p, rec.Offset)
		}
		rec = fr.records[0]
		ps, err := parseRecord(rec)
		if err == nil {
			return ps, false, nil
		}
		if errors.Is(err, ErrUnknownFormat) {
			return parsed{}, false, err
		}
		perr = err
	}
	hdrs := append([]kgo.RecordHeader(nil), rec.Headers...)
	hdrs = append(hdrs,
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(l.cfg.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: strconv.AppendUint(nil, uint64(p), 10)},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: strconv.AppendInt(nil, rec.Offset, 10)},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(perr.Error())},
	)
	dlq := &kgo.Record{Topic: l.cfg.DLQTopic, Key: rec.Key, Value: rec.Value, Headers: hdrs, Timestamp: rec.Timestamp}
	pctx, cancel := context.WithTimeout(ctx, l.cfg.ProduceTimeout)
	defer cancel()
	if err := l.cl.ProduceSync(pctx, dlq).FirstErr(); err != nil {
		return parsed{}, false, fmt.Errorf("kafkalog: %s/%d@%d is poison (%v) and could not be parked in %s: %w",
			l.cfg.Topic, p, rec.Offset, perr, l.cfg.DLQTopic, err)
	}
	lp.mu.Lock()
	first := !lp.parked[rec.Offset]
	lp.parked[rec.Offset] = true
	lp.mu.Unlock()
	if first {
		l.poisoned.Add(1)
		l.cfg.OnPoison(p, rec.Offset, perr)
	}
	return parsed{}, true, nil
}
