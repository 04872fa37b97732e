package edgetest

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// RunJobStore runs the edge.JobStore contract suite. open must return a fresh,
// empty store (its Store and JobStore sides, usually the same value) and
// register its cleanup with t.Cleanup.
func RunJobStore(t *testing.T, open func(t *testing.T) (edge.Store, edge.JobStore)) {
	t.Run("RoundTrip", func(t *testing.T) { _, j := open(t); testJobRoundTrip(t, j) })
	t.Run("OrderedWithApply", func(t *testing.T) { s, j := open(t); testJobOrdered(t, s, j) })
	t.Run("Eraser", func(t *testing.T) { s, j := open(t); testEraser(t, s, j) })
}

func testJobRoundTrip(t *testing.T, js edge.JobStore) {
	ctx := context.Background()
	if _, ok, err := js.Erasure(ctx, "nobody"); err != nil || ok {
		t.Fatalf("Erasure(nobody) = ok %v, err %v", ok, err)
	}
	if jobs, err := js.Erasures(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("Erasures() on empty store = %v, %v", jobs, err)
	}
	want := map[string]edge.ErasureJob{}
	for i, u := range []string{"ann", "an", "ann2", "用户", "😀"} {
		j := edge.ErasureJob{User: u, State: edge.ErasureRunning, Edges: i, Unliked: i / 2, StartedAt: t0 + int64(i), Cursor: "item-" + u}
		if err := js.PutErasure(ctx, j); err != nil {
			t.Fatal(err)
		}
		want[u] = j
	}
	done := want["ann"]
	done.State, done.Edges, done.Unliked, done.FinishedAt, done.Cursor = edge.ErasureDone, 42, 17, t0+999, "zzz"
	if err := js.PutErasure(ctx, done); err != nil {
		t.Fatal(err)
	}
	want["ann"] = done
	for u, w := range want {
		got, ok, err := js.Erasure(ctx, u)
		if err != nil || !ok || got != w {
			t.Fatalf("Erasure(%q) = %+v %v %v, want %+v", u, got, ok, err, w)
		}
	}
	jobs, err := js.Erasures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(want) {
		t.Fatalf("Erasures() = %d jobs, want %d", len(jobs), len(want))
	}
	for _, j := range jobs {
		if want[j.User] != j {
			t.Fatalf("Erasures() holds %+v, want %+v", j, want[j.User])
		}
	}
}

func testJobOrdered(t *testing.T, s edge.Store, js edge.JobStore) {
	ctx := context.Background()
	apply(t, s, Like("a", "leaver", "k1", 1, t0))
	apply(t, s, Like("a", "leaver2", "k1", 1, t0))
	if err := js.PutErasure(ctx, edge.ErasureJob{User: "leaver", State: edge.ErasureRunning, StartedAt: t0}); err != nil {
		t.Fatal(err)
	}
	// Every later non-erasure write of the user is refused, replays included.
	mustAction(t, "like after erasure start", apply(t, s, Like("b", "leaver", "k2", 1, t0+1)), edge.ActErased)
	mustAction(t, "unlike after erasure start", apply(t, s, Unlike("a", "leaver", "k3", 1, t0+1)), edge.ActErased)
	mustAction(t, "replay after erasure start", apply(t, s, Like("a", "leaver", "k1", 1, t0+1)), edge.ActErased)
	r := Unlike("a", "leaver", "", 1, t0+1)
	r.Kind = edge.KindRetraction
	mustAction(t, "retraction after erasure start", apply(t, s, r), edge.ActErased)
	if _, ok := getEdge(t, s, "b", "leaver"); ok {
		t.Fatalf("refused write created an edge")
	}
	// Erasure writes pass.
	mustAction(t, "erasure write", apply(t, s, Erase("a", "leaver", 1, t0+2)), edge.ActWrite)
	mustEdge(t, s, "a", "leaver", crdt.Erased, crdt.Version{Epoch: 1, Op: 2})
	// A user whose id extends the erased one is unaffected.
	mustAction(t, "other user", apply(t, s, Like("b", "leaver2", "k2", 1, t0+3)), edge.ActWrite)
	// Finishing the job keeps the user erased.
	if err := js.PutErasure(ctx, edge.ErasureJob{User: "leaver", State: edge.ErasureDone, StartedAt: t0, FinishedAt: t0 + 5}); err != nil {
		t.Fatal(err)
	}
	mustAction(t, "like after erasure done", apply(t, s, Like("c", "leaver", "k9", 1, t0+6)), edge.ActErased)
}

// memOverlay is a trivial edge.Overlay.
type memOverlay struct {
	mu sync.Mutex
	m  map[[2]string]edge.OverlayEntry
}

func (o *memOverlay) Put(_ context.Context, user, item string, e edge.OverlayEntry) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[[2]string]edge.OverlayEntry{}
	}
	o.m[[2]string{user, item}] = e
	return nil
}

func (o *memOverlay) Get(_ context.Context, user, item string) (edge.OverlayEntry, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[[2]string{user, item}]
	return e, ok, nil
}

// testEraser runs a whole erasure over the store: the user's edges become
// tombstones, their likes disappear from Likers, their records and index go.
func testEraser(t *testing.T, s edge.Store, js edge.JobStore) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(t0))
	svc, err := edge.NewService(edge.ServiceConfig{Store: s, Overlay: &memOverlay{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	items := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7"}
	for i, it := range items {
		if _, err := svc.Set(ctx, "gdpr", it, crdt.Liked, "k-"+it); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Set(ctx, "keeper", it, crdt.Liked, "k-"+it); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := svc.Set(ctx, "gdpr", it, crdt.Unliked, "u-"+it); err != nil {
				t.Fatal(err)
			}
		}
	}
	er, err := edge.NewEraser(ctx, edge.EraserConfig{Service: svc, Store: s, Jobs: js, Clock: clk, Inline: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer er.Close()
	j, err := er.Start(ctx, "gdpr")
	if err != nil {
		t.Fatal(err)
	}
	if j.State != edge.ErasureDone || j.Edges != len(items) || j.Unliked != 4 {
		t.Fatalf("inline erasure job = %+v, want done, %d edges, 4 likes removed", j, len(items))
	}
	if got, ok, err := js.Erasure(ctx, "gdpr"); err != nil || !ok || got != j {
		t.Fatalf("stored job %+v %v %v, want %+v", got, ok, err, j)
	}
	for _, it := range items {
		e, ok := getEdge(t, s, it, "gdpr")
		if !ok || e.State != crdt.Erased {
			t.Fatalf("edge (%q, gdpr) = %+v %v after erasure", it, e, ok)
		}
		if got := AllLikers(t, s, it, 10); !slices.Equal(got, []string{"keeper"}) {
			t.Fatalf("Likers(%q) = %v after erasure", it, got)
		}
		if _, err := svc.Set(ctx, "gdpr", it, crdt.Liked, "k-"+it); err == nil {
			t.Fatalf("a retried like of an erased user succeeded")
		}
	}
	if got := AllUserItems(t, s, "gdpr", 10); len(got) != 0 {
		t.Fatalf("UserItems after erasure = %q", got)
	}
	keeper := AllUserItems(t, s, "keeper", 10)
	want := slices.Clone(items)
	sort.Strings(want)
	if !slices.Equal(keeper, want) {
		t.Fatalf("UserItems(keeper) = %q", keeper)
	}
	// Starting again returns the finished job as is.
	j2, err := er.Start(ctx, "gdpr")
	if err != nil || j2 != j {
		t.Fatalf("second Start = %+v, %v; want %+v", j2, err, j)
	}
}
