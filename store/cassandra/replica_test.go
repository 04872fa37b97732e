package cassandra_test

import (
	"context"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/store/cassandra"
)

// openRegion opens a store of region on a fresh keyspace (one keyspace per
// region, as a cluster of regions on one Cassandra has them).
func openRegion(t *testing.T, region string) *cassandra.Store { return openRegionB(t, region) }

func openRegionB(t testing.TB, region string) *cassandra.Store {
	t.Helper()
	ks := cassandra.FreshKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.Open(ctx, cassandra.Options{
		Session: cassandra.SharedSession(t), Keyspace: ks, Region: region, Partitions: 4,
		Clock:   clock.NewFake(time.UnixMilli(t0)),
		OnError: func(err error) { t.Logf("background: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestReplicaContract(t *testing.T) {
	cassandra.SharedSession(t)
	edgetest.RunReplica(t, func(t *testing.T, region string) edgetest.ReplicaStore { return openRegion(t, region) })
}

func TestReplicaCellsContract(t *testing.T) {
	cassandra.SharedSession(t)
	edgetest.RunReplicaCells(t, func(t *testing.T, region string) edgetest.CellReplicaStore { return openRegion(t, region) })
}
