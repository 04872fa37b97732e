package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// TestRegionsLifecycleCommands: regions add records a joining region (JSON,
// exit 0), a second add of a home is refused (exit 2); regions list shows
// every state; pins drain to a region that is not in the registry is
// refused; regions retire moves the region's ranges away (planned), waits
// until they settle, marks it retired; then add of the name and a move to it
// are refused; usage errors exit 2.
func TestRegionsLifecycleCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg := epoch.Config{Ranges: 6, TTL: 2 * time.Second, MaxSkew: 100 * time.Millisecond}
	d, err := etcdepoch.NewDirectory(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx, 6, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		k, err := etcdepoch.StartKeepAlive(ctx, cli, etcdepoch.KeepAliveConfig{Config: d.Config(), Region: epoch.RegionInfo{Name: n}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Close() })
	}
	etcd := strings.Join(e.Endpoints(), ",")
	ctl := func(args ...string) (string, string, error) {
		t.Helper()
		return likectl(t, append(args, "--etcd", etcd)...)
	}
	for _, bad := range [][]string{{"regions", "add"}, {"regions", "add", "a/b"}, {"regions", "retire"}, {"regions", "add", "x", "y"},
		{"regions", "retire", "x", "--timeout", "0s"}, {"regions", "list", "extra"}} {
		if _, _, err := likectl(t, bad...); exitCode(err) != exitFailure {
			t.Errorf("%q: %v, want exit 2", bad, err)
		}
	}
	out, _, err := ctl("regions", "add", "d", "-o", "json")
	var added struct{ Name, State, Since string }
	if err != nil || json.Unmarshal([]byte(out), &added) != nil || added.Name != "d" || added.State != "joining" || added.Since == "" {
		t.Fatalf("regions add d: %v\n%s", err, out)
	}
	if _, _, err := ctl("regions", "add", "a"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "already part") {
		t.Fatalf("add of a home: %v", err)
	}
	if _, _, err := ctl("pins", "drain", "--from", "a", "--to", "zz"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "never added") {
		t.Fatalf("drain to a never-added region: %v", err)
	}

	// The new owners of c's ranges settle their planned moves, as regions'
	// catch-up barriers would.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ps, err := d.Pins(ctx)
			if err != nil {
				continue
			}
			for _, p := range ps {
				if p.CatchUp {
					_, _ = d.Settle(ctx, p.Range, p.Epoch)
				}
			}
		}
	})
	out, stderr, err := ctl("regions", "retire", "c", "--timeout", "20s")
	close(stop)
	wg.Wait()
	if err != nil || !strings.Contains(out, "region c retired: 2 ranges moved") || !strings.Contains(stderr, "ranges moved") {
		t.Fatalf("regions retire c: %v\n%s\n%s", err, out, stderr)
	}
	ps, err := d.Pins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Region == "c" || p.Region == "d" || p.CatchUp {
			t.Fatalf("after retire: range %d on %s (catching up %v)", p.Range, p.Region, p.CatchUp)
		}
	}
	if _, stderr, err := ctl("regions", "retire", "c", "--quiet"); err != nil || stderr != "" {
		t.Fatalf("retire again: %v %q", err, stderr)
	}
	if _, _, err := ctl("regions", "add", "c"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "never reused") {
		t.Fatalf("add of a retired name: %v", err)
	}
	if _, _, err := ctl("pins", "move", "--range", "0", "--to", "c"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "retired") {
		t.Fatalf("move to a retired region: %v", err)
	}
	out, _, err = ctl("regions", "list", "-o", "json")
	var rl registryJSON
	if err != nil || json.Unmarshal([]byte(out), &rl) != nil || !rl.Registry {
		t.Fatalf("regions list: %v\n%s", err, out)
	}
	var got []string
	for _, r := range rl.Regions {
		got = append(got, r.Name+"="+r.State)
		if r.Name == "c" && (!r.Live || r.PinsOwned != 0 || r.HomeRanges != 2) {
			t.Fatalf("c listed as %+v", r)
		}
	}
	if strings.Join(got, " ") != "a=home b=home c=retired d=joining" {
		t.Fatalf("regions list = %s", got)
	}
	if out, _, err := ctl("regions", "list"); err != nil || !strings.Contains(out, "retired") {
		t.Fatalf("regions list table: %v\n%s", err, out)
	}
	// Nobody settles now: a's retirement times out waiting (exit 2) and a
	// stays draining; b, the last target region, cannot be retired.
	if _, _, err := ctl("regions", "retire", "a", "--quiet", "--timeout", "1s"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "still catching up") {
		t.Fatalf("retire a without catch-up: %v", err)
	}
	if _, _, err := ctl("regions", "retire", "b", "--quiet", "--timeout", "1s"); err == nil || !strings.Contains(err.Error(), "last home or active") {
		t.Fatalf("retire of the last target region: %v", err)
	}
}
