package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/edge"
)

// HeaderDLQReplayedFrom marks a record DLQ.Replay published back to the log
// topic: "topic/partition@offset" of its origin. Log.Read ignores it.
const HeaderDLQReplayedFrom = "dlq-replayed-from"

var (
	// ErrDLQRecord is wrapped when a DLQ record cannot be replayed: its DLQ
	// headers are missing or bad, it belongs to another topic, or its value
	// still does not decode.
	ErrDLQRecord = errors.New("kafkalog: DLQ record not replayable")
	// ErrNoDLQ is returned by OpenDLQ when the DLQ topic does not exist.
	ErrNoDLQ = errors.New("kafkalog: no DLQ topic")
)

// maxDLQList bounds one List.
const maxDLQList = 100_000

// DLQRecord is one record of the dead-letter topic as the Log parked it.
type DLQRecord struct {
	// Offset is the record's offset in the DLQ topic (partition 0).
	Offset int64
	// Topic, Partition and OriginOffset say where the record came from (the
	// dlq-topic, dlq-partition and dlq-offset headers); Error why it was
	// parked (dlq-error).
	Topic        string
	Partition    int32
	OriginOffset int64
	Error        string
	// Time is the record's timestamp: the original publish time.
	Time time.Time
	// Key and Value are the original record's; Headers its headers, without
	// the dlq-* ones.
	Key, Value []byte
	Headers    []kgo.RecordHeader
	// HeaderErr says why the dlq-* headers are unusable ("" when they are
	// fine); such a record is listed, never replayed.
	HeaderErr string
}

// Size is the record's key and value size in bytes.
func (r DLQRecord) Size() int { return len(r.Key) + len(r.Value) }

// Origin names where the record came from: "topic/partition@offset".
func (r DLQRecord) Origin() string {
	return fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.OriginOffset)
}

// Decode decodes the record with the Log's own decoder (the checks Log.Read
// applies): the event it carries, or an error wrapping ErrDLQRecord saying
// why it still cannot be replayed.
func (r DLQRecord) Decode() (edge.Event, error) {
	if r.HeaderErr != "" {
		return edge.Event{}, fmt.Errorf("%w: DLQ offset %d: %s", ErrDLQRecord, r.Offset, r.HeaderErr)
	}
	ps, err := parseRecord(&kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers, Offset: r.OriginOffset})
	if err != nil {
		return edge.Event{}, fmt.Errorf("%w: %s still does not decode: %w", ErrDLQRecord, r.Origin(), err)
	}
	if ps.event == nil {
		return edge.Event{}, fmt.Errorf("%w: %s carries no event (a heartbeat): nothing to replay", ErrDLQRecord, r.Origin())
	}
	return *ps.event, nil
}

// dlqRecord parses a record of the DLQ topic.
func dlqRecord(rec *kgo.Record) DLQRecord {
	r := DLQRecord{Offset: rec.Offset, Time: rec.Timestamp, Key: rec.Key, Value: rec.Value, Partition: -1, OriginOffset: -1}
	var bad []string
	seen := map[string]bool{}
	for _, h := range rec.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQError:
			if seen[h.Key] {
				bad = append(bad, "repeated "+h.Key)
			}
			seen[h.Key] = true
		}
		switch h.Key {
		case HeaderDLQTopic:
			if err := validTopic(v); err != nil {
				bad = append(bad, fmt.Sprintf("%s %q", h.Key, v))
			}
			r.Topic = v
		case HeaderDLQPartition:
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 {
				bad = append(bad, fmt.Sprintf("%s %q", h.Key, v))
			} else {
				r.Partition = int32(n)
			}
		case HeaderDLQOffset:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				bad = append(bad, fmt.Sprintf("%s %q", h.Key, v))
			} else {
				r.OriginOffset = n
			}
		case HeaderDLQError:
			r.Error = v
		case HeaderDLQReplayedFrom:
		default:
			r.Headers = append(r.Headers, h)
		}
	}
	for _, k := range []string{HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset} {
		if !seen[k] {
			bad = append(bad, "no "+k+" header")
		}
	}
	if len(bad) > 0 {
		r.HeaderErr = "bad DLQ headers: " + fmt.Sprint(bad)
	}
	return r
}

// DLQ reads the dead-letter topic of a Config and replays its records to the
// log topic. It is safe for concurrent use; Close is idempotent.
type DLQ struct {
	cfg  Config
	cl   *kgo.Client
	f    *fetcher
	once sync.Once
}

