package etcdepoch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

func registryEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	return epochtest.Clients(epochtest.StartEmbedded(t).Endpoints())(t)
}

func states(t *testing.T, ctx context.Context, d *etcdepoch.Directory) string {
	t.Helper()
	recs, err := d.Registry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b []string
	for _, r := range recs {
		b = append(b, r.Name+"="+string(r.State))
	}
	return strings.Join(b, " ")
}

// TestRegistryLifecycle: Init records the creation regions as home; a region
// is added as joining, becomes active, drains and retires; a retired name is
// never added again nor allowed to start; a never-added name may not start;
// every transition outside the lifecycle is refused and changes nothing.
func TestRegistryLifecycle(t *testing.T) {
	cli := registryEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := epochtest.Config(t, 6)
	d := newDirectory(t, cli, cfg)
	if _, err := d.Registry(ctx); !errors.Is(err, etcdepoch.ErrNoRegistry) {
		t.Fatalf("registry before Init: %v, want ErrNoRegistry", err)
	}
	if err := d.Init(ctx, 6, []string{"us", "eu", "ap"}); err != nil {
		t.Fatal(err)
	}
	if got := states(t, ctx, d); got != "ap=home eu=home us=home" {
		t.Fatalf("after Init: %s", got)
	}
	// A later Init with a longer list (a region added since is configured
	// with every name) changes nothing: the homes are the creation's.
	if err := d.Init(ctx, 6, []string{"us", "eu", "ap", "sa"}); err != nil {
		t.Fatal(err)
	}
	if got := states(t, ctx, d); got != "ap=home eu=home us=home" {
		t.Fatalf("after a second Init: %s", got)
	}
	now := time.UnixMilli(1_800_000_000_000)
	if _, err := d.CheckRegionStart(ctx, "sa"); !errors.Is(err, etcdepoch.ErrRegionNotAdded) {
		t.Fatalf("start of a never-added region: %v", err)
	}
	if _, err := d.AddRegion(ctx, "us", now); !errors.Is(err, etcdepoch.ErrRegionExists) {
		t.Fatalf("add of a home region: %v", err)
	}
	rec, err := d.AddRegion(ctx, "sa", now)
	if err != nil || rec.State != epoch.StateJoining || !rec.Since.Equal(now) {
		t.Fatalf("add sa: %+v, %v", rec, err)
	}
	if rec, err := d.AddRegion(ctx, "sa", now.Add(time.Hour)); err != nil || rec.State != epoch.StateJoining || !rec.Since.Equal(now) {
		t.Fatalf("retried add: %+v, %v (want the first record)", rec, err)
	}
	if _, err := d.CheckRegionStart(ctx, "sa"); err != nil {
		t.Fatalf("start of a joining region: %v", err)
	}
	for _, bad := range []struct {
		name string
		to   epoch.RegionState
	}{{"sa", epoch.StateHome}, {"sa", epoch.StateRetired}, {"us", epoch.StateActive}, {"us", epoch.StateJoining}, {"sa", "gone"}} {
		if _, err := d.SetRegionState(ctx, bad.name, bad.to, now); !errors.Is(err, epoch.ErrBadTransition) {
			t.Errorf("%s → %s: %v, want ErrBadTransition", bad.name, bad.to, err)
		}
	}
	if _, err := d.SetRegionState(ctx, "zz", epoch.StateActive, now); !errors.Is(err, etcdepoch.ErrRegionNotAdded) {
		t.Fatalf("state of an unknown region: %v", err)
	}
	// Concurrent activations (the region's own loop, retried): all succeed,
	// one record.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.SetRegionState(ctx, "sa", epoch.StateActive, now.Add(time.Minute)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent activation: %v", err)
	}
	if got := states(t, ctx, d); got != "ap=home eu=home sa=active us=home" {
		t.Fatalf("after activation: %s", got)
	}
	for _, to := range []epoch.RegionState{epoch.StateDraining, epoch.StateDraining, epoch.StateRetired, epoch.StateRetired} {
		if _, err := d.SetRegionState(ctx, "sa", to, now.Add(2*time.Minute)); err != nil {
			t.Fatalf("sa → %s: %v", to, err)
		}
	}
	for _, to := range []epoch.RegionState{epoch.StateActive, epoch.StateDraining, epoch.StateHome, epoch.StateJoining} {
		if _, err := d.SetRegionState(ctx, "sa", to, now); !errors.Is(err, epoch.ErrBadTransition) {
			t.Errorf("retired → %s: %v, want ErrBadTransition", to, err)
		}
	}
	if _, err := d.AddRegion(ctx, "sa", now); !errors.Is(err, etcdepoch.ErrRegionRetired) {
		t.Fatalf("add of a retired name: %v", err)
	}
	if _, err := d.CheckRegionStart(ctx, "sa"); !errors.Is(err, etcdepoch.ErrRegionRetired) || !strings.Contains(err.Error(), "never reused") {
		t.Fatalf("start of a retired region: %v", err)
	}
	// A home region can be retired too.
	for _, to := range []epoch.RegionState{epoch.StateDraining, epoch.StateRetired} {
		if _, err := d.SetRegionState(ctx, "ap", to, now); err != nil {
			t.Fatalf("ap → %s: %v", to, err)
		}
	}
	if got := states(t, ctx, d); got != "ap=retired eu=home sa=retired us=home" {
		t.Fatalf("at the end: %s", got)
	}
}

