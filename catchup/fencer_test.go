package catchup

import (
	"context"
	"errors"
	"reflect"
	"testing"

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
