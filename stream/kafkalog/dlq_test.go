package kafkalog

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// dlqCopy is the DLQ record the Log would write for rec, read at origin
// partition p, offset off.
func dlqCopy(cfg Config, rec *kgo.Record, p int32, off int64, reason string) *kgo.Record {
	hdrs := append([]kgo.RecordHeader(nil), rec.Headers...)
	hdrs = append(hdrs,
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(cfg.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(p)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(off, 10))},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(reason)},
	)
	return &kgo.Record{Topic: cfg.DLQTopic, Partition: 0, Key: rec.Key, Value: rec.Value, Headers: hdrs}
}

// TestDLQListAndReplay: List shows parked records with their origin, error,
// size and time, and says when a limit truncated it; Decode uses the Log's
// own decoder; Replay publishes a record that decodes to its origin
// partition (without the relay's src-pos and wm), refuses one that still
// does not decode or whose DLQ headers are bad, and the Log then serves the
// replayed event unchanged.
func TestDLQListAndReplay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cfg := testConfig(t, b, 2)
		cfg.PoisonRetries = 1
		l := newLog(t, cfg) // creates the topics
		raw := rawProducer(t, cfg)

		// A poison record on partition 1, parked by the Log itself.
		produce(t, raw, &kgo.Record{Topic: cfg.Topic, Partition: 1, Value: []byte("garbage"),
			Headers: []kgo.RecordHeader{{Key: HeaderFormat, Value: []byte(formatV2)}}})
		if evs, _, err := l.Read(ctx, 1, 0, 10); err != nil || len(evs) != 0 || l.Stats().Poisoned != 1 {
			t.Fatalf("Read of the poison: %v %v, poisoned %d", evs, err, l.Stats().Poisoned)
		}
		// A good event parked by a reader with a bug since fixed (twice: two
		// readers), and a record with broken DLQ headers.
		ev := edge.Event{Partition: 0, Pos: 9, Item: "item-1", User: "u", Bucket: edge.BucketOf("u"), Version: crdt.Version{Epoch: 1, Op: 3},
			State: crdt.Liked, Delta: 1, EventTime: t0, Kind: edge.KindFlip}
		good := eventRecord(cfg.Topic, ev)
		withWM(good, t0)
		produce(t, raw, dlqCopy(cfg, good, 0, 41, "decoder bug"), dlqCopy(cfg, good, 0, 41, "decoder bug"),
			&kgo.Record{Topic: cfg.DLQTopic, Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: HeaderDLQPartition, Value: []byte("-3")}}})

		d, err := OpenDLQ(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		pg, err := d.List(ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(pg.Records) != 4 || pg.Truncated || pg.Start != 0 || pg.End != 4 || pg.Next != 4 {
			t.Fatalf("List = %+v", pg)
		}
		poison, g1, g2, broken := pg.Records[0], pg.Records[1], pg.Records[2], pg.Records[3]
		if poison.Topic != cfg.Topic || poison.Partition != 1 || poison.OriginOffset != 0 || poison.Error == "" ||
			string(poison.Value) != "garbage" || poison.Size() != 7 || poison.Time.IsZero() || poison.HeaderErr != "" {
			t.Fatalf("poison record %+v", poison)
		}
		if _, err := poison.Decode(); !errors.Is(err, ErrDLQRecord) || !errors.Is(err, errPoison) {
			t.Fatalf("poison Decode: %v", err)
		}
		if got, err := g1.Decode(); err != nil || !sameEvent(got, ev) || g1.Origin() != cfg.Topic+"/0@41" {
			t.Fatalf("good Decode: %+v %v (origin %s)", got, err, g1.Origin())
		}
		if broken.HeaderErr == "" {
			t.Fatalf("broken headers accepted: %+v", broken)
		}
		if _, err := d.Replay(ctx, broken); !errors.Is(err, ErrDLQRecord) {
			t.Fatalf("Replay of broken headers: %v", err)
		}
		if _, err := d.Replay(ctx, poison); !errors.Is(err, ErrDLQRecord) {
			t.Fatalf("Replay of the poison: %v", err)
		}
		if pg, err := d.List(ctx, 1, 2); err != nil || len(pg.Records) != 2 || !pg.Truncated || pg.Next != 3 || pg.Records[0].Offset != 1 {
			t.Fatalf("List(1, 2) = %+v, %v", pg, err)
		}
		other := g2
		other.Topic = "another.topic"
		if _, err := d.Replay(ctx, other); !errors.Is(err, ErrDLQRecord) {
			t.Fatalf("Replay of another topic's record: %v", err)
		}

		off, err := d.Replay(ctx, g1)
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := l.Read(ctx, 0, 0, 10)
		if err != nil || len(evs) != 1 || !sameEvent(evs[0], ev) || evs[0].Pos != uint64(off)+1 {
			t.Fatalf("Read after replay: %+v %v (replayed at %d)", evs, err, off)
		}
		recs := readTopic(t, cfg, cfg.Topic)
		var replayed *kgo.Record
		for _, r := range recs {
			if r.Partition == 0 && r.Offset == off {
				replayed = r
			}
		}
		if replayed == nil {
			t.Fatalf("no record at 0@%d", off)
		}
		if _, ok := header(replayed, HeaderSrcPos); ok {
			t.Fatal("a replayed record carries src-pos (the relay would resume from it)")
		}
		if _, ok := header(replayed, HeaderWM); ok {
			t.Fatal("a replayed record carries wm")
		}
		if from, _ := header(replayed, HeaderDLQReplayedFrom); from != cfg.Topic+"/0@41" {
			t.Fatalf("dlq-replayed-from = %q", from)
		}
		if string(replayed.Key) != string(good.Key) {
			t.Fatalf("key %q, want %q", replayed.Key, good.Key)
		}

		if _, err := d.List(ctx, 0, 0); err == nil {
			t.Fatal("List with limit 0 accepted")
		}
		nodlq := testConfig(t, b, 1)
		if d2, err := OpenDLQ(ctx, nodlq); !errors.Is(err, ErrNoDLQ) {
			if d2 != nil {
				_ = d2.Close()
			}
			t.Fatalf("OpenDLQ of a missing topic: %v", err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