// TestRegistryLegacyCluster: a cluster created before the registry has none;
// every region may start; the first add (or Init) creates it from the homes
// plus every region that has run in the cluster, so none is locked out.
func TestRegistryLegacyCluster(t *testing.T) {
	cli := registryEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := epochtest.Config(t, 6)
	d := newDirectory(t, cli, cfg)
	// What an older build left: homes, a range count, a data set of a region
	// that was started with a longer --regions list.
	for k, v := range map[string]string{cfg.HomesKey(): "us,eu", cfg.RangesKey(): "6"} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.RegisterDataSet(ctx, "ap", etcdepoch.NewID(), "", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"us", "ap", "never-seen"} {
		if _, err := d.CheckRegionStart(ctx, r); err != nil {
			t.Fatalf("start of %s on a cluster without a registry: %v", r, err)
		}
	}
	if st, err := d.RegistryStates(ctx); st != nil || err != nil {
		t.Fatalf("states without a registry: %v, %v", st, err)
	}
	if _, err := d.AddRegion(ctx, "sa", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := states(t, ctx, d); got != "ap=active eu=home sa=joining us=home" {
		t.Fatalf("registry created by the first add: %s", got)
	}
	if _, err := d.CheckRegionStart(ctx, "never-seen"); !errors.Is(err, etcdepoch.ErrRegionNotAdded) {
		t.Fatalf("once the registry exists, a never-added region: %v", err)
	}
}

// TestRegistryHostileValues: a value in etcd that is not a valid record is a
// clear error for every reader and writer, never a default state; nothing is
// written over it.
func TestRegistryHostileValues(t *testing.T) {
	cli := registryEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, bad := range []string{
		``, `{`, `null`, `[]`, `"home"`,
		`{"name":"x","state":"home","sinceMs":1}`,          // another name
		`{"name":"sa","state":"HOME","sinceMs":1}`,         // unknown state
		`{"name":"sa","state":"","sinceMs":1}`,             // no state
		`{"name":"sa","state":"active"}`,                   // no time
		`{"name":"sa","state":"active","sinceMs":-5}`,      // negative time
		`{"name":"sa","state":"active","sinceMs":1,"x":1}`, // unknown field
		`{"name":"sa","state":"active","sinceMs":1}{}`,     // trailing data
		`{"name":"sa","state":"active","sinceMs":1,"pad":"` + strings.Repeat("a", 2000) + `"}`,
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			cfg := epochtest.Config(t, 4)
			d := newDirectory(t, cli, cfg)
			if err := d.Init(ctx, 4, []string{"us", "eu"}); err != nil {
				t.Fatal(err)
			}
			key := cfg.Prefix + "registry/sa"
			if _, err := cli.Put(ctx, key, bad); err != nil {
				t.Fatal(err)
			}
			corrupt := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, etcdepoch.ErrRegistryCorrupt) {
					t.Errorf("%s over %q: %v, want ErrRegistryCorrupt", what, bad, err)
				}
			}
			_, err := d.Registry(ctx)
			corrupt("Registry", err)
			_, err = d.RegionRecord(ctx, "sa")
			corrupt("RegionRecord", err)
			_, err = d.CheckRegionStart(ctx, "sa")
			corrupt("CheckRegionStart", err)
			_, err = d.RegistryStates(ctx)
			corrupt("RegistryStates", err)
			_, err = d.SetRegionState(ctx, "sa", epoch.StateDraining, time.Now())
			corrupt("SetRegionState", err)
			_, err = d.AddRegion(ctx, "sa", time.Now())
			corrupt("AddRegion", err)
			if resp, err := cli.Get(ctx, key); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != bad {
				t.Fatalf("the hostile value was overwritten: %v %v", resp, err)
			}
		})
	}
	t.Run("marker", func(t *testing.T) {
		cfg := epochtest.Config(t, 4)
		d := newDirectory(t, cli, cfg)
		if err := d.Init(ctx, 4, []string{"us"}); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, cfg.Prefix+"meta/registry", "2"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CheckRegionStart(ctx, "us"); !errors.Is(err, etcdepoch.ErrRegistryCorrupt) {
			t.Fatalf("a registry of an unknown layout: %v", err)
		}
		if _, err := cli.Delete(ctx, cfg.Prefix+"meta/registry"); err != nil {
			t.Fatal(err)
		}
		if err := d.EnsureRegistry(ctx, []string{"us"}); !errors.Is(err, etcdepoch.ErrRegistryCorrupt) {
			t.Fatalf("records without the marker: %v", err)
		}
	})
}

