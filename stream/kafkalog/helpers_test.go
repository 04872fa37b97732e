package kafkalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

const t0 = int64(1_700_000_000_000)

// envBrokers names a real Kafka for the tests (comma-separated host:port).
const envBrokers = "LIKES_TEST_KAFKA_BROKERS"

// backend is a Kafka the tests run against.
type backend struct {
	name string
	real bool
	// brokers returns seed brokers for one test (kfake: a fresh cluster).
	brokers func(t *testing.T) []string
}

func kfakeBackend() backend {
	return backend{name: "kfake", brokers: func(t *testing.T) []string {
		t.Helper()
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}}
}

func realBackend() (backend, bool) {
	v := strings.TrimSpace(os.Getenv(envBrokers))
	if v == "" {
		return backend{}, false
	}
	return backend{name: "broker", real: true, brokers: func(*testing.T) []string { return strings.Split(v, ",") }}, true
}

// forEachBackend runs fn on kfake, and on a real broker when envBrokers is set
// (skipped with a message otherwise).
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("kfake", func(t *testing.T) { fn(t, kfakeBackend()) })
	t.Run("broker", func(t *testing.T) {
		b, ok := realBackend()
		if !ok {
			t.Skipf("real Kafka not configured: set %s=host:port (e.g. the broker scripts/servers.sh starts) to run against it", envBrokers)
		}
		fn(t, b)
	})
}

// testConfig returns a config on a fresh, uniquely named topic, deleted at the
// end of a real-broker test.
func testConfig(t *testing.T, b backend, parts int) Config {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 150 {
		name = name[len(name)-150:]
	}
	cfg := Config{
		Brokers:           b.brokers(t),
		Topic:             "likes-test." + name + "." + hex.EncodeToString(rnd[:]),
		Partitions:        parts,
		ClientID:          "kafkalog-test",
		PollInterval:      2 * time.Millisecond,
		HeartbeatInterval: 20 * time.Millisecond,
		RetryBackoff:      10 * time.Millisecond,
		ProduceTimeout:    20 * time.Second,
		OnError:           func(p uint32, err error) { t.Logf("relay partition %d: %v", p, err) },
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if b.real {
		t.Cleanup(func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
			if err != nil {
				return
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).DeleteTopics(ctx, cfg.Topic, cfg.DLQTopic); err != nil {
				t.Logf("delete test topics: %v", err)
			}
		})
	}
	return cfg
}

func openSource(t *testing.T, parts int, clk clock.Clock) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Region: "r1", Partitions: parts, Clock: clk, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newRelay(t *testing.T, cfg Config, src pipeline.Log) *Relay {
	t.Helper()
	r, err := NewRelay(context.Background(), cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newLog(t *testing.T, cfg Config) *Log {
	t.Helper()
	l, err := NewLog(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func flush(t testing.TB, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// sameEvent compares events without their log placement.
func sameEvent(a, b edge.Event) bool {
	return fmt.Sprint(strip(a)) == fmt.Sprint(strip(b))
}

func strip(ev edge.Event) any {
	var idem edge.IdemRef
	if ev.Idem != nil {
		idem = *ev.Idem
	}
	ev.Pos, ev.Idem = 0, nil
	return []any{ev, idem}
}

// checkSameLog fails unless Kafka holds exactly the source's events, in order,
// in the same partitions.
func checkSameLog(t *testing.T, src, k pipeline.Log) {
	t.Helper()
	for p := range src.Partitions() {
		want := pipelinetest.ReadAll(t, src, uint32(p), 1000)
		got := pipelinetest.ReadAll(t, k, uint32(p), 7)
		if len(got) != len(want) {
			t.Fatalf("partition %d: Kafka has %d events, the source %d", p, len(got), len(want))
		}
		for i := range want {
			if !sameEvent(got[i], want[i]) {
				t.Fatalf("partition %d index %d: Kafka %+v, source %+v", p, i, got[i], want[i])
			}
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// rawProducer produces arbitrary records to the test topics.
func rawProducer(t *testing.T, cfg Config) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readTopic reads every record of a topic up to its current end.
func readTopic(t *testing.T, cfg Config, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	parts := len(ends[topic])
	f := newFetcher(cl, topic, parts, 1<<20)
	for p := range parts {
		lo, _ := ends.Lookup(topic, int32(p))
		if lo.Err != nil {
			t.Fatal(lo.Err)
		}
		for off := int64(0); off < lo.Offset; {
			fr, err := f.fetch(ctx, uint32(p), off)
			if err != nil {
				t.Fatal(err)
			}
			if len(fr.records) == 0 {
				break
			}
			out = append(out, fr.records...)
			off = fr.records[len(fr.records)-1].Offset + 1
		}
	}
	return out
}
