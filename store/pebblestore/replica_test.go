package pebblestore_test

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

func openReplica(t *testing.T, region string) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: vfs.NewMem(), Region: region, Partitions: 4, Clock: clock.NewFake(time.UnixMilli(t0)), CacheBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestReplicaContract(t *testing.T) {
	edgetest.RunReplica(t, func(t *testing.T, region string) edgetest.ReplicaStore { return openReplica(t, region) })
}

func TestReplicaCellsContract(t *testing.T) {
	edgetest.RunReplicaCells(t, func(t *testing.T, region string) edgetest.CellReplicaStore { return openReplica(t, region) })
}