// TestControllerFollowsRegistry: a dead region's ranges never fail over to a
// joining, draining or retired region (the next in preference order is
// skipped), and no range fails back to a retired home.
func TestControllerFollowsRegistry(t *testing.T) {
	cli := registryEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := epochtest.Config(t, 6)
	d := newDirectory(t, cli, cfg)
	if err := d.Init(ctx, 6, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.AddRegion(ctx, "j", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, to := range []epoch.RegionState{epoch.StateDraining, epoch.StateRetired} {
		if _, err := d.SetRegionState(ctx, "c", to, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	ka := func(name string) *etcdepoch.KeepAlive {
		k, err := etcdepoch.StartKeepAlive(ctx, cli, etcdepoch.KeepAliveConfig{Config: cfg, Region: epoch.RegionInfo{Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Close() })
		return k
	}
	// a is dead (never seen); j (joining, next after a) and c (retired) are
	// live; b is the only target.
	ka("j")
	ka("c")
	kb := ka("b")
	ctl, err := etcdepoch.StartController(cli, etcdepoch.ControllerConfig{Config: cfg, Name: "ctl", Preference: []string{"a", "j", "c", "b"},
		Grace: 100 * time.Millisecond, FailbackAfter: 200 * time.Millisecond, Homes: []string{"a", "b", "c", "j"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	pins := waitRegistryPins(t, d, func(ps []epoch.Pin) bool {
		for _, p := range ps {
			if p.Region == "a" {
				return false
			}
		}
		return true
	})
	for _, p := range pins {
		if p.Region == "j" || (p.Region == "c" && p.Epoch != 1) {
			t.Fatalf("range %d failed over to %s (%s)", p.Range, p.Region, states(t, ctx, d))
		}
	}
	// Now b dies: only j and c are live, and neither may take anything.
	if err := kb.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second) // > Grace + a few resyncs
	for time.Now().Before(deadline) {
		ps, err := d.Pins(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Region == "j" || (p.Region == "c" && p.Epoch != 1) {
				t.Fatalf("range %d moved to %s with no home or active region live", p.Range, p.Region)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := ctl.Failbacks(); n != 0 {
		t.Fatalf("%d failbacks (to a retired home, or to j which is home to nothing)", n)
	}
}

func waitRegistryPins(t *testing.T, d *etcdepoch.Directory, cond func([]epoch.Pin) bool) []epoch.Pin {
	t.Helper()
	var ps []epoch.Pin
	epochtest.Eventually(t, 20*time.Second, "pins", func() bool {
		var err error
		ps, err = d.Pins(context.Background())
		return err == nil && cond(ps)
	})
	return ps
}
