package pebblestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"likes/clock"
	"likes/crdt"
	"likes/edge"
	"likes/store/pebblestore"
)

func openRegion(t *testing.T, region string, clk clock.Clock) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: vfs.NewMem(), Region: region, Partitions: 2, Clock: clk, CacheBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ship applies every event of from's log to to, as replication does.
func ship(t *testing.T, from, to *pebblestore.Store, name string) []edge.Event {
	t.Helper()
	ctx := context.Background()
	var all []edge.Event
	for p := range uint32(from.Partitions()) {
		evs, head, err := from.Read(ctx, p, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if err := to.ApplyRemote(ctx, name, p, evs, head.Pos); err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	return all
}

// An erasure started at the user's home is logged (KindErasing), so every
// region that applies the log refuses the user's writes from then on, leaves
// the job to its origin (Remote), and records it done on the purge.
func TestErasureMarkReplicates(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(t0))
	home, other := openRegion(t, "us", clk), openRegion(t, "eu", clk)

	job := edge.ErasureJob{User: "u1", State: edge.ErasureRunning, StartedAt: t0}
	if err := home.PutErasure(ctx, job); err != nil {
		t.Fatal(err)
	}
	job.Edges = 3 // progress saves log nothing more
	if err := home.PutErasure(ctx, job); err != nil {
		t.Fatal(err)
	}
	evs := ship(t, home, other, "us")
	if n := countKind(evs, edge.KindErasing); n != 1 {
		t.Fatalf("home logged %d erasure starts, want 1: %+v", n, evs)
	}
	got, ok, err := other.Erasure(ctx, "u1")
	if err != nil || !ok || !got.Remote || got.State != edge.ErasureRunning {
		t.Fatalf("replica mark = %+v, %v, %v; want a running Remote job", got, ok, err)
	}
	d, err := other.Apply(ctx, edge.Request{Item: "i1", User: "u1", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1, Now: t0})
	if err != nil || d.Err() == nil {
		t.Fatalf("like of a user being erased elsewhere: %+v, %v; want refused", d, err)
	}
	// Taking the job over here logs a start here too.
	taken := got
	taken.Remote = false
	if err := other.PutErasure(ctx, taken); err != nil {
		t.Fatal(err)
	}
	if n := countKind(ship(t, other, home, "eu"), edge.KindErasing); n != 1 {
		t.Fatalf("take-over logged %d erasure starts, want 1", n)
	}
	if got, _, _ := home.Erasure(ctx, "u1"); got.Remote || got.Edges != 3 {
		t.Fatalf("origin's own job changed by a replica's start: %+v", got)
	}

	// The purge marks a replica done, never the origin's own job.
	third := openRegion(t, "ap", clk)
	ship(t, home, third, "us")
	if err := home.PurgeUser(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	ship(t, home, third, "us")
	if got, _, _ := third.Erasure(ctx, "u1"); got.State != edge.ErasureDone || !got.Remote || got.StartedAt != t0 {
		t.Fatalf("replica after purge = %+v, want done, remote, started at t0", got)
	}
}

func countKind(evs []edge.Event, k edge.Kind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == k {
			n++
		}
	}
	return n
}
