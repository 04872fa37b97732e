package epoch_test

import (
	"errors"
	"testing"
	"time"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
)

func TestDecide(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ttl, margin := 5*time.Second, time.Second
	pin := epoch.Pin{Range: 7, Region: "a", Epoch: 3, NotBefore: t0}
	type want int
	const (
		ok want = iota
		notOwner
		failClosed
	)
	cases := []struct {
		name string
		pin  epoch.Pin
		self string
		now  time.Time
		ka   time.Time
		ttl  time.Duration
		want want
	}{
		{"owner, fresh", pin, "a", t0.Add(time.Second), t0.Add(time.Second), ttl, ok},
		{"owner at notBefore", pin, "a", t0, t0, ttl, ok},
		{"zero notBefore", epoch.Pin{Range: 7, Region: "a", Epoch: 1}, "a", t0, t0, ttl, ok},
		{"other region", pin, "b", t0.Add(time.Second), t0.Add(time.Second), ttl, notOwner},
		{"other region, stale proof too", pin, "b", t0.Add(time.Hour), time.Time{}, ttl, notOwner},
		{"before notBefore", pin, "a", t0.Add(-time.Millisecond), t0.Add(-time.Millisecond), ttl, failClosed},
		{"no keepalive yet", pin, "a", t0.Add(time.Second), time.Time{}, ttl, failClosed},
		{"keepalive just young enough", pin, "a", t0.Add(4*time.Second - time.Nanosecond), t0, ttl, ok},
		{"keepalive exactly TTL-margin old", pin, "a", t0.Add(4 * time.Second), t0, ttl, failClosed},
		{"keepalive older than TTL", pin, "a", t0.Add(6 * time.Second), t0, ttl, failClosed},
		{"no pin", epoch.Pin{Range: 7}, "a", t0, t0, ttl, failClosed},
		{"epoch 0", epoch.Pin{Range: 7, Region: "a"}, "a", t0, t0, ttl, failClosed},
		{"margin >= ttl", pin, "a", t0, t0, margin, failClosed},
		{"planned move catching up", epoch.Pin{Range: 7, Region: "a", Epoch: 3, CatchUp: true, From: "b"}, "a", t0, t0, ttl, failClosed},
		{"other region catching up", epoch.Pin{Range: 7, Region: "a", Epoch: 3, CatchUp: true, From: "b"}, "b", t0, t0, ttl, notOwner},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep, err := epoch.Decide(c.pin, c.self, c.now, c.ka, c.ttl, margin)
			switch c.want {
			case ok:
				if err != nil || ep != c.pin.Epoch {
					t.Fatalf("Decide = %d, %v; want epoch %d", ep, err, c.pin.Epoch)
				}
			case notOwner:
				var no *epoch.NotOwnerError
				if !errors.Is(err, edge.ErrNotOwner) || !errors.As(err, &no) || errors.Is(err, edge.ErrFailClosed) {
					t.Fatalf("Decide err = %v, want *NotOwnerError", err)
				}
				if no.Owner != c.pin.Region || no.Range != c.pin.Range || no.Epoch != c.pin.Epoch || ep != 0 {
					t.Fatalf("NotOwnerError = %+v (epoch %d)", no, ep)
				}
			case failClosed:
				var fc *epoch.FailClosedError
				if !errors.Is(err, edge.ErrFailClosed) || !errors.As(err, &fc) || errors.Is(err, edge.ErrNotOwner) || ep != 0 {
					t.Fatalf("Decide = %d, %v; want *FailClosedError", ep, err)
				}
				if fc.Range != c.pin.Range || fc.Reason == "" {
					t.Fatalf("FailClosedError = %+v", fc)
				}
			}
		})
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	c, err := epoch.Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := epoch.Config{Prefix: "/likes/", Ranges: 256, TTL: 5 * time.Second, Margin: time.Second, MaxSkew: 500 * time.Millisecond}
	if c != want {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
	if nb := c.NotBefore(time.Unix(100, 0)); !nb.Equal(time.Unix(105, 5e8)) {
		t.Fatalf("NotBefore = %v", nb)
	}
	for _, bad := range []epoch.Config{
		{Prefix: "github.com/likes-dev/likes/"},
		{Prefix: "/likes"},
		{Ranges: -1},
		{Ranges: epoch.MaxRanges + 1},
		{TTL: 1500 * time.Millisecond},
		{TTL: 500 * time.Millisecond},
		{TTL: -time.Second},
		{Margin: -time.Second},
		{TTL: 2 * time.Second, Margin: 2 * time.Second},
		{MaxSkew: -time.Millisecond},
	} {
		if _, err := bad.WithDefaults(); err == nil {
			t.Errorf("WithDefaults(%+v) accepted", bad)
		}
	}
}
