package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// TestPinsRebalance: `pins list` shows each range's home beside its owner and
// counts the ranges away; `pins rebalance` moves them home as planned moves,
// except to a home that is draining.
func TestPinsRebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	ctx := context.Background()
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg, err := epoch.Config{Ranges: 4}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d, err := etcdepoch.NewDirectory(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx, 4, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	kas := map[string]*etcdepoch.KeepAlive{}
	for _, name := range []string{"a", "b"} {
		k, err := etcdepoch.StartKeepAlive(ctx, cli, etcdepoch.KeepAliveConfig{Config: cfg, Region: epoch.RegionInfo{Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Close() })
		kas[name] = k
	}
	if _, err := d.Move(ctx, 0, 1, "b", time.Now()); err != nil { // range 0 (home a) to b
		t.Fatal(err)
	}
	if _, err := d.Move(ctx, 1, 1, "a", time.Now()); err != nil { // range 1 (home b) to a
		t.Fatal(err)
	}
	likectl := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		args = append(args, "--etcd", strings.Join(e.Endpoints(), ","))
		if err := run(ctx, args, &out, &errb); err != nil {
			t.Fatalf("likectl %v: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}
	list := likectl("pins", "list")
	if !strings.Contains(list, "HOME") || !strings.Contains(list, "2 ranges are away from their home") {
		t.Fatalf("pins list:\n%s", list)
	}
	if err := kas["b"].SetDraining(ctx); err != nil { // range 1 (home b) must stay at a
		t.Fatal(err)
	}
	reb := likectl("pins", "rebalance")
	if !strings.Contains(reb, "moved 1 ranges home; 1 away ranges left") {
		t.Fatalf("pins rebalance:\n%s", reb)
	}
	p0, err := d.Pin(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := d.Pin(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p0.Region != "a" || !p0.CatchUp || p0.From != "b" || p0.Epoch != 3 || p1.Region != "a" || p1.Epoch != 2 {
		t.Fatalf("after rebalance: range 0 %+v (want home a, planned from b), range 1 %+v (want kept at a)", p0, p1)
	}
}
