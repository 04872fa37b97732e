package region_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/cassandra"
)

// TestEnginesRegionRetention: a region on Cassandra runs the retention loop
// of --log-retention (startRetention) on its clock: once the folded log is
// older than the horizon it is truncated (the metric counts it, reading below
// the floor fails), and counts stay exact; with its aggregators on Kafka
// (--log kafka) too, below what the relay published to the topic.
func TestEnginesRegionRetention(t *testing.T) {
	t.Run("cassandra", func(t *testing.T) {
		hosts, ks := mixedKeyspace(t)
		cfg := config(t.TempDir())
		cfg.Engines = region.Engines{Store: region.StoreCassandra,
			Cassandra: region.CassandraEngine{Hosts: hosts, Keyspace: ks, Timeout: 20 * time.Second}}
		checkRegionRetention(t, cfg)
	})
	t.Run("cassandra+kafka", func(t *testing.T) {
		brokers := cassandra.ParseHosts(os.Getenv("LIKES_TEST_KAFKA_BROKERS"))
		if len(brokers) == 0 {
			t.Skip("LIKES_TEST_KAFKA_BROKERS is not set (bash scripts/servers.sh up kafka && eval \"$(bash scripts/servers.sh env)\")")
		}
		hosts, ks := mixedKeyspace(t)
		cfg := config(t.TempDir())
		cfg.Engines = region.Engines{Store: region.StoreCassandra,
			Cassandra: region.CassandraEngine{Hosts: hosts, Keyspace: ks, Timeout: 20 * time.Second},
			Log:       region.LogKafka,
			Kafka:     region.KafkaEngine{Brokers: brokers, Topic: "likes-retention." + ks, PollInterval: 10 * time.Millisecond}}
		region.DeleteTopicsAtEnd(t, brokers, cfg.Engines.Kafka.Topic)
		checkRegionRetention(t, cfg)
	})
}

// TestKafkaRegionRetention: with the aggregators on Kafka (--log kafka) the
// store's log is truncated too, below what the relay published to the topic
// (their own positions are topic offsets): Pebble with an in-process Kafka.
func TestKafkaRegionRetention(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	cfg := config(t.TempDir())
	cfg.Engines = region.Engines{Log: region.LogKafka,
		Kafka: region.KafkaEngine{Brokers: kc.ListenAddrs(), PollInterval: 5 * time.Millisecond}}
	checkRegionRetention(t, cfg)
}

// checkRegionRetention opens a region of cfg on a fake clock with a one-hour
// horizon, writes likes, and advances the clock until the metric says the
// log was truncated and the count is exact; the floors must cover the likes.
func checkRegionRetention(t *testing.T, cfg region.Config) {
	t.Helper()
	clk := clock.NewFake(time.Now())
	cfg.Clock = clk
	cfg.Lifecycle = region.Lifecycle{LogRetention: time.Hour, RetentionInterval: time.Minute}
	r, srv := open(t, cfg)
	const n = 12
	for i := 0; i < n; i++ {
		if _, err := write(t, srv, fmt.Sprintf("u%d", i), "item", fmt.Sprintf("k%d", i), true); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	count := func() int64 {
		var c int64
		var err error
		if r.Cassandra != nil {
			c, err = r.Cassandra.Count(ctx, "item")
		} else {
			c, err = r.Store.Count(ctx, "item")
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		deleted, _ := metricValue(t, r.Registry, "likes_retention_log_events_deleted_total")
		c := count()
		if c > n {
			t.Fatalf("count %d > %d likes", c, n)
		}
		if deleted >= n && c == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes: %v log events deleted, count %d (want %d and %d)", deleted, c, n, n)
		}
		clk.Advance(time.Minute)
		runtime.Gosched() // let the aggregators, the relay and the retainer take their ticks
	}
	var floors uint64
	for p := 0; p < cfg.Partitions; p++ {
		var (
			fl  uint64
			err error
		)
		if r.Cassandra != nil {
			fl, err = r.Cassandra.LogFloor(ctx, uint32(p))
		} else {
			fl, err = r.Store.LogFloor(ctx, uint32(p))
		}
		if err != nil {
			t.Fatal(err)
		}
		floors += fl
	}
	if floors < n {
		t.Fatalf("floors sum to %d, want >= %d", floors, n)
	}
}
