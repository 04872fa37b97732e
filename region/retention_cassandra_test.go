package region_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/region"
)

// TestCassandraRegionRetention: a region on Cassandra runs the retention
// loop of --log-retention (startRetention) on its clock: once the folded log
// is older than the horizon it is truncated (the metric counts it, reading
// below the floor fails), and counts stay exact.
func TestCassandraRegionRetention(t *testing.T) {
	hosts, ks := mixedKeyspace(t)
	clk := clock.NewFake(time.Now())
	cfg := config(t.TempDir())
	cfg.Clock = clk
	cfg.Engines = region.Engines{Store: region.StoreCassandra,
		Cassandra: region.CassandraEngine{Hosts: hosts, Keyspace: ks, Timeout: 20 * time.Second}}
	cfg.Lifecycle = region.Lifecycle{LogRetention: time.Hour, RetentionInterval: time.Minute}
	r, srv := open(t, cfg)
	if r.Cassandra == nil {
		t.Fatal("not a Cassandra region")
	}
	const n = 12
	for i := 0; i < n; i++ {
		if _, err := write(t, srv, fmt.Sprintf("u%d", i), "item", fmt.Sprintf("k%d", i), true); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		deleted, _ := metricValue(t, r.Registry, "likes_retention_log_events_deleted_total")
		c, err := r.Cassandra.Count(ctx, "item")
		if err != nil {
			t.Fatal(err)
		}
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
		runtime.Gosched() // let the aggregators and the retainer take their ticks
	}
	var floors uint64
	for p := 0; p < cfg.Partitions; p++ {
		fl, err := r.Cassandra.LogFloor(ctx, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		floors += fl
	}
	if floors < n {
		t.Fatalf("floors sum to %d, want >= %d", floors, n)
	}
}
