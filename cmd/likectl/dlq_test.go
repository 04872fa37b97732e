package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/stream/kafkalog"
)

// envKafka names a real Kafka for the dlq test (what scripts/servers.sh env
// exports).
const envKafka = "LIKES_TEST_KAFKA_BROKERS"

// TestDLQ runs `likectl dlq list|replay` against kfake and, when
// LIKES_TEST_KAFKA_BROKERS is set, against the real broker.
func TestDLQ(t *testing.T) {
	t.Run("kfake", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		testDLQ(t, c.ListenAddrs(), false)
	})
	t.Run("broker", func(t *testing.T) {
		v := strings.TrimSpace(os.Getenv(envKafka))
		if v == "" {
			t.Skipf("%s is unset: run `bash scripts/servers.sh up kafka` and eval \"$(bash scripts/servers.sh env)\" to test against a real Kafka", envKafka)
		}
		testDLQ(t, strings.Split(v, ","), true)
	})
}

func testDLQ(t *testing.T, brokers []string, real bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	cfg := kafkalog.Config{Brokers: brokers, Topic: "likes-test.likectl-dlq." + hex.EncodeToString(rnd[:]), Partitions: 2, PoisonRetries: 1,
		ProduceTimeout: 20 * time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := kafkalog.NewLog(ctx, cfg) // creates the topic and its DLQ
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	if real {
		t.Cleanup(func() {
			dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer dcancel()
			_, _ = kadm.NewClient(raw).DeleteTopics(dctx, cfg.Topic, cfg.DLQTopic)
		})
	}
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := raw.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A poison record, parked by the Log's reader.
	produce(&kgo.Record{Topic: cfg.Topic, Partition: 1, Value: []byte("garbage"), Headers: []kgo.RecordHeader{{Key: "v", Value: []byte("2")}}})
	if _, _, err := l.Read(ctx, 1, 0, 10); err != nil || l.Stats().Poisoned != 1 {
		t.Fatalf("park the poison: %v, poisoned %d", err, l.Stats().Poisoned)
	}
	// A record that decodes, parked twice (say by two readers with a bug since fixed).
	ev := edge.Event{Item: "item-7", User: "u", Bucket: edge.BucketOf("u"), Version: crdt.Version{Epoch: 2, Op: 5},
		State: crdt.Liked, Delta: 1, EventTime: 1_700_000_000_000, Kind: edge.KindFlip}
	val, err := proto.Marshal(peerpb.FromEvent(ev, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	parked := func() *kgo.Record {
		return &kgo.Record{Topic: cfg.DLQTopic, Partition: 0, Key: []byte("item-7#" + strconv.Itoa(int(ev.Bucket))), Value: val, Headers: []kgo.RecordHeader{
			{Key: "v", Value: []byte("2")}, {Key: "src-pos", Value: []byte("12")},
			{Key: kafkalog.HeaderDLQTopic, Value: []byte(cfg.Topic)}, {Key: kafkalog.HeaderDLQPartition, Value: []byte("0")},
			{Key: kafkalog.HeaderDLQOffset, Value: []byte("41")}, {Key: kafkalog.HeaderDLQError, Value: []byte("decoder bug")},
		}}
	}
	produce(parked(), parked())

	kargs := []string{"--kafka", strings.Join(brokers, ","), "--topic", cfg.Topic, "--timeout", "30s"}
	ctl := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := likectl(t, append(args, kargs...)...)
		return out, err
	}

	out, err := ctl("dlq", "list", "-o", "json")
	var ls dlqListJSON
	if err != nil || json.Unmarshal([]byte(out), &ls) != nil {
		t.Fatalf("dlq list -o json: %v\n%s", err, out)
	}
	if len(ls.Records) != 3 || ls.Truncated || ls.DLQTopic != cfg.DLQTopic {
		t.Fatalf("dlq list = %s", out)
	}
	p0, g := ls.Records[0], ls.Records[1]
	if p0.Partition != 1 || p0.Offset != 0 || p0.Decodes || p0.DecodeError == "" || p0.Error == "" || p0.Size != 7 || p0.Time == "" {
		t.Fatalf("poison entry %+v", p0)
	}
	if g.Partition != 0 || g.Offset != 41 || !g.Decodes || g.Error != "decoder bug" {
		t.Fatalf("good entry %+v", g)
	}
	out, err = ctl("dlq", "list", "--limit", "2", "-o", "json")
	ls = dlqListJSON{}
	if exitCode(err) != exitFinding || json.Unmarshal([]byte(out), &ls) != nil || !ls.Truncated || len(ls.Records) != 2 {
		t.Fatalf("dlq list --limit 2: %v\n%s", err, out)
	}
	if out, err := ctl("dlq", "list", "--limit", "2"); exitCode(err) != exitFinding || !strings.Contains(out, "TRUNCATED") {
		t.Fatalf("dlq list --limit 2 table: %v\n%s", err, out)
	}

	out, err = ctl("dlq", "replay", "--offset", "41", "--dry-run", "-o", "json")
	var rp replayJSON
	if err != nil || json.Unmarshal([]byte(out), &rp) != nil || len(rp.Replayed) != 1 || rp.Duplicates != 1 || !rp.DryRun || rp.Replayed[0].NewOffset != 0 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if evs, _, err := l.Read(ctx, 0, 0, 10); err != nil || len(evs) != 0 {
		t.Fatalf("a dry run published: %+v %v", evs, err)
	}

	out, err = ctl("dlq", "replay", "--all", "-o", "json")
	rp = replayJSON{}
	if exitCode(err) != exitFinding || json.Unmarshal([]byte(out), &rp) != nil {
		t.Fatalf("replay --all: %v\n%s", err, out)
	}
	if len(rp.Replayed) != 1 || rp.Replayed[0].Offset != 41 || len(rp.Refused) != 1 || rp.Refused[0].Partition != 1 || rp.Duplicates != 1 {
		t.Fatalf("replay --all = %s", out)
	}
	evs, _, err := l.Read(ctx, 0, 0, 10)
	if err != nil || len(evs) != 1 || evs[0].Item != "item-7" || evs[0].Version != ev.Version || evs[0].Delta != 1 || evs[0].Pos != uint64(rp.Replayed[0].NewOffset)+1 {
		t.Fatalf("the log after replay: %+v %v", evs, err)
	}

	if _, err := ctl("dlq", "replay", "--offset", "999"); exitCode(err) != exitFinding || !strings.Contains(err.Error(), "not in the DLQ") {
		t.Fatalf("replay of an absent offset: %v", err)
	}
	if _, err := ctl("dlq", "replay"); exitCode(err) != exitFailure {
		t.Fatalf("replay without a selection: %v", err)
	}
	if _, _, err := likectl(t, "dlq", "list", "--kafka", strings.Join(brokers, ",")); exitCode(err) != exitFailure {
		t.Fatalf("list without a topic: %v", err)
	}
	if _, _, err := likectl(t, "dlq", "list", "--kafka", strings.Join(brokers, ","), "--topic", "likes-test.no-such-topic-"+hex.EncodeToString(rnd[:])); exitCode(err) != exitFailure {
		t.Fatalf("list of a missing DLQ: %v", err)
	}
}

// TestDLQCannotConnect: brokers that are not there are a failure (exit 2)
// within --timeout.
func TestDLQCannotConnect(t *testing.T) {
	start := time.Now()
	_, _, err := likectl(t, "dlq", "list", "--kafka", freeAddr(t), "--topic", "t", "--timeout", "1s")
	if exitCode(err) != exitFailure {
		t.Fatalf("dlq list against no broker: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}
