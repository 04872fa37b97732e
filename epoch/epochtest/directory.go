package epochtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// RunDirectory is the contract of the pin directory, region leases and the
// region list. newClient returns a client to the etcd under test (closed by
// the factory when t ends).
func RunDirectory(t *testing.T, newClient func(t *testing.T) *clientv3.Client) {
	t.Run("InitCreatesRoundRobinAtEpoch1", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 16)
		d := newDir(t, newClient(t), cfg)
		ctx := ctxFor(t)
		if err := d.Init(ctx, 16, []string{"a", "b", "c"}); err != nil {
			t.Fatal(err)
		}
		pins := must[[]epoch.Pin](t)(d.Pins(ctx))
		if len(pins) != 16 {
			t.Fatalf("got %d pins, want 16", len(pins))
		}
		for i, p := range pins {
			want := []string{"a", "b", "c"}[i%3]
			if p.Range != uint32(i) || p.Region != want || p.Epoch != 1 || !p.NotBefore.IsZero() {
				t.Fatalf("pin %d = %+v, want range %d region %s epoch 1 notBefore zero", i, p, i, want)
			}
		}
	})

	t.Run("InitIdempotentKeepsMoves", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 16)
		d := newDir(t, newClient(t), cfg)
		ctx := ctxFor(t)
		if err := d.Init(ctx, 16, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		moved := must[epoch.Pin](t)(d.Move(ctx, 3, 1, "a", time.Time{}))
		if moved.Epoch != 2 || moved.Region != "a" {
			t.Fatalf("moved = %+v", moved)
		}
		before := must[[]epoch.Pin](t)(d.Pins(ctx))
		// Again, and with other regions: nothing changes.
		for _, regions := range [][]string{{"a", "b"}, {"z"}} {
			if err := d.Init(ctx, 16, regions); err != nil {
				t.Fatal(err)
			}
		}
		after := must[[]epoch.Pin](t)(d.Pins(ctx))
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("Init changed pins:\nbefore %v\nafter  %v", before, after)
		}
		// The range count is fixed at creation.
		cfg8 := cfg
		cfg8.Ranges = 8
		if err := newDir(t, newClient(t), cfg8).Init(ctx, 8, []string{"a"}); err == nil {
			t.Fatal("Init with another range count succeeded")
		}
		if err := d.Init(ctx, 8, []string{"a"}); err == nil {
			t.Fatal("Init with ranges != Config.Ranges succeeded")
		}
	})

	t.Run("InitConcurrent", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 200) // several batches
		ctx := ctxFor(t)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			d := newDir(t, newClient(t), cfg)
			wg.Go(func() { errs[i] = d.Init(ctx, 200, []string{"a", "b"}) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		pins := must[[]epoch.Pin](t)(newDir(t, newClient(t), cfg).Pins(ctx))
		if len(pins) != 200 {
			t.Fatalf("got %d pins, want 200", len(pins))
		}
		for _, p := range pins {
			if p.Epoch != 1 {
				t.Fatalf("pin %+v not at epoch 1", p)
			}
		}
	})

	t.Run("MoveIsCompareAndSet", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 4)
		d := newDir(t, newClient(t), cfg)
		ctx := ctxFor(t)
		if _, err := d.Move(ctx, 1, 1, "b", time.Time{}); !errors.Is(err, epoch.ErrNoPin) {
			t.Fatalf("Move before Init: %v, want ErrNoPin", err)
		}
		if err := d.Init(ctx, 4, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		nb := time.Now().Add(cfg.TTL + cfg.MaxSkew)
		p := must[epoch.Pin](t)(d.Move(ctx, 1, 1, "b", nb))
		if p.Range != 1 || p.Region != "b" || p.Epoch != 2 || p.NotBefore.UnixMilli() != nb.UnixMilli() {
			t.Fatalf("Move = %+v, want range 1 region b epoch 2 notBefore %v", p, nb)
		}
		if got := must[epoch.Pin](t)(d.Pin(ctx, 1)); !got.NotBefore.Equal(p.NotBefore) || got.Region != "b" || got.Epoch != 2 {
			t.Fatalf("Pin = %+v, want %+v", got, p)
		}
		// A stale expectation loses and reports the current pin.
		cur, err := d.Move(ctx, 1, 1, "c", nb)
		if !isEpochChanged(err) || cur.Epoch != 2 || cur.Region != "b" {
			t.Fatalf("stale Move = %+v, %v; want current pin and ErrEpochChanged", cur, err)
		}
		if _, err := d.Move(ctx, 9, 1, "c", nb); err == nil {
			t.Fatal("Move of an out-of-bounds range succeeded")
		}
		if _, err := d.Move(ctx, 1, 2, "bad/name", nb); err == nil {
			t.Fatal("Move to an invalid region name succeeded")
		}
	})

	t.Run("PlannedMoveSettles", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 4)
		d := newDir(t, newClient(t), cfg)
		ctx := ctxFor(t)
		if err := d.Init(ctx, 4, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		p := must[epoch.Pin](t)(d.Move(ctx, 2, 1, "b", time.Time{}, etcdepoch.Planned()))
		if !p.CatchUp || p.From != "a" || p.Epoch != 2 {
			t.Fatalf("planned Move = %+v, want CatchUp from a at epoch 2", p)
		}
		if got := must[epoch.Pin](t)(d.Pin(ctx, 2)); !got.CatchUp || got.From != "a" {
			t.Fatalf("stored pin %+v lost CatchUp/From", got)
		}
		// Settle of an old epoch changes nothing.
		if _, err := d.Settle(ctx, 2, 1); !isEpochChanged(err) {
			t.Fatalf("Settle(epoch 1) = %v, want ErrEpochChanged", err)
		}
		// Moved on before it caught up: the next owner still catches up on a.
		if c := must[epoch.Pin](t)(d.Move(ctx, 3, 1, "b", time.Time{}, etcdepoch.Planned())); c.From != "a" {
			t.Fatalf("first move %+v", c)
		}
		if c := must[epoch.Pin](t)(d.Move(ctx, 3, 2, "c", time.Time{}, etcdepoch.Planned())); c.From != "a" || !c.CatchUp {
			t.Fatalf("move of a pin still catching up = %+v, want From a", c)
		}
		s := must[epoch.Pin](t)(d.Settle(ctx, 2, 2))
		if s.CatchUp || s.Epoch != 2 || s.Region != "b" {
			t.Fatalf("Settle = %+v, want epoch 2 on b without CatchUp", s)
		}
		if got := must[epoch.Pin](t)(d.Pin(ctx, 2)); got.CatchUp || got.Epoch != 2 {
			t.Fatalf("stored pin after Settle = %+v", got)
		}
		must[epoch.Pin](t)(d.Settle(ctx, 2, 2)) // idempotent
		// An unplanned move never sets CatchUp.
		if u := must[epoch.Pin](t)(d.Move(ctx, 2, 2, "c", time.Time{})); u.CatchUp || u.From != "b" {
			t.Fatalf("unplanned Move = %+v", u)
		}
		moved, err := d.Drain(ctx, "a", "c", time.Time{}, etcdepoch.Planned())
		if err != nil || len(moved) != 2 {
			t.Fatalf("Drain = %v, %v; want 2 pins", moved, err)
		}
		for _, m := range moved {
			if !m.CatchUp || m.From != "a" {
				t.Fatalf("planned drain pin %+v", m)
			}
		}
	})

	t.Run("ConcurrentMovesOneWins", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 4)
		ctx := ctxFor(t)
		if err := newDir(t, newClient(t), cfg).Init(ctx, 4, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			d := newDir(t, newClient(t), cfg)
			wg.Go(func() { _, errs[i] = d.Move(ctx, 2, 1, fmt.Sprintf("r%d", i), time.Time{}) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("both %d and %d won", winner, i)
				}
				winner = i
			case !isEpochChanged(err):
				t.Fatalf("move %d: %v", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no move won")
		}
		p := must[epoch.Pin](t)(newDir(t, newClient(t), cfg).Pin(ctx, 2))
		if p.Epoch != 2 || p.Region != fmt.Sprintf("r%d", winner) {
			t.Fatalf("pin = %+v, want epoch 2 region r%d", p, winner)
		}
	})

	t.Run("Drain", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 10)
		d := newDir(t, newClient(t), cfg)
		ctx := ctxFor(t)
		if err := d.Init(ctx, 10, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		nb := time.Now().Add(time.Minute)
		moved := must[[]epoch.Pin](t)(d.Drain(ctx, "a", "c", nb))
		if len(moved) != 5 {
			t.Fatalf("drained %d ranges, want 5", len(moved))
		}
		for _, p := range must[[]epoch.Pin](t)(d.Pins(ctx)) {
			wantRegion, wantEpoch := "b", uint64(1)
			if p.Range%2 == 0 {
				wantRegion, wantEpoch = "c", 2
			}
			if p.Region != wantRegion || p.Epoch != wantEpoch {
				t.Fatalf("after drain pin %+v, want region %s epoch %d", p, wantRegion, wantEpoch)
			}
		}
		if again := must[[]epoch.Pin](t)(d.Drain(ctx, "a", "c", nb)); len(again) != 0 {
			t.Fatalf("second drain moved %v", again)
		}
	})

	t.Run("KeepAliveRegistersAndCloseRevokes", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 4)
		cli := newClient(t)
		d := newDir(t, cli, cfg)
		ctx := ctxFor(t)
		ka := startKA(t, cli, cfg, "a", nil)
		kb := startKA(t, cli, cfg, "b", nil)
		regions := must[[]epoch.RegionInfo](t)(d.Regions(ctx))
		if len(regions) != 2 || regions[0] != info("a") || regions[1] != info("b") {
			t.Fatalf("Regions = %+v", regions)
		}
		first := ka.LastKeepalive()
		if first.IsZero() {
			t.Fatal("no keepalive recorded after start")
		}
		Eventually(t, 5*time.Second, "a later keepalive", func() bool { return ka.LastKeepalive().After(first) })
		if err := ka.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ka.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		ka.Abandon() // no effect after Close
		if !ka.LastKeepalive().IsZero() {
			t.Fatal("LastKeepalive not zero after Close")
		}
		// Close revoked the lease: the key is gone at once.
		regions = must[[]epoch.RegionInfo](t)(d.Regions(ctx))
		if len(regions) != 1 || regions[0].Name != "b" {
			t.Fatalf("after Close, Regions = %+v", regions)
		}
		// Abandon leaves the lease to expire in (real) TTL.
		kb.Abandon()
		Eventually(t, 4*cfg.TTL, "abandoned lease to expire", func() bool {
			r, err := d.Regions(ctx)
			return err == nil && len(r) == 0
		})
	})

	t.Run("KeepAliveOutlivesItsContext", func(t *testing.T) {
		// The constructor's context is for setup: cancelling it (Ctrl-C in
		// likesd) must not end the lease before the region's ordered Close.
		t.Parallel()
		cfg := Config(t, 4)
		cli := newClient(t)
		d := newDir(t, cli, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		k, err := etcdepoch.StartKeepAlive(ctx, cli, etcdepoch.KeepAliveConfig{Config: cfg, Region: info("a")})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = k.Close() }()
		cancel()
		deadline := time.Now().Add(cfg.TTL + time.Second)
		for time.Now().Before(deadline) {
			regions, err := d.Regions(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(regions) != 1 {
				t.Fatalf("the lease ended with its constructor's context: regions %v", regions)
			}
			ctxSleep(t, 100*time.Millisecond)
		}
	})

	t.Run("KeepAliveReregistersAfterLeaseLoss", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 4)
		cli := newClient(t)
		d := newDir(t, cli, cfg)
		ctx := ctxFor(t)
		ka := startKA(t, cli, cfg, "a", nil)
		old := ka.Lease()
		if _, err := cli.Revoke(ctx, old); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 4*cfg.TTL, "re-registration under a new lease", func() bool {
			r, err := d.Regions(ctx)
			return err == nil && len(r) == 1 && ka.Lease() != old && ka.Lease() != clientv3.NoLease && !ka.LastKeepalive().IsZero()
		})
	})

	t.Run("KeepAliveConfigValidated", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 4)
		cli := newClient(t)
		for _, kc := range []etcdepoch.KeepAliveConfig{
			{Config: cfg}, // no name
			{Config: cfg, Region: epoch.RegionInfo{Name: "a/b"}}, // bad name
			{Config: cfg, Region: info("a"), Interval: cfg.TTL},  // interval too long
		} {
			if k, err := etcdepoch.StartKeepAlive(ctxFor(t), cli, kc); err == nil {
				_ = k.Close()
				t.Fatalf("StartKeepAlive(%+v) succeeded", kc)
			}
		}
	})
}

func info(name string) epoch.RegionInfo {
	return epoch.RegionInfo{Name: name, HTTP: "http://" + name + ".test:8080", GRPC: name + ".test:9090"}
}
