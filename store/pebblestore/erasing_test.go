package pebblestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/cache/inproc"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/store/pebblestore"
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

// lateRegion is one region's store, write path and manual eraser at a fixed
// epoch of the user's range.
type lateRegion struct {
	st     *pebblestore.Store
	svc    *edge.Service
	eraser *edge.Eraser
}

func openLateRegion(t *testing.T, name string, epoch uint64, clk clock.Clock) lateRegion {
	t.Helper()
	st := openRegion(t, name, clk)
	svc, err := edge.NewService(edge.ServiceConfig{Store: st, Overlay: inproc.NewOverlay(clk, time.Minute),
		Clock: clk, Authority: edge.StaticAuthority(epoch)})
	if err != nil {
		t.Fatal(err)
	}
	er, err := edge.NewEraser(context.Background(), edge.EraserConfig{Service: svc, Store: st, Jobs: st, Clock: clk, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = er.Close() })
	return lateRegion{st: st, svc: svc, eraser: er}
}

// edgeSum is the sum of the counted deltas the regions' logs hold for (item, user).
func edgeSum(t *testing.T, item, user string, stores ...*pebblestore.Store) int64 {
	t.Helper()
	var sum int64
	for _, s := range stores {
		for p := range uint32(s.Partitions()) {
			evs, _, err := s.Read(context.Background(), p, 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Item == item && ev.User == user && ev.Kind.Counted() {
					sum += int64(ev.Delta)
				}
			}
		}
	}
	return sum
}

// Issue 17: ap acknowledges a like it cannot replicate, its range fails over
// (unplanned) to us, the user's erasure is acknowledged by us, which has never
// seen the edge; then ap's like arrives. It must not stay LIKED: us's job
// re-opens, its eraser tombstones the edge through the write path (−1 in us's
// log against ap's +1), and the job counts the like it removed.
func TestLateEdgeOfErasedUserIsErased(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(t0))
	ap, us := openLateRegion(t, "ap", 14, clk), openLateRegion(t, "us", 15, clk)
	if _, err := ap.svc.Set(ctx, "u00-044", "i099", crdt.Liked, "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := us.svc.Set(ctx, "u00-044", "i001", crdt.Liked, "k2"); err != nil {
		t.Fatal(err)
	}
	job, err := us.eraser.Start(ctx, "u00-044")
	if err != nil || job.State != edge.ErasureDone || job.Unliked != 1 {
		t.Fatalf("erasure at us = %+v, %v; want done with 1 like removed", job, err)
	}
	ship(t, ap.st, us.st, "ap") // the link heals
	if got, _, _ := us.st.Erasure(ctx, "u00-044"); got.State != edge.ErasureRunning || got.Late != 1 {
		t.Fatalf("job after the late like = %+v, want re-opened (running, 1 late arrival)", got)
	}
	if err := us.eraser.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, _ := us.st.Erasure(ctx, "u00-044")
	if got.State != edge.ErasureDone || got.Unliked != 2 || got.Edges != 2 {
		t.Fatalf("job after the eraser ran = %+v, want done, 2 edges erased, 2 likes removed", got)
	}
	ship(t, us.st, ap.st, "us")
	for _, r := range []lateRegion{ap, us} {
		e, _, err := r.st.Edge(ctx, "i099", "u00-044")
		if err != nil || e.State != crdt.Erased {
			t.Fatalf("late edge = %+v, %v; want ERASED in every region", e, err)
		}
	}
	if sum := edgeSum(t, "i099", "u00-044", ap.st, us.st); sum != 0 {
		t.Fatalf("the late edge contributes %d to the count, want 0", sum)
	}
	// Shipping again changes nothing (replays are no-ops; no second −1).
	ship(t, ap.st, us.st, "ap")
	ship(t, us.st, ap.st, "us")
	if err := us.eraser.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if sum := edgeSum(t, "i099", "u00-044", ap.st, us.st); sum != 0 {
		t.Fatalf("after replays the late edge contributes %d, want 0", sum)
	}
}

// A late edge that arrives while a step is running (after it listed the
// user's items, before it saved the job done) keeps the job open: the step's
// save cannot overwrite the re-opening, and the purge keeps the edge's index
// entry for the next step.
func TestLateEdgeDuringStepKeepsJobOpen(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(t0))
	ap, us := openLateRegion(t, "ap", 14, clk), openLateRegion(t, "us", 15, clk)
	if _, err := ap.svc.Set(ctx, "u", "late", crdt.Liked, "k1"); err != nil {
		t.Fatal(err)
	}
	running := edge.ErasureJob{User: "u", State: edge.ErasureRunning, StartedAt: t0}
	if err := us.st.PutErasure(ctx, running); err != nil {
		t.Fatal(err)
	}
	ship(t, ap.st, us.st, "ap") // arrives mid-step
	if err := us.st.PurgeUser(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	done := running
	done.State, done.FinishedAt = edge.ErasureDone, t0+1
	if err := us.st.PutErasure(ctx, done); err != nil { // the step's save, from before the arrival
		t.Fatal(err)
	}
	got, _, _ := us.st.Erasure(ctx, "u")
	if got.State != edge.ErasureRunning || got.Cursor != "" || got.Late != 1 {
		t.Fatalf("job = %+v, want still running from the start", got)
	}
	if items, err := us.st.UserItems(ctx, "u", "", 10); err != nil || len(items) != 1 || items[0] != "late" {
		t.Fatalf("index after the purge = %q, %v; want the late edge", items, err)
	}
	if err := us.eraser.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := us.st.Erasure(ctx, "u"); got.State != edge.ErasureDone || got.Unliked != 1 {
		t.Fatalf("job = %+v, want done with the late like removed", got)
	}
	if sum := edgeSum(t, "late", "u", ap.st, us.st); sum != 0 {
		t.Fatalf("late edge contributes %d, want 0", sum)
	}
}

// A retraction that races an unplanned failover: ap's unreplicated like, then
// the abuse system's retraction at the new owner us (which has never seen the
// edge); when the like arrives, us's branch of the edge corrects it.
func TestRetractionRacingFailover(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(t0))
	ap, us := openLateRegion(t, "ap", 14, clk), openLateRegion(t, "us", 15, clk)
	if _, err := ap.svc.Set(ctx, "spammer", "i1", crdt.Liked, "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := us.svc.Retract(ctx, "i1", "spammer"); err != nil {
		t.Fatal(err)
	}
	ship(t, ap.st, us.st, "ap")
	ship(t, us.st, ap.st, "us")
	for _, r := range []lateRegion{ap, us} {
		if e, _, _ := r.st.Edge(ctx, "i1", "spammer"); e.State != crdt.Unliked {
			t.Fatalf("edge = %+v, want UNLIKED everywhere", e)
		}
	}
	if sum := edgeSum(t, "i1", "spammer", ap.st, us.st); sum != 0 {
		t.Fatalf("retracted edge contributes %d, want 0", sum)
	}
}
