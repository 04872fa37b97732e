package catchup

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/replication"
)

// fakePins is a pin table and directory in memory.
type fakePins struct {
	mu       sync.Mutex
	pins     map[uint32]epoch.Pin
	live     []epoch.RegionInfo
	settled  []uint32
	failRead bool
}

func (f *fakePins) CatchingUp() []epoch.Pin {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []epoch.Pin
	for _, p := range f.pins {
		if p.Region == "us" && p.CatchUp {
			out = append(out, p)
		}
	}
	return out
}

func (f *fakePins) Seen(rng uint32, ep uint64) bool { return f.pins[rng].Epoch >= ep }

func (f *fakePins) Regions(context.Context) ([]epoch.RegionInfo, error) {
	if f.failRead {
		return nil, errors.New("etcd down")
	}
	return f.live, nil
}

func (f *fakePins) Settle(_ context.Context, rng uint32, ep uint64) (epoch.Pin, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pins[rng]
	if p.Epoch != ep {
		return p, epoch.ErrEpochChanged
	}
	p.CatchUp = false
	f.pins[rng] = p
	f.settled = append(f.settled, rng)
	return p, nil
}

// fakeHeads answers Heads for the regions it knows and fakeCursors holds
// what "us" has applied from each region.
type fakeHeads map[string][]uint64

func (f fakeHeads) Heads(_ context.Context, peer replication.Peer, _ replication.HeadsRequest) (replication.HeadsResponse, error) {
	h, ok := f[peer.Region]
	if !ok {
		return replication.HeadsResponse{}, errors.New("unreachable")
	}
	return replication.HeadsResponse{Log: h}, nil
}

type fakeCursors map[string][]uint64

func (f fakeCursors) Cursor(_ context.Context, from string) (replication.Cursor, error) {
	return replication.Cursor{Log: f[from]}, nil
}

var (
	_ PinTable     = (*fakePins)(nil)
	_ Directory    = (*fakePins)(nil)
	_ HeadsAsker   = fakeHeads(nil)
	_ CursorReader = fakeCursors(nil)
)

// The barrier settles a planned move only once "us" has applied, through
// their heads, the logs of every live region and of the old owner, even when
// the old owner's lease has expired (it is not live).
func TestCatchUpWaitsForTheOldOwner(t *testing.T) {
	ctx := context.Background()
	pins := &fakePins{
		pins: map[uint32]epoch.Pin{
			3: {Range: 3, Region: "us", Epoch: 2, CatchUp: true, From: "eu"},
			4: {Range: 4, Region: "ap", Epoch: 1},
		},
		live: []epoch.RegionInfo{{Name: "us"}, {Name: "ap", GRPC: "ap:1"}}, // eu's lease expired
	}
	heads := fakeHeads{"ap": {5, 0}}
	cursors := fakeCursors{"ap": {5, 0}, "eu": {1, 1}}
	addrs := map[string]string{}
	c, err := NewBarrier(Config{
		Self: "us", Partitions: 2, Pins: pins, Dir: pins, Cursors: cursors, Asker: heads,
		Resolve: func(r string) (string, bool) { a, ok := addrs[r]; return a, ok },
		Clock:   clock.NewFake(time.Unix(1_700_000_000, 0)), CallTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Step(ctx) {
		t.Fatal("settled without the old owner's heads (eu has no address)")
	}
	if w, _ := c.Waiting(ctx); len(w) != 1 || !strings.HasPrefix(w[0], "eu (no address") {
		t.Fatalf("waiting for %v, want eu only", w)
	}
	addrs["eu"] = "eu:1" // eu is back (gossip knows it) and answers its heads
	heads["eu"] = []uint64{4, 2}
	if c.Step(ctx) {
		t.Fatal("settled before the cursor from eu reached its heads")
	}
	cursors["eu"] = []uint64{4, 2}
	if !c.Step(ctx) {
		t.Fatalf("not settled once caught up: waiting for %v", func() []string { w, _ := c.Waiting(ctx); return w }())
	}
	if len(pins.settled) != 1 || pins.settled[0] != 3 || pins.pins[3].CatchUp {
		t.Fatalf("settled %v, pin %+v", pins.settled, pins.pins[3])
	}
	if c.Step(ctx) {
		t.Fatal("a round without pending pins settled something")
	}
	// A read failure of the live regions keeps the range closed.
	pins.pins[5] = epoch.Pin{Range: 5, Region: "us", Epoch: 3, CatchUp: true, From: "ap"}
	pins.failRead = true
	if c.Step(ctx) {
		t.Fatal("settled while the live regions could not be read")
	}
}

func TestReached(t *testing.T) {
	for _, tc := range []struct {
		cur, heads []uint64
		want       bool
	}{
		{nil, nil, true},
		{nil, []uint64{0, 0}, true},
		{[]uint64{1}, []uint64{1, 1}, false},
		{[]uint64{2, 1}, []uint64{1, 1}, true},
		{[]uint64{0, 1}, []uint64{1, 1}, false},
	} {
		if got := Reached(tc.cur, tc.heads); got != tc.want {
			t.Errorf("Reached(%v, %v) = %v", tc.cur, tc.heads, got)
		}
	}
}
