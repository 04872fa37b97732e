package region_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/region"
)

// TestEnginesValidation: bad engine choices are refused by Open with an error
// naming the problem, before anything is opened or dialed.
func TestEnginesValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		engines region.Engines
		cluster bool
		want    string
	}{
		{"unknown store", region.Engines{Store: "mysql"}, false, `unknown Store "mysql"`},
		{"unknown log", region.Engines{Log: "nats"}, false, `unknown Log "nats"`},
		{"unknown cache", region.Engines{Cache: "memcached"}, false, `unknown Cache "memcached"`},
		{"cassandra without hosts", region.Engines{Store: region.StoreCassandra}, false, "needs Cassandra.Hosts"},
		{"cassandra bad keyspace", region.Engines{Store: region.StoreCassandra,
			Cassandra: region.CassandraEngine{Hosts: []string{"127.0.0.1"}, Keyspace: "bad-name"}}, false, "invalid Cassandra keyspace"},
		{"cassandra bad consistency", region.Engines{Store: region.StoreCassandra,
			Cassandra: region.CassandraEngine{Hosts: []string{"127.0.0.1"}, Consistency: "MOST"}}, false, "consistency"},
		{"cassandra bad serial", region.Engines{Store: region.StoreCassandra,
			Cassandra: region.CassandraEngine{Hosts: []string{"127.0.0.1"}, Serial: "QUORUM"}}, false, "SERIAL or LOCAL_SERIAL"},
		{"cassandra settings on pebble", region.Engines{Cassandra: region.CassandraEngine{Hosts: []string{"127.0.0.1"}}}, false, `Store is "pebble"`},
		{"kafka without brokers", region.Engines{Log: region.LogKafka}, false, "needs Kafka.Brokers"},
		{"kafka linger too long", region.Engines{Log: region.LogKafka,
			Kafka: region.KafkaEngine{Brokers: []string{"127.0.0.1:9092"}, Linger: 2 * time.Second}}, false, "linger must be at most 1s"},
		{"kafka settings on store log", region.Engines{Kafka: region.KafkaEngine{Brokers: []string{"127.0.0.1:9092"}}}, false, `Log is "store"`},
		{"redis without addr", region.Engines{Cache: region.CacheRedis}, false, "needs Redis.Addr"},
		{"redis addr on inproc", region.Engines{Redis: rediscache.Config{Addr: "127.0.0.1:6379"}}, false, `Cache is "inproc"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t.TempDir())
			cfg.Engines = tc.engines
			if tc.cluster {
				cfg.Cluster = &region.Cluster{Regions: []string{cfg.Name, "other"}} // refused before it is used
			}
			r, err := region.Open(context.Background(), cfg)
			if err == nil {
				_ = r.Close()
				t.Fatalf("Open accepted %+v", tc.engines)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open error %q does not mention %q", err, tc.want)
			}
		})
	}
	// Several problems are reported together.
	cfg := config(t.TempDir())
	cfg.Engines = region.Engines{Store: region.StoreCassandra, Log: region.LogKafka, Cache: region.CacheRedis}
	_, err := region.Open(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "Cassandra.Hosts") || !strings.Contains(err.Error(), "Kafka.Brokers") ||
		!strings.Contains(err.Error(), "Redis.Addr") {
		t.Fatalf("Open error %v does not list every problem", err)
	}
	// The defaults are the embedded default, named explicitly or not.
	for _, e := range []region.Engines{{}, {Store: region.StorePebble, Log: region.LogStore, Cache: region.CacheInproc}} {
		cfg := config(t.TempDir())
		cfg.Engines = e
		r, err := region.Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Open %+v: %v", e, err)
		}
		if r.Store == nil || r.Backend == nil || r.Cassandra != nil || r.Relay != nil || r.Redis != nil {
			t.Errorf("embedded default: Store %v Backend %v Cassandra %v Relay %v Redis %v", r.Store, r.Backend, r.Cassandra, r.Relay, r.Redis)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
