package epochtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

func startController(t testing.TB, cli *clientv3.Client, cfg epoch.Config, name string, grace time.Duration, pref ...string) *etcdepoch.Controller {
	t.Helper()
	c, err := etcdepoch.StartController(cli, etcdepoch.ControllerConfig{Config: cfg, Name: name, Preference: pref, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// RunController is the contract of automatic failover.
func RunController(t *testing.T, newClient func(t *testing.T) *clientv3.Client) {
	t.Run("MovesDeadRegionsInPreferenceOrder", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 12)
		cli := newClient(t)
		ctx := ctxFor(t)
		d := newDir(t, cli, cfg)
		if err := d.Init(ctx, 12, []string{"a", "b", "c"}); err != nil {
			t.Fatal(err)
		}
		ka := startKA(t, cli, cfg, "a", nil)
		kb := startKA(t, cli, cfg, "b", nil)
		startKA(t, cli, cfg, "c", nil)
		c1 := startController(t, newClient(t), cfg, "ctl-1", 0, "a", "b", "c")
		c2 := startController(t, newClient(t), cfg, "ctl-2", 0, "a", "b", "c")
		Eventually(t, 10*time.Second, "one leader", func() bool { return c1.Leading() != c2.Leading() })

		// a dies cleanly (lease revoked): its ranges go to b at epoch 2.
		before := time.Now()
		if err := ka.Close(); err != nil {
			t.Fatal(err)
		}
		pins := waitPins(t, d, "a's ranges to move", func(p epoch.Pin) bool { return p.Region != "a" })
		for _, p := range pins {
			switch p.Range % 3 {
			case 0:
				if p.Region != "b" || p.Epoch != 2 {
					t.Fatalf("a's range moved to %+v, want b at epoch 2", p)
				}
				if min := before.Add(cfg.TTL + cfg.MaxSkew).Truncate(time.Millisecond); p.NotBefore.Before(min) {
					t.Fatalf("notBefore %v earlier than move time + TTL + MaxSkew (%v)", p.NotBefore, min)
				}
			default:
				if p.Epoch != 1 {
					t.Fatalf("live region's pin moved: %+v", p)
				}
			}
		}

		// The leader steps down; the other takes over and handles b's death
		// (an expiring lease this time) by moving to c, next after b.
		leader, other := c1, c2
		if c2.Leading() {
			leader, other = c2, c1
		}
		leader.Close()
		Eventually(t, 10*time.Second, "the other controller to lead", other.Leading)
		kb.Abandon()
		pins = waitPins(t, d, "b's ranges to move after its lease expired", func(p epoch.Pin) bool { return p.Region == "c" })
		for _, p := range pins {
			want := uint64(2)
			if p.Range%3 == 0 {
				want = 3 // a → b → c
			}
			if p.Range%3 == 2 {
				want = 1 // c's own
			}
			if p.Epoch != want {
				t.Fatalf("pin %+v, want epoch %d", p, want)
			}
		}
		if other.Moves() == 0 {
			t.Fatal("the second leader reports no moves")
		}
	})

	t.Run("NeverSeenRegionAfterGrace", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 6)
		cli := newClient(t)
		ctx := ctxFor(t)
		d := newDir(t, cli, cfg)
		if err := d.Init(ctx, 6, []string{"a", "ghost"}); err != nil {
			t.Fatal(err)
		}
		startKA(t, cli, cfg, "a", nil)
		start := time.Now()
		startController(t, cli, cfg, "ctl", time.Second) // no preference: any live region
		waitPins(t, d, "ghost's ranges to move to a", func(p epoch.Pin) bool { return p.Region == "a" })
		if waited := time.Since(start); waited < time.Second {
			t.Fatalf("ranges of a never-seen region moved after %v, before the 1s grace", waited)
		}
	})
}

// RunFailback is the contract of moving ranges home.
func RunFailback(t *testing.T, newClient func(t *testing.T) *clientv3.Client) {
	t.Run("RangesComeHomeAsPlannedMovesNotWhileDraining", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 6)
		cli := newClient(t)
		ctx := ctxFor(t)
		d := newDir(t, cli, cfg)
		if err := d.Init(ctx, 6, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		ka := startKA(t, cli, cfg, "a", nil)
		startKA(t, cli, cfg, "b", nil)
		// a hands its ranges to b while it is draining.
		if err := ka.SetDraining(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Drain(ctx, "a", "b", time.Now()); err != nil {
			t.Fatal(err)
		}
		c, err := etcdepoch.StartController(cli, etcdepoch.ControllerConfig{Config: cfg, Name: "ctl", Preference: []string{"a", "b"},
			FailbackAfter: 300 * time.Millisecond, FailbackRate: 100})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		Eventually(t, 10*time.Second, "a leader", c.Leading)
		// Well past FailbackAfter: a is live but draining, so nothing moves.
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			pins, err := d.Pins(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pins {
				if p.Region != "b" {
					t.Fatalf("range %d moved to %s while its home a was draining", p.Range, p.Region)
				}
			}
			if c.Failbacks() != 0 {
				t.Fatalf("%d failbacks to a draining region", c.Failbacks())
			}
			ctxSleep(t, 50*time.Millisecond)
		}
		// a restarts: a fresh registration, not draining. After FailbackAfter
		// its home ranges (even ones) move back as planned moves from b.
		if err := ka.Close(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		startKA(t, cli, cfg, "a", nil)
		pins := waitPins(t, d, "a's home ranges to come back", func(p epoch.Pin) bool { return p.Region == epoch.Home(p.Range, []string{"a", "b"}) })
		if waited := time.Since(back); waited < 300*time.Millisecond {
			t.Fatalf("ranges came home %v after the region returned, before FailbackAfter", waited)
		}
		for _, p := range pins {
			if p.Range%2 == 0 && (!p.CatchUp || p.From != "b" || p.Epoch != 3) {
				t.Fatalf("failback of range %d is %+v, want a planned move from b at epoch 3", p.Range, p)
			}
		}
		// The pins can be read home a moment before the controller counts its
		// last move.
		Eventually(t, 5*time.Second, "the controller to count 3 failbacks", func() bool { return c.Failbacks() >= 3 })
		if c.Failbacks() != 3 || c.Moves() != 0 {
			t.Fatalf("failbacks %d, failovers %d; want 3 and 0", c.Failbacks(), c.Moves())
		}
	})
}

func ctxSleep(t testing.TB, d time.Duration) {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	<-tm.C
}

// waitPins polls until every pin satisfies ok and returns them.
func waitPins(t testing.TB, d *etcdepoch.Directory, what string, ok func(epoch.Pin) bool) []epoch.Pin {
	t.Helper()
	var pins []epoch.Pin
	Eventually(t, 15*time.Second, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if pins, err = d.Pins(ctx); err != nil || len(pins) == 0 {
			return false
		}
		for _, p := range pins {
			if !ok(p) {
				return false
			}
		}
		return true
	})
	return pins
}
