package catchup

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/replication"
)

type seenPins bool

func (s seenPins) Seen(uint32, uint64) bool { return bool(s) }

// steps records the order of the Fencer's calls.
type steps struct {
	order []string
	heads []uint64
	err   error // FinishPending's
}

func (s *steps) Quiesce(context.Context) error { s.order = append(s.order, "quiesce"); return nil }
func (s *steps) FinishPending(context.Context) error {
	s.order = append(s.order, "pending")
	return s.err
}
func (s *steps) Partitions() int { return len(s.heads) }
func (s *steps) Head(_ context.Context, p uint32) (uint64, error) {
	s.order = append(s.order, "head")
	return s.heads[p], nil
}

var (
	_ Quiescer   = (*steps)(nil)
	_ Pending    = (*steps)(nil)
	_ HeadReader = (*steps)(nil)
)

// TestFencerFinishesPendingWritesBeforeHeads: the heads are read only after
// the writes in flight are waited for and the store's pending events are in
// its log; a store that cannot finish them answers no heads.
func TestFencerFinishesPendingWritesBeforeHeads(t *testing.T) {
	s := &steps{heads: []uint64{4, 7}}
	f := &Fencer{Pins: seenPins(true), Writes: func() Quiescer { return s }, Log: s, Pending: s}
	heads, err := f.Heads(context.Background(), []replication.PinRef{{Range: 1, Epoch: 2}})
	if err != nil || !reflect.DeepEqual(heads, []uint64{4, 7}) {
		t.Fatalf("heads %v, %v", heads, err)
	}
	if want := []string{"quiesce", "pending", "head", "head"}; !reflect.DeepEqual(s.order, want) {
		t.Fatalf("order %v, want %v", s.order, want)
	}
	s.order, s.err = nil, errors.New("cassandra down")
	if _, err := f.Heads(context.Background(), []replication.PinRef{{Range: 1, Epoch: 2}}); err == nil {
		t.Fatal("heads answered while pending writes could not be finished")
	}
	if _, err := (&Fencer{Pins: seenPins(false), Writes: func() Quiescer { return s }, Log: s}).Heads(context.Background(),
		[]replication.PinRef{{Range: 1, Epoch: 2}}); !errors.Is(err, replication.ErrPinNotSeen) {
		t.Fatalf("an unseen pin: %v", err)
	}
}

// selfWrites is when this node last may have written each range.
type selfWrites map[uint32]time.Time

func (s selfWrites) LastSelfWrite(rng uint32) time.Time { return s[rng] }

// TestFencerSettlesForOtherNodes: on a region of several nodes the Fencer
// answers "not yet" until Settle has passed since the region may last have
// written every asked range (the other nodes' writes under the older epoch
// are over by then); a range it has not written for longer needs no wait.
func TestFencerSettlesForOtherNodes(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	s := &steps{heads: []uint64{3}}
	w := selfWrites{1: clk.Now(), 2: clk.Now().Add(-time.Hour)}
	f := &Fencer{Pins: seenPins(true), Writes: func() Quiescer { return s }, Log: s, Settle: 3 * time.Second, SelfWrites: w, Clock: clk}
	ask := func(pins ...replication.PinRef) error { _, err := f.Heads(context.Background(), pins); return err }
	moved, old := replication.PinRef{Range: 1, Epoch: 2}, replication.PinRef{Range: 2, Epoch: 5}
	if err := ask(old); err != nil {
		t.Fatalf("a range not written for an hour: %v", err)
	}
	s.order = nil
	if err := ask(old, moved); !errors.Is(err, replication.ErrPinNotSeen) {
		t.Fatalf("a range that just left: %v, want not yet", err)
	}
	if len(s.order) != 0 {
		t.Fatalf("heads read before the settle: %v", s.order)
	}
	clk.Advance(2 * time.Second)
	if err := ask(moved); !errors.Is(err, replication.ErrPinNotSeen) {
		t.Fatalf("after 2s: %v, want not yet", err)
	}
	clk.Advance(time.Second)
	if err := ask(moved, old); err != nil {
		t.Fatalf("after 3s: %v", err)
	}
	if err := (&Fencer{Pins: seenPins(true), Writes: func() Quiescer { return s }, Log: s, Settle: time.Second}).settled(nil); err == nil {
		t.Fatal("a Fencer with Settle and no SelfWrites answered")
	}
}
