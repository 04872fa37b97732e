package region_test

// A cluster that mixes engines: "eu" on Cassandra (edges, outbox, cells; the
// store's own log), "us" and "ap" on the embedded store. Replication ships
// Cassandra's outbox and cell feed and applies peers' events through the same
// rule (edge.ApplyRemoteEvent) as Pebble does. Skipped without a Cassandra
// (LIKES_TEST_CASSANDRA_HOSTS: bash scripts/servers.sh up cassandra, then
// eval "$(bash scripts/servers.sh env)").

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/cassandra"
)

// mixedKeyspace migrates a fresh keyspace on the test Cassandra (skipping t
// when none is configured) and drops it when t ends.
func mixedKeyspace(t *testing.T) ([]string, string) {
	t.Helper()
	hosts := cassandra.ParseHosts(os.Getenv("LIKES_TEST_CASSANDRA_HOSTS"))
	if len(hosts) == 0 {
		t.Skip("LIKES_TEST_CASSANDRA_HOSTS is not set: no Cassandra for the mixed-engine cluster " +
			"(bash scripts/servers.sh up cassandra && eval \"$(bash scripts/servers.sh env)\")")
	}
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	ks := "likes_mixed_eu_" + hex.EncodeToString(rnd[:])
	sess, err := cassandra.Connect(cassandra.SessionConfig{Hosts: hosts, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cassandra.Migrate(ctx, sess, ks, ""); err != nil {
		sess.Close()
		t.Fatalf("migrate %s: %v", ks, err)
	}
	t.Cleanup(func() {
		defer sess.Close()
		if os.Getenv("LIKES_TEST_CASSANDRA_KEEP") != "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := sess.Query("DROP KEYSPACE IF EXISTS " + ks).WithContext(ctx).Exec(); err != nil {
			t.Logf("drop keyspace %s: %v", ks, err)
		}
	})
	return hosts, ks
}

// TestMixedEnginesCluster: likes written through every region (forwarded to
// the owner of each user's range, about a third of them on Cassandra)
// converge in all three regions to counts == LIKED edges; retries of the same
// keys through other regions replay and count nothing twice.
func TestMixedEnginesCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd, two embedded regions and one on Cassandra")
	}
	hosts, ks := mixedKeyspace(t)
	mixedCluster(t, region.Engines{Store: region.StoreCassandra,
		Cassandra: region.CassandraEngine{Hosts: hosts, Keyspace: ks, Timeout: 20 * time.Second}})
}

// TestMixedEnginesClusterKafka is TestMixedEnginesCluster with eu's
// aggregators reading its log from Kafka (the relay publishes the Cassandra
// outbox, corrections included): eu's cell positions are Kafka offsets.
func TestMixedEnginesClusterKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd, two embedded regions and one on Cassandra and Kafka")
	}
	brokers := cassandra.ParseHosts(os.Getenv("LIKES_TEST_KAFKA_BROKERS"))
	if len(brokers) == 0 {
		t.Skip("LIKES_TEST_KAFKA_BROKERS is not set (bash scripts/servers.sh up kafka && eval \"$(bash scripts/servers.sh env)\")")
	}
	hosts, ks := mixedKeyspace(t)
	topic := "likes-mixed." + ks
	region.DeleteTopicsAtEnd(t, brokers, topic)
	mixedCluster(t, region.Engines{Store: region.StoreCassandra,
		Cassandra: region.CassandraEngine{Hosts: hosts, Keyspace: ks, Timeout: 20 * time.Second},
		Log:       region.LogKafka,
		Kafka:     region.KafkaEngine{Brokers: brokers, Topic: topic, PollInterval: 10 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond}})
}

// TestEnginesThreeRegions (issue 12): all three regions on Cassandra +
// Kafka + Redis (a keyspace, a topic and a Redis prefix each, on the one
// server of each engine) run the three-region suite: replication and
// forwarding, idempotency across regions, a pin move under load, lease loss
// failing closed; every region's Cassandra holds the edges the others' owners
// wrote.
func TestEnginesThreeRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and three regions on the engines")
	}
	engines := map[string]region.Engines{}
	for _, name := range []string{"us", "eu", "ap"} {
		engines[name] = region.EnginesForTest(t, name)
	}
	triSuite(t, func(name string, cfg *region.Config) { cfg.Engines = engines[name] }, []string{"us", "eu", "ap"})
}

// mixedCluster runs the three-region suite with eu on engines.
func mixedCluster(t *testing.T, engines region.Engines) {
	triSuite(t, func(name string, cfg *region.Config) {
		if name == "eu" {
			cfg.Engines = engines
		}
	}, []string{"eu"})
}

// triSuite runs the three-region suite on a cluster configured by cfg; the
// regions named in onCassandra must be on Cassandra and hold the edges of
// users whose ranges other regions own.
func triSuite(t *testing.T, cfg func(name string, cfg *region.Config), onCassandra []string) {
	c := startTriWith(t, triOpts{region: cfg})
	for _, name := range onCassandra {
		if r := c.byName[name].r; r.Cassandra == nil || r.Store != nil {
			t.Fatalf("region %s is not on Cassandra", name)
		}
	}
	users := triUsers(1)
	for _, st := range []struct {
		name string
		f    func(*testing.T, *triCluster, []string)
	}{
		{"ReplicationAndForwarding", testTriReplication},
		{"IdempotencyAcrossRegions", testTriIdempotency},
		{"PinMoveUnderLoad", testTriPinMove},
		{"LeaseLossFailsClosed", testTriLeaseLoss},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.f(t, c, users) }) {
			return
		}
	}
	// Cassandra holds the edges the other regions' owners wrote, applied
	// from their logs.
	ps := c.mustPins(t)
	for _, name := range onCassandra {
		r := c.byName[name].r
		remote := 0
		for _, u := range users {
			if triOwner(ps, u).Region == name {
				continue
			}
			if e, ok, err := r.Cassandra.Edge(context.Background(), "rep-a", u); err != nil || !ok || e.Version.Epoch == 0 {
				t.Fatalf("%s's Cassandra edge (rep-a, %s): %+v found %v err %v", name, u, e, ok, err)
			}
			remote++
		}
		if remote == 0 {
			t.Fatalf("%s: no user of another region's range", name)
		}
	}
}
