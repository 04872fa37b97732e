package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// deadlineAuthority grants epoch 1 with a lease proof ending at until.
type deadlineAuthority struct{ until time.Time }

func (deadlineAuthority) Authorize(context.Context, string) (uint64, error) { return 1, nil }
func (a deadlineAuthority) ValidUntil() time.Time                           { return a.until }

var _ edge.Deadliner = deadlineAuthority{}

// capture is a store that records the requests it is given.
type capture struct {
	edge.Store
	reqs []edge.Request
}

func (c *capture) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	c.reqs = append(c.reqs, req)
	return c.Store.Apply(ctx, req)
}

// TestServicePassesTheLeaseDeadline: a write authorized by an Authority
// whose grants expire carries the end of its lease proof to the store.
func TestServicePassesTheLeaseDeadline(t *testing.T) {
	st, clk := openMemStore(t)
	until := clk.Now().Add(1500 * time.Millisecond)
	c := &capture{Store: st}
	svc := newService(t, c, clk, deadlineAuthority{until: until})
	if _, err := svc.Set(context.Background(), "u1", "a", crdt.Liked, "k1"); err != nil {
		t.Fatal(err)
	}
	if len(c.reqs) != 1 || c.reqs[0].Deadline != until.UnixMilli() {
		t.Fatalf("requests %+v, want Deadline %d", c.reqs, until.UnixMilli())
	}
	c.reqs = nil
	svc = newService(t, c, clk, edge.StaticAuthority(1)) // grants that never expire
	if _, err := svc.Set(context.Background(), "u2", "a", crdt.Liked, "k2"); err != nil {
		t.Fatal(err)
	}
	if len(c.reqs) != 1 || c.reqs[0].Deadline != 0 {
		t.Fatalf("requests %+v, want no Deadline", c.reqs)
	}
}
