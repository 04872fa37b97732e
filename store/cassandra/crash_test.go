package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
)

const t0 = int64(1_700_000_000_000)

var errCrash = errors.New("simulated crash")

func openTest(t *testing.T, ks string, parts int, clk clock.Clock) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{Session: SharedSession(t), Keyspace: ks, Region: "r1", Partitions: parts, Clock: clk,
		SweepEvery: -1, OnError: func(err error) { t.Logf("background: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// crashOnce makes the first write that reaches stage stop there.
func crashOnce(s *Store, stage string) *atomic.Bool {
	var fired atomic.Bool
	s.SetTestHook(func(st string) error {
		if st == stage && fired.CompareAndSwap(false, true) {
			return errCrash
		}
		return nil
	})
	return &fired
}

// crashAfterEdge applies req with a crash right after its edge transaction.
func crashAfterEdge(t *testing.T, s *Store, req edge.Request) {
	t.Helper()
	crashOnce(s, "edge-written")
	if _, err := s.Apply(context.Background(), req); !errors.Is(err, errCrash) {
		t.Fatalf("crashed Apply: %v", err)
	}
}

// logOf reads every partition's whole log.
func logOf(t *testing.T, s *Store) []edge.Event {
	t.Helper()
	var all []edge.Event
	for p := range s.Partitions() {
		all = append(all, pipelinetest.ReadAll(t, s, uint32(p), 7)...)
	}
	return all
}

// eventsOf returns the log events of edge (item, user).
func eventsOf(evs []edge.Event, item, user string) []edge.Event {
	var out []edge.Event
	for _, ev := range evs {
		if ev.Item == item && ev.User == user {
			out = append(out, ev)
		}
	}
	return out
}

func mustApply(t *testing.T, s *Store, req edge.Request, want edge.Action) edge.Decision {
	t.Helper()
	d, err := s.Apply(context.Background(), req)
	if err != nil {
		t.Fatalf("Apply(%+v): %v", req, err)
	}
	if d.Action != want {
		t.Fatalf("Apply(%+v): action %d, want %d (%+v)", req, d.Action, want, d)
	}
	return d
}

// TestCrashRecovery stops writes at each stage between the edge transaction
// and the outbox and checks that retries, other writers, readers and the
// sweeper finish them exactly once.
func TestCrashRecovery(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 2, clk)
	ctx := context.Background()

	// 1. Crash after the edge transaction: the flip is durable, its event is
	// pending, nothing is in the log; the client's retry relays and replays.
	crashAfterEdge(t, s, edgetest.Like("a", "u1", "k1", 1, t0))
	if e, ok, _ := s.Edge(ctx, "a", "u1"); !ok || e.State != crdt.Liked {
		t.Fatalf("edge after crash = %+v %v, want liked", e, ok)
	}
	if evs := eventsOf(logOf(t, s), "a", "u1"); len(evs) != 0 {
		t.Fatalf("log holds %+v before the relay", evs)
	}
	d := mustApply(t, s, edgetest.Like("a", "u1", "k1", 1, t0+1), edge.ActReplay)
	if !d.Answer.Liked || !d.Answer.Changed {
		t.Fatalf("replay after crash answered %+v", d.Answer)
	}
	if evs := eventsOf(logOf(t, s), "a", "u1"); len(evs) != 1 || evs[0].Delta != 1 || evs[0].Idem == nil || evs[0].Idem.Key != "k1" {
		t.Fatalf("log after retry: %+v", evs)
	}

	// 2. Crash after the edge transaction, then another request on the same
	// edge: it relays the pending event first, then decides on top of it.
	crashAfterEdge(t, s, edgetest.Unlike("a", "u1", "k2", 1, t0+2))
	mustApply(t, s, edgetest.Unlike("a", "u1", "k3", 1, t0+3), edge.ActNoop)
	mustApply(t, s, edgetest.Unlike("a", "u1", "k2", 1, t0+4), edge.ActReplay)
	evs := eventsOf(logOf(t, s), "a", "u1")
	if len(evs) != 3 || evs[1].Delta != -1 || evs[1].Version.Op != 2 || evs[2].Kind != edge.KindRecord || evs[2].Idem.Key != "k3" {
		t.Fatalf("log after second crash: %+v", evs)
	}

	// 3. Crash after the edge transaction, nobody touches the edge again: the
	// sweeper finishes the relay (and leaves the intent of nothing behind).
	crashAfterEdge(t, s, edgetest.Like("b", "u2", "k1", 1, t0+5))
	n, err := s.Sweep(ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 relayed", n, err)
	}
	if n, err := s.Sweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	if evs := eventsOf(logOf(t, s), "b", "u2"); len(evs) != 1 || evs[0].Delta != 1 {
		t.Fatalf("log after sweep: %+v", evs)
	}
	mustApply(t, s, edgetest.Like("b", "u2", "k1", 1, t0+6), edge.ActReplay)

	// 4. Crash after the sequence transaction, before the outbox rows: a
	// reader writes the rows from the inflight slots; the retry replays.
	crashOnce(s, "sequence-written")
	if _, err := s.Apply(ctx, edgetest.Like("c", "u3", "k1", 1, t0+7)); err == nil {
		t.Fatal("Apply crashed in the append succeeded")
	}
	if evs := eventsOf(logOf(t, s), "c", "u3"); len(evs) != 1 || evs[0].Delta != 1 || evs[0].Pos == 0 {
		t.Fatalf("log after a crash in the append: %+v", evs)
	}
	mustApply(t, s, edgetest.Like("c", "u3", "k1", 1, t0+8), edge.ActReplay)
	if evs := eventsOf(logOf(t, s), "c", "u3"); len(evs) != 1 {
		t.Fatalf("log after retry: %+v", evs)
	}

	// 5. An intent whose edge transaction never happened (lost its condition,
	// or never ran) is deleted; buckets whose minute is over move the cursor.
	now := clk.Now().UnixMilli()
	if err := s.write(ctx, s.q.intentInsert, 0, now/60000, "ghost", "g", int64(1), int64(7), now).Exec(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("Sweep of a stale intent = %d, %v", n, err)
	}
	var left int
	if err := s.read(ctx, "SELECT COUNT(*) FROM "+ks+".relay_intents WHERE partition = 0 AND minute = ?", now/60000).Scan(&left); err != nil || left != 0 {
		t.Fatalf("intents left in the bucket: %d, %v", left, err)
	}
	clk.Advance(3 * time.Minute)
	if _, err := s.Sweep(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for p := range s.Partitions() {
		var c int64
		if err := s.read(ctx, s.q.cursorGet, p).Scan(&c); err != nil || c < now/60000+1 {
			t.Fatalf("sweep cursor of partition %d = %d, %v; want past minute %d", p, c, err, now/60000)
		}
	}

	// The counts: every flip counted once.
	clk.Advance(time.Second)
	aggs := pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk})
	pipelinetest.CatchUp(t, aggs)
	pipelinetest.CheckCounts(t, s, s, []string{"a", "b", "c"})
}

// TestTwoProcessesRelayOnce: two stores on one keyspace (two processes) race
// to relay the same pending event; it reaches the log once.
func TestTwoProcessesRelayOnce(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	a := openTest(t, ks, 1, clk)
	b := openTest(t, ks, 1, clk)
	ctx := context.Background()
	for round := range 3 {
		item := []string{"x", "y", "z"}[round]
		crashOnce(a, "edge-written")
		if _, err := a.Apply(ctx, edgetest.Like(item, "u", "k-"+item, 1, t0)); !errors.Is(err, errCrash) {
			t.Fatalf("crashed Apply: %v", err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := []*Store{a, b}[i%2]
				var err error
				switch i / 2 {
				case 0:
					_, err = st.Sweep(ctx, 0)
				case 1:
					var d edge.Decision
					d, err = st.Apply(ctx, edgetest.Like(item, "u", "k-"+item, 1, t0+1))
					if err == nil && d.Action != edge.ActReplay {
						err = errors.New("retry did not replay")
					}
				default:
					var d edge.Decision
					d, err = st.Apply(ctx, edgetest.Like(item, "u", fmt.Sprintf("k2-%s-%d", item, i), 1, t0+1))
					if err == nil && d.Action != edge.ActNoop {
						err = errors.New("second like was not a no-op")
					}
				}
				errs <- err
			}()
		}
		waitAll(t, &wg, errs)
		evs := eventsOf(logOf(t, b), item, "u")
		writes := 0
		for _, ev := range evs {
			if ev.Kind == edge.KindFlip {
				writes++
			}
		}
		if writes != 1 {
			t.Fatalf("round %d: %d flip events in the log, want 1: %+v", round, writes, evs)
		}
	}
}

// TestPartialWindow: a commit that dies after some items' cells were written
// (before dedupe-only rows and the position) is replayed exactly.
func TestPartialWindow(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	ctx := context.Background()
	items := []string{"p", "q", "r", "s"}
	for i, item := range items {
		for j := range i + 1 {
			mustApply(t, s, edgetest.Like(item, string(rune('a'+j)), "k-"+item, 1, t0), edge.ActWrite)
		}
	}
	clk.Advance(time.Second)
	var n atomic.Int32
	s.SetTestHook(func(st string) error {
		if st == "cell-written" && n.Add(1) == 2 {
			return errCrash
		}
		return nil
	})
	agg, err := pipeline.NewAggregator(pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := agg.Step(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("Step: %v, want the simulated crash", err)
	}
	if pos, _, _ := s.Position(ctx, 0); pos != 0 {
		t.Fatalf("position moved to %d in a crashed window", pos)
	}
	if c, _ := s.Count(ctx, "p"); c != 1 {
		t.Fatalf("Count(p) = %d after the first item's batch, want 1", c)
	}
	// A fresh aggregator (the restarted process) replays the window.
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}))
	pipelinetest.CheckCounts(t, s, s, items)
	// And the write-then-crash sequence again, with more events on written cells.
	mustApply(t, s, edgetest.Unlike("p", "a", "k2", 1, t0+1), edge.ActWrite)
	mustApply(t, s, edgetest.Like("s", "z", "k-s", 1, t0+1), edge.ActWrite)
	clk.Advance(time.Second)
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}))
	pipelinetest.CheckCounts(t, s, s, items)
}

// TestErasureRace: a like that read no erasure marker but commits after the
// erasure started is erased by its own relay.
func TestErasureRace(t *testing.T) {
	ks := FreshKeyspace(t)
	s := openTest(t, ks, 2, nil)
	ctx := context.Background()
	s.SetTestHook(func(st string) error {
		if st == "edge-written" {
			s.SetTestHook(nil)
			return s.PutErasure(ctx, edge.ErasureJob{User: "late", State: edge.ErasureRunning, StartedAt: t0})
		}
		return nil
	})
	if _, err := s.Apply(ctx, edgetest.Like("i", "late", "k", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := s.Edge(ctx, "i", "late"); e.State != crdt.Erased {
		t.Fatalf("edge after the raced like = %+v, want erased", e)
	}
	var sum int32
	for _, ev := range eventsOf(logOf(t, s), "i", "late") {
		sum += ev.Delta
	}
	if sum != 0 {
		t.Fatalf("deltas of the raced edge sum to %d, want 0", sum)
	}
}
