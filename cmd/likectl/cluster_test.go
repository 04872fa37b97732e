package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// TestPinsReadClusterMeta: `likectl cluster` and `pins list -o json` show
// the metadata Init wrote; moves compute notBefore from the cluster's lease
// TTL and skew, not from flags; a deprecated flag that disagrees is refused
// (exit 2); a cluster without metadata needs them for moves; a hostile value
// is a clear failure; ranges without a pin make pins list a finding.
func TestPinsReadClusterMeta(t *testing.T) {
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
	cfg := epoch.Config{Ranges: 4, TTL: 2 * time.Second, MaxSkew: 300 * time.Millisecond}
	d, err := etcdepoch.NewDirectory(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx, 4, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	etcd := strings.Join(e.Endpoints(), ",")
	ctl := func(args ...string) (string, string, error) {
		t.Helper()
		return likectl(t, append(args, "--etcd", etcd)...)
	}

	out, _, err := ctl("cluster", "-o", "json")
	var c clusterJSON
	if err != nil || json.Unmarshal([]byte(out), &c) != nil {
		t.Fatalf("cluster -o json: %v\n%s", err, out)
	}
	if c.Layout != 1 || c.Ranges != 4 || c.LeaseTTLMs != 2000 || c.MaxSkewMs == nil || *c.MaxSkewMs != 300 || c.Legacy ||
		c.CreatedAt == "" || strings.Join(c.Homes, ",") != "a,b" {
		t.Fatalf("cluster -o json = %s", out)
	}
	if out, _, err := ctl("cluster"); err != nil || !strings.Contains(out, "LEASE TTL  2s") {
		t.Fatalf("cluster table: %v\n%s", err, out)
	}

	out, _, err = ctl("pins", "list", "-o", "json")
	var pl pinsListJSON
	if err != nil || json.Unmarshal([]byte(out), &pl) != nil {
		t.Fatalf("pins list -o json: %v\n%s", err, out)
	}
	if len(pl.Pins) != 4 || pl.Truncated || pl.Cluster.Ranges != 4 || pl.Owned["a"] != 2 || pl.Pins[1].Region != "b" || pl.Pins[1].Home != "b" || pl.Pins[1].Epoch != 1 {
		t.Fatalf("pins list -o json = %s", out)
	}

	// Deprecated flags: refused when they disagree, accepted with a warning when they agree.
	for _, bad := range [][]string{{"--lease-ttl", "5s"}, {"--max-skew", "1s"}, {"--ranges", "256"}} {
		_, _, err := ctl(append([]string{"pins", "move", "--range", "1", "--to", "a"}, bad...)...)
		if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "disagrees") {
			t.Fatalf("pins move %v: %v", bad, err)
		}
	}
	if p, _ := d.Pin(ctx, 1); p.Epoch != 1 {
		t.Fatalf("a refused move moved the pin: %+v", p)
	}
	_, errOut, err := ctl("pins", "list", "--lease-ttl", "2s", "--ranges", "4")
	if err != nil || !strings.Contains(errOut, "deprecated") {
		t.Fatalf("agreeing deprecated flags: %v, stderr %q", err, errOut)
	}

	// notBefore comes from the cluster's TTL + skew (2.3s), not epoch's defaults (5.5s).
	before := time.Now()
	if _, _, err := ctl("pins", "move", "--range", "1", "--to", "a"); err != nil {
		t.Fatal(err)
	}
	p, err := d.Pin(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := before.Add(2300*time.Millisecond-time.Millisecond), time.Now().Add(2300*time.Millisecond); p.NotBefore.Before(lo) || p.NotBefore.After(hi) || p.Epoch != 2 {
		t.Fatalf("moved pin %+v: notBefore not in [%v, %v]", p, lo, hi)
	}

	// Drain prints progress on stderr, none with --quiet.
	_, errOut, err = ctl("pins", "drain", "--from", "b", "--to", "a")
	if err != nil || !strings.Contains(errOut, "pins drain: 1/1 ranges moved") {
		t.Fatalf("drain: %v, stderr %q", err, errOut)
	}
	if _, errOut, err = ctl("pins", "drain", "--from", "a", "--to", "b", "--quiet", "--unplanned"); err != nil || errOut != "" {
		t.Fatalf("quiet drain: %v, stderr %q", err, errOut)
	}

	// Ranges without a pin: a finding, said in the JSON and the table.
	if _, err := cli.Delete(ctx, d.Config().PinKey(3)); err != nil {
		t.Fatal(err)
	}
	out, _, err = ctl("pins", "list", "-o", "json")
	pl = pinsListJSON{}
	if exitCode(err) != exitFinding || json.Unmarshal([]byte(out), &pl) != nil || !pl.Truncated || len(pl.Missing) != 1 || pl.Missing[0] != 3 {
		t.Fatalf("pins list with a missing pin: %v\n%s", err, out)
	}
	if out, _, _ := ctl("pins", "list"); !strings.Contains(out, "INCOMPLETE: 1 of 4 ranges have no pin") {
		t.Fatalf("table:\n%s", out)
	}

	// A cluster of an older build: no metadata.
	metaKey := etcdepoch.MetaKey(d.Config())
	if _, err := cli.Delete(ctx, metaKey); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ctl("pins", "move", "--range", "0", "--to", "b"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "no metadata") {
		t.Fatalf("move on a cluster without metadata: %v", err)
	}
	if _, _, err := ctl("pins", "move", "--range", "0", "--to", "b", "--lease-ttl", "2s", "--max-skew", "300ms"); err != nil {
		t.Fatalf("move with the legacy flags: %v", err)
	}
	out, _, err = ctl("cluster", "-o", "json")
	c = clusterJSON{}
	if exitCode(err) != exitFinding || json.Unmarshal([]byte(out), &c) != nil || !c.Legacy || c.Ranges != 4 {
		t.Fatalf("cluster without metadata: %v\n%s", err, out)
	}

	// Hostile metadata: a clear failure, never defaults.
	if _, err := cli.Put(ctx, metaKey, `{"layout":1,"ranges":4,"leaseTTLMs":0,"maxSkewMs":0}`); err != nil {
		t.Fatal(err)
	}
	_, _, err = ctl("pins", "list")
	if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "invalid cluster metadata") || !strings.Contains(err.Error(), "lease TTL") {
		t.Fatalf("pins list over bad metadata: %v", err)
	}

	// No cluster at all.
	if _, err := cli.Delete(ctx, "/likes/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ctl("pins", "list"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "no likes cluster") {
		t.Fatalf("pins list on an empty etcd: %v", err)
	}
}

