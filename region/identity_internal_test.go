package region

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// fakeDataSets is an in-memory etcd for the identity check.
type fakeDataSets struct {
	cluster string
	sets    map[string]string
}

func (f *fakeDataSets) ClusterID(context.Context) (string, error) { return f.cluster, nil }

func (f *fakeDataSets) DataSet(_ context.Context, region string) (etcdepoch.DataSet, bool, error) {
	id, ok := f.sets[region]
	return etcdepoch.DataSet{ID: id}, ok, nil
}

func (f *fakeDataSets) RegisterDataSet(_ context.Context, region, id, replace string, _ time.Time) error {
	cur, ok := f.sets[region]
	if ok && cur == id {
		return nil
	}
	if (ok && cur != replace) || (!ok && replace != "") {
		return etcdepoch.ErrDataSetReplaced
	}
	f.sets[region] = id
	return nil
}

func newFakeDataSets() *fakeDataSets {
	return &fakeDataSets{cluster: etcdepoch.NewID(), sets: map[string]string{}}
}

// TestIdentityFirstStartAndRestart: a first start writes the identity and
// registers the data set; a restart on the same folder passes.
func TestIdentityFirstStartAndRestart(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1_700_000_000, 0)
	ds := newFakeDataSets()
	dir := filepath.Join(t.TempDir(), "us")
	dec, err := checkIdentity(ctx, dir, "us", ds, false, now)
	if err != nil || !dec.Created || dec.Identity.Cluster != ds.cluster || ds.sets["us"] != dec.Identity.DataSet {
		t.Fatalf("first start: %+v %v (etcd %v)", dec, err, ds.sets)
	}
	again, err := checkIdentity(ctx, dir, "us", ds, false, now)
	if err != nil || again.Created || again.Identity != dec.Identity {
		t.Fatalf("restart: %+v %v", again, err)
	}
}

// TestIdentityRefusals: a folder of another region or cluster, a stale folder
// (the region was rebuilt elsewhere), an empty folder for a region with state,
// and a legacy database the cluster disagrees with are refused with
// ErrIdentity; --bootstrap-from-peers takes the empty folder over.
func TestIdentityRefusals(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1_700_000_000, 0)
	ds := newFakeDataSets()
	base := t.TempDir()
	us := filepath.Join(base, "us")
	if _, err := checkIdentity(ctx, us, "us", ds, false, now); err != nil {
		t.Fatal(err)
	}
	refused := func(name, dir, region string, ds dataSets, bootstrap bool, want string) {
		t.Helper()
		_, err := checkIdentity(ctx, dir, region, ds, bootstrap, now)
		if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrIdentity mentioning %q", name, err, want)
		}
	}
	refused("another region", us, "eu", ds, false, `holds region "us"`)
	other := newFakeDataSets()
	refused("another cluster", us, "us", other, false, "belongs to cluster")
	refused("a standalone start on a cluster folder", us, "us", nil, false, "standalone")
	refused("empty folder, region has state", filepath.Join(base, "us-new"), "us", ds, false, "--bootstrap-from-peers")

	// Bootstrap: the new folder replaces the registered data set; the old
	// folder is stale from then on.
	dec, err := checkIdentity(ctx, filepath.Join(base, "us-new"), "us", ds, true, now)
	if err != nil || !dec.Bootstrap || ds.sets["us"] != dec.Identity.DataSet {
		t.Fatalf("bootstrap: %+v %v", dec, err)
	}
	refused("stale folder", us, "us", ds, false, "stale")

	// A database without identity while etcd records another data set.
	legacy := filepath.Join(base, "legacy")
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(legacy, "CURRENT"), []byte("MANIFEST-000001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused("legacy database, registered elsewhere", legacy, "us", ds, false, "without an identity")
	// ... and adopted when etcd records nothing for the region.
	if dec, err := checkIdentity(ctx, legacy, "ap", ds, false, now); err != nil || dec.Created {
		t.Fatalf("legacy adoption: %+v %v", dec, err)
	}
}

// TestIdentityHostileFile: a hostile identity file is a clear error, never a
// panic or an adoption.
func TestIdentityHostileFile(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1_700_000_000, 0)
	ds := newFakeDataSets()
	for name, content := range map[string]string{
		"not json":       "garbage",
		"unknown field":  `{"format":1,"cluster":"","region":"us","dataSet":"00000000000000000000000000000000","x":1}`,
		"bad format":     `{"format":2,"region":"us","dataSet":"00000000000000000000000000000000"}`,
		"bad region":     `{"format":1,"region":"u s","dataSet":"00000000000000000000000000000000"}`,
		"bad data set":   `{"format":1,"region":"us","dataSet":"../../etc/passwd"}`,
		"bad cluster id": `{"format":1,"cluster":"ZZ","region":"us","dataSet":"00000000000000000000000000000000"}`,
		"trailing data":  `{"format":1,"region":"us","dataSet":"00000000000000000000000000000000"} {}`,
		"huge":           strings.Repeat(" ", 5000) + "{}",
	} {
		dir := filepath.Join(t.TempDir(), "us")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, identityFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := checkIdentity(ctx, dir, "us", ds, false, now); !errors.Is(err, ErrIdentity) {
			t.Errorf("%s: %v, want ErrIdentity", name, err)
		}
	}
}
