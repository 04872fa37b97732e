package etcdepoch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// TestClusterIDAndDataSets: the cluster id is created once and read back the
// same; a region's data set is registered once, replaced only by naming the
// one it replaces, and a hostile value in etcd is a clear error.
func TestClusterIDAndDataSets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := etcdepoch.NewDirectory(cli, epoch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id1, err := dir.ClusterID(ctx)
	if err != nil || etcdepoch.ValidID(id1) != nil {
		t.Fatalf("cluster id %q: %v", id1, err)
	}
	if id2, err := dir.ClusterID(ctx); err != nil || id2 != id1 {
		t.Fatalf("second read %q (%v), want %q", id2, err, id1)
	}
	if _, ok, err := dir.DataSet(ctx, "us"); ok || err != nil {
		t.Fatalf("data set before registration: ok=%v err=%v", ok, err)
	}
	a, b := etcdepoch.NewID(), etcdepoch.NewID()
	now := time.Unix(1_700_000_000, 0)
	if err := dir.RegisterDataSet(ctx, "us", a, "", now); err != nil {
		t.Fatal(err)
	}
	if err := dir.RegisterDataSet(ctx, "us", a, "", now); err != nil {
		t.Fatalf("idempotent registration: %v", err)
	}
	if err := dir.RegisterDataSet(ctx, "us", b, "", now); !errors.Is(err, etcdepoch.ErrDataSetReplaced) {
		t.Fatalf("second data set without naming the first: %v", err)
	}
	if err := dir.RegisterDataSet(ctx, "us", b, a, now); err != nil {
		t.Fatalf("replacing a named data set: %v", err)
	}
	if ds, ok, err := dir.DataSet(ctx, "us"); !ok || err != nil || ds.ID != b {
		t.Fatalf("data set %+v ok=%v err=%v, want %s", ds, ok, err, b)
	}
	if err := dir.RegisterDataSet(ctx, "us", "not-an-id", "", now); err == nil {
		t.Fatal("a malformed id was registered")
	}
	if _, err := cli.Put(ctx, epoch.DefaultPrefix+"datasets/eu", `{"id":"../../etc"}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dir.DataSet(ctx, "eu"); err == nil {
		t.Fatal("a hostile data set value was accepted")
	}
}