// TestRegionsJSON: `regions -o json` reads every live region's status; a
// region whose status cannot be read makes the result partial: its entry
// says why, "truncated" is true, the table says PARTIAL, and the exit status is 1.
func TestRegionsJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Setenv("LIKES_AUTH_SECRET", "")
	e := epochtest.StartEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg, _ := epoch.Config{Ranges: 4}.WithDefaults()
	d, err := etcdepoch.NewDirectory(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx, 4, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"region":"a","asOf":"2026-01-01T00:00:00Z","aggregatorLagEvents":3,"lastKeepaliveAgo":"1s","pinsOwned":2,
			"replication":[{"Region":"b","LagEvents":7,"LastError":"","Active":true}]}`))
	}))
	t.Cleanup(srv.Close)
	etcd := strings.Join(e.Endpoints(), ",")
	start := func(name, http string) {
		k, err := etcdepoch.StartKeepAlive(ctx, cli, etcdepoch.KeepAliveConfig{Config: cfg, Region: epoch.RegionInfo{Name: name, HTTP: http}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Close() })
	}
	start("a", srv.URL)
	out, _, err := likectl(t, "regions", "--etcd", etcd, "-o", "json")
	var rj regionsJSON
	if err != nil || json.Unmarshal([]byte(out), &rj) != nil || len(rj.Regions) != 1 || rj.Truncated {
		t.Fatalf("regions -o json: %v\n%s", err, out)
	}
	if r := rj.Regions[0]; r.Name != "a" || r.AggregatorLag != 3 || r.PinsOwned != 2 || len(r.Replication) != 1 || r.Replication[0].LagEvents != 7 || r.Error != "" {
		t.Fatalf("region a = %+v", r)
	}
	start("b", "http://"+freeAddr(t))
	out, _, err = likectl(t, "regions", "--etcd", etcd, "-o", "json")
	rj = regionsJSON{}
	if exitCode(err) != exitFinding || json.Unmarshal([]byte(out), &rj) != nil || len(rj.Regions) != 2 || !rj.Truncated || rj.Regions[1].Error == "" {
		t.Fatalf("regions with one unreachable: %v\n%s", err, out)
	}
	if out, _, err := likectl(t, "regions", "--etcd", etcd); exitCode(err) != exitFinding || !strings.Contains(out, "PARTIAL") {
		t.Fatalf("regions table: %v\n%s", err, out)
	}
}
