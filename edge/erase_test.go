package edge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/cache/inproc"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/store/pebblestore"
)

// openMemStore opens an in-memory Pebble store of region "eu" on a fake clock.
func openMemStore(t *testing.T) (*pebblestore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: vfs.NewMem(), Region: "eu", Partitions: 2, Clock: clk, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, clk
}

// newService is an edge service over store with an in-process overlay.
func newService(t *testing.T, store edge.Store, clk clock.Clock, auth edge.Authority) *edge.Service {
	t.Helper()
	svc, err := edge.NewService(edge.ServiceConfig{Store: store, Overlay: inproc.NewOverlay(clk, time.Minute), Clock: clk, Authority: auth})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// A Remote job (a replica of an erasure another region runs) is left to its
// origin by the Eraser's loop, and taken over by Start.
func TestEraserLeavesRemoteJobsToTheirOrigin(t *testing.T) {
	ctx := context.Background()
	st, clk := openMemStore(t)
	svc := newService(t, st, clk, nil)
	for _, user := range []string{"u1", "u2"} {
		for _, item := range []string{"a", "b"} {
			if _, err := svc.Set(ctx, user, item, crdt.Liked, "k"+item); err != nil {
				t.Fatal(err)
			}
		}
	}
	// u1's job is a replica of another region's; u2's is this region's own.
	// The loop visits jobs in user order, so once it has finished u2's it has
	// passed u1's.
	for _, j := range []edge.ErasureJob{
		{User: "u1", State: edge.ErasureRunning, StartedAt: 1, Remote: true},
		{User: "u2", State: edge.ErasureRunning, StartedAt: 1},
	} {
		if err := st.PutErasure(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	er, err := edge.NewEraser(ctx, edge.EraserConfig{Service: svc, Store: st, Jobs: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = er.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, _, err := st.Erasure(ctx, "u2")
		if err != nil {
			t.Fatal(err)
		}
		if j.State == edge.ErasureDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the eraser loop never finished this region's own job: %+v", j)
		}
		clk.Advance(time.Second) // the loop's tick
	}
	if liked, err := svc.Liked(ctx, "u1", "a"); err != nil || !liked {
		t.Fatalf("a remote job was run here: liked=%v err=%v", liked, err)
	}
	if j, _, _ := st.Erasure(ctx, "u1"); !j.Remote || j.State != edge.ErasureRunning || j.Edges != 0 {
		t.Fatalf("remote job after the loop ran: %+v", j)
	}
	j, err := er.Start(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if j.Remote || j.State != edge.ErasureDone || j.Edges != 2 || j.Unliked != 2 {
		t.Fatalf("Start over a remote job = %+v, want it taken over and done (2 edges, 2 likes)", j)
	}
}

// gatedStore holds every Apply until the gate opens.
type gatedStore struct {
	*pebblestore.Store
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStore) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Store.Apply(ctx, req)
}

// Quiesce waits for every write already authorized to reach the store.
func TestQuiesceWaitsForAuthorizedWrites(t *testing.T) {
	ctx := context.Background()
	st, clk := openMemStore(t)
	g := &gatedStore{Store: st, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	svc := newService(t, g, clk, nil)
	wrote := make(chan error, 1)
	go func() {
		_, err := svc.Set(ctx, "u1", "a", crdt.Liked, "k")
		wrote <- err
	}()
	<-g.entered // authorized, in the store
	quiesced := make(chan error, 1)
	go func() { quiesced <- svc.Quiesce(ctx) }()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := svc.Quiesce(short); err == nil {
		t.Fatal("Quiesce returned while an authorized write was still in the store")
	}
	close(g.gate)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-quiesced; err != nil {
		t.Fatalf("Quiesce after the write finished: %v", err)
	}
}

type refusingAuthority struct{}

func (refusingAuthority) Authorize(context.Context, string) (uint64, error) {
	return 0, edge.ErrFailClosed
}

// An erasure starts only where the user's writes may happen now: elsewhere
// Start fails (the API answers 503 and the client retries at the home region)
// and stores no job.
func TestEraserStartsOnlyWithWriteAuthority(t *testing.T) {
	ctx := context.Background()
	st, clk := openMemStore(t)
	svc := newService(t, st, clk, refusingAuthority{})
	er, err := edge.NewEraser(ctx, edge.EraserConfig{Service: svc, Store: st, Jobs: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = er.Close() }()
	if _, err := er.Start(ctx, "u1"); !errors.Is(err, edge.ErrFailClosed) {
		t.Fatalf("Start without authority: %v, want ErrFailClosed", err)
	}
	if _, ok, err := st.Erasure(ctx, "u1"); ok || err != nil {
		t.Fatalf("a job was stored without authority (ok=%v, err=%v)", ok, err)
	}
}

func TestReopenLateAndMergeJob(t *testing.T) {
	done := edge.ErasureJob{User: "u", State: edge.ErasureDone, Edges: 3, Unliked: 2, FinishedAt: 9, Cursor: "z"}
	re := edge.ReopenLate(done)
	if re.State != edge.ErasureRunning || re.Cursor != "" || re.FinishedAt != 0 || re.Late != 1 || re.Edges != 3 || re.Unliked != 2 {
		t.Fatalf("ReopenLate(done) = %+v", re)
	}
	remote := done
	remote.Remote = true
	if got := edge.ReopenLate(remote); got != remote {
		t.Fatalf("ReopenLate of a Remote job = %+v, want it unchanged (its origin re-opens)", got)
	}
	// A step that read the job before the late arrival cannot close it.
	if got := edge.MergeJob(re, done); got.State != edge.ErasureRunning || got.Late != 1 || got.Cursor != "" || got.Edges != 3 {
		t.Fatalf("MergeJob(re-opened, stale done) = %+v, want running from the start", got)
	}
	// A step that read the re-opened job may close it.
	next := re
	next.State, next.Edges, next.Unliked, next.FinishedAt = edge.ErasureDone, 4, 3, 10
	if got := edge.MergeJob(re, next); got != next {
		t.Fatalf("MergeJob(re-opened, its own step) = %+v, want %+v", got, next)
	}
	// A take-over of a Remote replica is written as is.
	if got := edge.MergeJob(remote, edge.ErasureJob{User: "u", State: edge.ErasureRunning}); got.Remote || got.State != edge.ErasureRunning {
		t.Fatalf("MergeJob(remote, take-over) = %+v", got)
	}
}
