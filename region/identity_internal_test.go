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
		// A position base past kafkalog.MaxPositionBase (3·2^60) would push
		// positions past replica.MaxHWM; a negative one is not a uint64.
		"huge base":     `{"format":1,"region":"us","dataSet":"00000000000000000000000000000000","positionBase":3458764513820540929}`,
		"negative base": `{"format":1,"region":"us","dataSet":"00000000000000000000000000000000","positionBase":-1}`,
		"huge":          strings.Repeat(" ", 5000) + "{}",
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

// memHolder is an identity holder in memory that records what was done to
// it, in order.
type memHolder struct {
	id    *Identity
	data  bool
	steps []string
}

var _ identityHolder = (*memHolder)(nil)

func (m *memHolder) where() string { return "mem" }

func (m *memHolder) read(context.Context) (Identity, bool, error) {
	if m.id == nil {
		return Identity{}, false, nil
	}
	return *m.id, true, nil
}

func (m *memHolder) write(_ context.Context, id Identity, prev string) error {
	if (m.id == nil) != (prev == "") || (m.id != nil && m.id.DataSet != prev) {
		return errors.New("identity changed")
	}
	m.steps = append(m.steps, "write")
	m.id = &id
	return nil
}

func (m *memHolder) legacy(context.Context) (bool, error) { return m.data, nil }

func (m *memHolder) prepare(_ context.Context, bootstrap bool) error {
	m.steps = append(m.steps, map[bool]string{true: "prepare bootstrap", false: "prepare"}[bootstrap])
	return nil
}

// TestIdentityBootstrapOrderAndCompletion: a bootstrap prepares (a keyspace:
// marks its rebuilds) before its identity becomes visible; one whose
// identity was written but not registered (its process died in between, or
// another node of the region is registering it right now) is completed by
// the next start with --bootstrap-from-peers while the holder holds nothing
// else, and refused as stale otherwise.
func TestIdentityBootstrapOrderAndCompletion(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1_700_000_000, 0)
	ds := newFakeDataSets()
	ds.sets["us"] = etcdepoch.NewID() // the lost data set
	old := ds.sets["us"]
	h := &memHolder{}
	dec, err := checkIdentityOf(ctx, h, "us", ds, true, "", now)
	if err != nil || !dec.Bootstrap || strings.Join(h.steps, ",") != "prepare bootstrap,write" {
		t.Fatalf("bootstrap: %+v %v, steps %v", dec, err, h.steps)
	}
	// The same identity, never registered: a second node (or the restart)
	// completes it.
	ds.sets["us"] = old
	for name, tc := range map[string]struct {
		bootstrap bool
		noRebuild string
		data      bool
	}{
		"without the flag":   {false, "", false},
		"cannot rebuild":     {true, "aggregators on Kafka", false},
		"holds data already": {true, "", true},
	} {
		h2 := &memHolder{id: h.id, data: tc.data}
		if _, err := checkIdentityOf(ctx, h2, "us", ds, tc.bootstrap, tc.noRebuild, now); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "stale") {
			t.Errorf("%s: %v, want the stale refusal", name, err)
		}
		if ds.sets["us"] != old || len(h2.steps) != 0 {
			t.Errorf("%s: registered %s, steps %v: a refusal must change nothing", name, ds.sets["us"], h2.steps)
		}
	}
	h2 := &memHolder{id: h.id}
	dec2, err := checkIdentityOf(ctx, h2, "us", ds, true, "", now)
	if err != nil || !dec2.Bootstrap || dec2.Identity != *h.id || ds.sets["us"] != h.id.DataSet || strings.Join(h2.steps, ",") != "prepare bootstrap" {
		t.Fatalf("completion: %+v %v, registered %s, steps %v", dec2, err, ds.sets["us"], h2.steps)
	}
	// Registered now: every later start is an ordinary restart.
	h3 := &memHolder{id: h.id, data: true}
	if dec3, err := checkIdentityOf(ctx, h3, "us", ds, true, "", now); err != nil || dec3.Bootstrap || len(h3.steps) != 0 {
		t.Fatalf("restart: %+v %v, steps %v", dec3, err, h3.steps)
	}
}
