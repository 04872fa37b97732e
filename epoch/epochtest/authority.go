package epochtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

func startKA(t testing.TB, cli *clientv3.Client, cfg epoch.Config, name string, clk clock.Clock) *etcdepoch.KeepAlive {
	t.Helper()
	k, err := etcdepoch.StartKeepAlive(context.Background(), cli, etcdepoch.KeepAliveConfig{Config: cfg, Region: info(name), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func startAuthority(t testing.TB, cli *clientv3.Client, cfg epoch.Config, self string, f etcdepoch.Freshness, clk clock.Clock) *etcdepoch.Authority {
	t.Helper()
	a, err := etcdepoch.NewAuthority(cli, etcdepoch.AuthorityConfig{Config: cfg, Self: self, Freshness: f, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.WaitSynced(ctx); err != nil {
		t.Fatalf("authority %s never synced: %v", self, err)
	}
	return a
}

// userIn finds a user id whose range is rng.
func userIn(rng uint32, ranges int) string {
	for i := 0; ; i++ {
		if u := fmt.Sprintf("user-%d", i); edge.RangeOf(u, ranges) == rng {
			return u
		}
	}
}

func notOwner(err error) (*epoch.NotOwnerError, bool) {
	var no *epoch.NotOwnerError
	return no, errors.As(err, &no) && errors.Is(err, edge.ErrNotOwner)
}

func failClosed(err error) bool {
	var fc *epoch.FailClosedError
	return errors.As(err, &fc) && errors.Is(err, edge.ErrFailClosed)
}

// RunAuthority is the contract of Authority against the etcd under test: it
// follows moves through its watch, fails closed before notBefore and when its
// lease proof is stale. The authorities and leases use one clock.Fake; the
// etcd leases themselves run in real time.
func RunAuthority(t *testing.T, newClient func(t *testing.T) *clientv3.Client) {
	t.Run("FollowsMovesAndFailsClosed", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 8)
		cli := newClient(t)
		ctx := ctxFor(t)
		d := newDir(t, cli, cfg)
		if err := d.Init(ctx, 8, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		fake := clock.NewFake(time.Now())
		ka := startKA(t, cli, cfg, "a", fake)
		kb := startKA(t, cli, cfg, "b", fake)
		aa := startAuthority(t, newClient(t), cfg, "a", ka, fake)
		ab := startAuthority(t, newClient(t), cfg, "b", kb, fake)
		if n := len(aa.Pins()); n != 8 {
			t.Fatalf("authority knows %d pins, want 8", n)
		}

		user := userIn(2, 8) // range 2 starts on a
		if ep, err := aa.Authorize(ctx, user); err != nil || ep != 1 {
			t.Fatalf("owner a: Authorize = %d, %v; want epoch 1", ep, err)
		}
		if no, ok := notOwner(second(ab.Authorize(ctx, user))); !ok || no.Owner != "a" || no.Range != 2 {
			t.Fatalf("b: Authorize = %v, want NotOwner(a, range 2)", no)
		}
		if r, e := ab.Owner(user); r != "a" || e != 1 {
			t.Fatalf("b: Owner = %s, %d", r, e)
		}

		// Move range 2 to b: a stops on the watch event; b waits for notBefore.
		moved := must[epoch.Pin](t)(d.Move(ctx, 2, 1, "b", cfg.NotBefore(fake.Now())))
		Eventually(t, 5*time.Second, "a to see the move", func() bool {
			no, ok := notOwner(second(aa.Authorize(ctx, user)))
			return ok && no.Owner == "b" && no.Epoch == 2
		})
		Eventually(t, 5*time.Second, "b to see the move", func() bool {
			r, e := ab.Owner(user)
			return r == "b" && e == 2
		})
		if _, err := ab.Authorize(ctx, user); !failClosed(err) {
			t.Fatalf("b before notBefore: %v, want FailClosed", err)
		}
		fake.Advance(moved.NotBefore.Sub(fake.Now()) - time.Millisecond)
		if _, err := ab.Authorize(ctx, user); !failClosed(err) {
			t.Fatalf("b 1ms before notBefore: %v, want FailClosed", err)
		}
		fake.Advance(time.Millisecond)
		// The jump aged b's proofs; its next keepalive and re-read renew them.
		Eventually(t, 5*time.Second, "b to authorize at notBefore", func() bool {
			ep, err := ab.Authorize(ctx, user)
			return err == nil && ep == 2
		})

		// Stale lease proof: b's keepalives stop; TTL − Margin later it refuses.
		kb.Abandon()
		fake.Advance(cfg.TTL - cfg.Margin)
		if _, err := ab.Authorize(ctx, user); !failClosed(err) {
			t.Fatalf("b with a stale keepalive: %v, want FailClosed", err)
		}
		// a, still keeping its lease, is unaffected for its own ranges.
		Eventually(t, 5*time.Second, "a to authorize range 0", func() bool {
			ep, err := aa.Authorize(ctx, userIn(0, 8))
			return err == nil && ep == 1
		})
		// A revoked lease is no proof at all.
		if err := ka.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := aa.Authorize(ctx, userIn(0, 8)); !failClosed(err) {
			t.Fatalf("a after Close: %v, want FailClosed", err)
		}
		aa.Close()
		aa.Close() // idempotent
	})

	t.Run("WatchDeliversMovesBetweenReads", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 8)
		cfg.TTL = 10 * time.Second // room for a long re-read interval
		cli := newClient(t)
		ctx := ctxFor(t)
		d := newDir(t, cli, cfg)
		if err := d.Init(ctx, 8, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		const reread = 4500 * time.Millisecond
		a, err := etcdepoch.NewAuthority(newClient(t), etcdepoch.AuthorityConfig{
			Config: cfg, Self: "a", Freshness: staticFreshness{}, SyncInterval: reread})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		if err := a.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := d.Move(ctx, 5, 1, "b", time.Time{}); err != nil {
			t.Fatal(err)
		}
		// Well before the next full re-read, only the watch can deliver it.
		Eventually(t, reread*2/3, "the watch to deliver the move", func() bool {
			r, e := a.Owner(userIn(5, 8))
			return r == "b" && e == 2
		})
		t.Logf("move seen after %v", time.Since(start))
	})

	t.Run("UnknownPinsFailClosed", func(t *testing.T) {
		t.Parallel()
		cfg := Config(t, 8)
		cli := newClient(t)
		ka := startKA(t, cli, cfg, "a", nil)
		a := startAuthority(t, cli, cfg, "a", ka, nil) // no Init: no pins
		if _, err := a.Authorize(ctxFor(t), "someone"); !failClosed(err) {
			t.Fatalf("Authorize without pins: %v, want FailClosed", err)
		}
		if r, e := a.Owner("someone"); r != "" || e != 0 {
			t.Fatalf("Owner without pins = %q, %d", r, e)
		}
		// Pins created later arrive through the watch.
		if err := newDir(t, cli, cfg).Init(ctxFor(t), 8, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 5*time.Second, "pins to arrive", func() bool {
			ep, err := a.Authorize(context.Background(), "someone")
			return err == nil && ep == 1
		})
	})
}

type staticFreshness struct{}

func (staticFreshness) LastKeepalive() time.Time { return time.Now() }

func second[T any](_ T, err error) error { return err }