// OpenDLQ connects to cfg's brokers. It creates no topic: a missing DLQ
// topic is ErrNoDLQ.
func OpenDLQ(ctx context.Context, cfg Config) (*DLQ, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(cfg.clientOpts("dlq",
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.ProduceTimeout),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: dlq client: %w", err)
	}
	m, err := freshMeta(ctx, cl, cfg.DLQTopic)
	if err == nil && errors.Is(m.err, kerr.UnknownTopicOrPartition) {
		err = fmt.Errorf("%w: topic %q does not exist (nothing was ever parked, or another --topic)", ErrNoDLQ, cfg.DLQTopic)
	} else if err == nil && m.err != nil {
		err = fmt.Errorf("kafkalog: metadata of %q: %w", cfg.DLQTopic, m.err)
	} else if err == nil && len(m.leaders) != 1 {
		err = fmt.Errorf("kafkalog: DLQ topic %q has %d partitions, want 1", cfg.DLQTopic, len(m.leaders))
	}
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &DLQ{cfg: cfg, cl: cl, f: newFetcher(cl, cfg.DLQTopic, 1, cfg.FetchMaxBytes)}, nil
}

// Close closes the client.
func (d *DLQ) Close() error {
	d.once.Do(d.cl.Close)
	return nil
}

// DLQPage is one List.
type DLQPage struct {
	Records []DLQRecord
	// Start and End are the DLQ's bounds when listed (log start, high
	// watermark); Next is the offset after the last record read.
	Start, End, Next int64
	// Truncated: records remain between Next and End (the limit cut them).
	Truncated bool
}

// List reads up to limit records of the DLQ from offset from (clamped to the
// log start: older records were deleted by retention).
func (d *DLQ) List(ctx context.Context, from int64, limit int) (DLQPage, error) {
	if limit < 1 || limit > maxDLQList {
		return DLQPage{}, fmt.Errorf("kafkalog: DLQ list limit %d not in [1, %d]", limit, maxDLQList)
	}
	if from < 0 {
		return DLQPage{}, fmt.Errorf("kafkalog: DLQ offset %d is negative", from)
	}
	start, end, err := d.f.bounds(ctx, 0)
	if err != nil {
		return DLQPage{}, err
	}
	pg := DLQPage{Start: start, End: end, Next: max(from, start)}
	for pg.Next < end && len(pg.Records) < limit {
		fr, err := d.f.fetch(ctx, 0, pg.Next)
		if err != nil {
			return DLQPage{}, err
		}
		for _, rec := range fr.records {
			if len(pg.Records) == limit {
				break
			}
			pg.Records = append(pg.Records, dlqRecord(rec))
			pg.Next = rec.Offset + 1
		}
		if len(pg.Records) == limit {
			break
		}
		if fr.next <= pg.Next && len(fr.records) == 0 {
			if fr.end <= pg.Next {
				break // the end moved back (read_committed): nothing more to read
			}
			return DLQPage{}, fmt.Errorf("kafkalog: %s@%d: fetch made no progress below end %d", d.cfg.DLQTopic, pg.Next, fr.end)
		}
		pg.Next = max(pg.Next, fr.next)
	}
	pg.Truncated = pg.Next < end
	return pg, nil
}

// Replay publishes r back to the partition of the log topic it came from,
// after checking it with Decode; its headers are the original ones without
// src-pos and wm (the relay's resume position and the watermark belong to
// the relay's own records; a replay must not move either) plus
// HeaderDLQReplayedFrom. It returns the offset the record got.
//
// A replay is idempotent for the counts: the replayed event keeps its
// edge, epoch and op (version), so the aggregators' (edge, version) dedupe
// applies it at most once however often it is replayed, and not at all if
// it (or a later version of the edge) was applied already.
func (d *DLQ) Replay(ctx context.Context, r DLQRecord) (int64, error) {
	if _, err := r.Decode(); err != nil {
		return 0, err
	}
	if r.Topic != d.cfg.Topic {
		return 0, fmt.Errorf("%w: %s came from topic %q, not %q", ErrDLQRecord, r.Origin(), r.Topic, d.cfg.Topic)
	}
	m, err := freshMeta(ctx, d.cl, d.cfg.Topic)
	if err != nil {
		return 0, err
	}
	if m.err != nil {
		return 0, fmt.Errorf("kafkalog: metadata of %q: %w", d.cfg.Topic, m.err)
	}
	if r.Partition < 0 || int(r.Partition) >= len(m.leaders) {
		return 0, fmt.Errorf("%w: %s: the topic has %d partitions", ErrDLQRecord, r.Origin(), len(m.leaders))
	}
	hdrs := make([]kgo.RecordHeader, 0, len(r.Headers)+1)
	for _, h := range r.Headers {
		if h.Key != HeaderSrcPos && h.Key != HeaderWM {
			hdrs = append(hdrs, h)
		}
	}
	hdrs = append(hdrs, kgo.RecordHeader{Key: HeaderDLQReplayedFrom, Value: []byte(r.Origin())})
	rec := &kgo.Record{Topic: d.cfg.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: hdrs}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProduceTimeout)
	defer cancel()
	if err := d.cl.ProduceSync(pctx, rec).FirstErr(); err != nil {
		return 0, fmt.Errorf("kafkalog: replay %s: %w", r.Origin(), err)
	}
	return rec.Offset, nil
}
