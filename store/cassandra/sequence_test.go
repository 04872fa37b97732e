package cassandra

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
)

// checkGapless fails unless every partition's log is positions 1..n with no
// gap and no duplicate edge event, and the log holds want events in all.
func checkGapless(t *testing.T, s *Store, want int) {
	t.Helper()
	total := 0
	seen := map[string]bool{}
	for p := range s.Partitions() {
		evs, _, err := s.Read(context.Background(), uint32(p), 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			if ev.Pos != uint64(i+1) {
				t.Fatalf("partition %d: event %d at position %d", p, i, ev.Pos)
			}
			k := fmt.Sprintf("%s/%s/%d/%d", ev.Item, ev.User, ev.Version.Epoch, ev.Version.Op)
			if seen[k] {
				t.Fatalf("partition %d: edge event %s twice", p, k)
			}
			seen[k] = true
		}
		total += len(evs)
	}
	if total != want {
		t.Fatalf("the log holds %d events, want %d", total, want)
	}
}

// waitAll waits for wg, then fails on the first error its goroutines sent.
func waitAll(t *testing.T, wg *sync.WaitGroup, errs chan error) {
	t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupedSequenceOneTransaction: with one sequence group, the events
// waiting for the appender, whatever their log partitions, get their
// positions from one conditional batch (one Paxos round).
func TestGroupedSequenceOneTransaction(t *testing.T) {
	ks := FreshKeyspace(t)
	s := openTest(t, ks, 8, clock.NewFake(time.UnixMilli(t0)))
	if g := s.SequenceGroups(); g != 1 {
		t.Fatalf("a new keyspace has %d sequence groups, want 1", g)
	}
	mustApply(t, s, edgetest.Like("warm", "u0", "", 1, t0), edge.ActWrite)
	// Hold the appender after its next transaction, so every later like
	// queues behind it and the one after takes them all.
	hold, held := make(chan struct{}), make(chan struct{})
	var once, release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before Close waits for the appender
	s.SetTestHook(func(st string) error {
		if st == "sequence-written" {
			once.Do(func() { close(held); <-hold })
		}
		return nil
	})
	const n = 24
	// Edges on distinct lock stripes: a like holds its stripe until its
	// relay returns, so one sharing like 0's would wait behind the hold.
	var edges [][2]string
	stripes := map[*sync.Mutex]bool{}
	for i := 0; len(edges) <= n; i++ {
		item, user := fmt.Sprintf("item-%d", i), fmt.Sprintf("user-%d", i)
		if mu := s.edgeLock(item, user); !stripes[mu] {
			stripes[mu] = true
			edges = append(edges, [2]string{item, user})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	like := func(i int) {
		defer wg.Done()
		_, err := s.Apply(context.Background(), edgetest.Like(edges[i][0], edges[i][1], "", 1, t0))
		errs <- err
	}
	wg.Add(1)
	go like(0)
	<-held
	before := s.OpsByStatement()
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go like(i)
	}
	// Poll until every like waits in the appender's queue.
	s.appMu.Lock()
	app := s.appenders[0]
	s.appMu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for len(app.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d likes reached the appender", len(app.reqs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	release.Do(func() { close(hold) })
	waitAll(t, &wg, errs)
	after := s.OpsByStatement()
	seqTx := 0
	for k, v := range after {
		if strings.HasPrefix(k, "paxos BATCH") || strings.HasPrefix(k, "paxos UPDATE outbox_seqs ") || strings.HasPrefix(k, "paxos INSERT INTO outbox_seqs ") {
			seqTx += int(v - before[k])
		}
	}
	t.Logf("%d likes over 8 partitions: %d sequence transactions", n, seqTx)
	if seqTx > 2 {
		t.Fatalf("%d queued likes took %d sequence transactions, want them folded into a few", n, seqTx)
	}
	checkGapless(t, s, n+2)
}

// TestTwoProcessesOneGroup: two processes appending to one sequence group at
// once (their batches race on one Paxos partition) give every event exactly
// one position, gapless in each partition.
func TestTwoProcessesOneGroup(t *testing.T) {
	ks := FreshKeyspace(t)
	a := openTest(t, ks, 4, clock.Real{})
	b := openTest(t, ks, 4, clock.Real{})
	const perWorker, workers = 12, 8
	var wg sync.WaitGroup
	errs := make(chan error, perWorker*workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := []*Store{a, b}[w%2]
			for i := range perWorker {
				_, err := st.Apply(context.Background(), edgetest.Like(fmt.Sprintf("i-%d-%d", w, i), fmt.Sprintf("u-%d", w), "", 1, t0))
				errs <- err
			}
		}()
	}
	waitAll(t, &wg, errs)
	checkGapless(t, a, perWorker*workers)
}

// TestSequenceLayouts: a keyspace whose store row predates schema 10 keeps one
// sequence row per partition; SequenceGroups is validated; a hostile
// meta.seq_groups is refused at Open.
func TestSequenceLayouts(t *testing.T) {
	ctx := context.Background()
	t.Run("per-partition rows", func(t *testing.T) {
		ks := FreshKeyspace(t)
		MakeLegacySequence(t, ks, "r1", 4, t0)
		s := openTest(t, ks, 4, clock.NewFake(time.UnixMilli(t0)))
		if g := s.SequenceGroups(); g != 0 {
			t.Fatalf("an older keyspace got %d sequence groups, want 0", g)
		}
		for i := range 6 {
			mustApply(t, s, edgetest.Like(fmt.Sprintf("i%d", i), "u", "", 1, t0), edge.ActWrite)
		}
		old, err := s.TableRows(ctx, "outbox_seq")
		if err != nil {
			t.Fatal(err)
		}
		grouped, err := s.TableRows(ctx, "outbox_seqs")
		if err != nil {
			t.Fatal(err)
		}
		if old == 0 || grouped != 0 {
			t.Fatalf("outbox_seq has %d rows, outbox_seqs %d: want the per-partition table only", old, grouped)
		}
		checkGapless(t, s, 6)
	})
	t.Run("bad options", func(t *testing.T) {
		ks := FreshKeyspace(t)
		for _, g := range []int{-1, 5} {
			_, err := Open(ctx, Options{Session: SharedSession(t), Keyspace: ks, Region: "r1", Partitions: 4, SequenceGroups: g, SweepEvery: -1})
			if err == nil || !strings.Contains(err.Error(), "SequenceGroups") {
				t.Fatalf("SequenceGroups %d: %v, want refused", g, err)
			}
		}
	})
	t.Run("hostile meta", func(t *testing.T) {
		ks := FreshKeyspace(t)
		err := SharedSession(t).Query(fmt.Sprintf("INSERT INTO %s.meta (name, region, partitions, created_ms, seq_groups) VALUES ('store', 'r1', 4, 1, 99)", ks)).Exec()
		if err != nil {
			t.Fatal(err)
		}
		_, err = Open(ctx, Options{Session: SharedSession(t), Keyspace: ks, Region: "r1", Partitions: 4, SweepEvery: -1})
		if err == nil || !strings.Contains(err.Error(), "seq_groups") {
			t.Fatalf("meta.seq_groups 99: %v, want refused", err)
		}
	})
}

// TestRegroup: likectl migrate --sequence-groups moves an older keyspace's
// per-partition rows to one group, and back to three: positions continue
// gapless, a process still on the old layout fails closed (no position
// issued twice), repeating a move changes nothing, and bad counts are refused.
func TestRegroup(t *testing.T) {
	ctx := context.Background()
	ks := FreshKeyspace(t)
	MakeLegacySequence(t, ks, "r1", 4, t0)
	clk := clock.NewFake(time.UnixMilli(t0))
	old := openTest(t, ks, 4, clk)
	likes := 0
	like := func(s *Store) error {
		likes++
		_, err := s.Apply(ctx, edgetest.Like(fmt.Sprintf("i%d", likes), fmt.Sprintf("u%d", likes%3), "", 1, t0))
		return err
	}
	for range 8 {
		if err := like(old); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	logf := func(l string) { lines = append(lines, l) }
	if err := Regroup(ctx, SharedSession(t), ks, 1, logf); err != nil {
		t.Fatal(err)
	}
	t.Log(lines)
	// The old process remembers its rows; its next append must not succeed.
	if err := like(old); err == nil {
		t.Fatal("a process on the moved layout appended")
	}
	s1 := openTest(t, ks, 4, clk)
	if g := s1.SequenceGroups(); g != 1 {
		t.Fatalf("after the move: %d groups, want 1", g)
	}
	if err := s1.FinishPending(ctx); err != nil { // the old process's like, pending
		t.Fatal(err)
	}
	for range 8 {
		if err := like(s1); err != nil {
			t.Fatal(err)
		}
	}
	checkGapless(t, s1, likes)
	if err := Regroup(ctx, SharedSession(t), ks, 1, logf); err != nil || !strings.Contains(lines[len(lines)-1], "already") {
		t.Fatalf("repeated move: %v %q", err, lines[len(lines)-1])
	}
	for _, g := range []int{0, 5} {
		if err := Regroup(ctx, SharedSession(t), ks, g, logf); err == nil {
			t.Fatalf("Regroup to %d groups: no error", g)
		}
	}
	if err := Regroup(ctx, SharedSession(t), ks, 3, logf); err != nil {
		t.Fatal(err)
	}
	if err := like(s1); err == nil {
		t.Fatal("a process on the one-group layout appended after the move to three")
	}
	s3 := openTest(t, ks, 4, clk)
	if err := s3.FinishPending(ctx); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if err := like(s3); err != nil {
			t.Fatal(err)
		}
	}
	checkGapless(t, s3, likes)
	if err := Regroup(ctx, SharedSession(t), ks, 1, logf); err != nil { // back: over the rows the first move left
		t.Fatal(err)
	}
	s4 := openTest(t, ks, 4, clk)
	for range 4 {
		if err := like(s4); err != nil {
			t.Fatal(err)
		}
	}
	checkGapless(t, s4, likes)
}
