package pebblestore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

var crashSeed = flag.Uint64("crash.seed", 0, "run TestCrashRecovery with this seed only")

// TestCrashRecovery simulates power loss of the whole region at random points
// of a random workload (likes, unlikes, client retries, key misuse, retractions,
// erasures, epoch bumps, memtable flushes) while the aggregators are stepped
// with injected commit faults. After each crash the database is reopened from
// what a crash would leave on disk (vfs.MemFS.CrashClone, a random share of the
// unsynced data kept), the aggregators catch up, and:
//
//   - every acknowledged request (Apply returned without error before the
//     crash) is present: its edge is at least at the acknowledged version, and
//     a retry of its key replays the acknowledged answer (or still conflicts);
//   - the log and the edges agree: each edge's counted log deltas sum to its
//     state (no edge without its event, no event without its edge);
//   - every committed watermark is honest;
//   - for every item, Count == the number of LIKED edges;
//   - a replay of the whole log from position 0 changes no count.
func TestCrashRecovery(t *testing.T) {
	seeds := []uint64{}
	if *crashSeed != 0 {
		seeds = append(seeds, *crashSeed)
	} else {
		n := uint64(8)
		if testing.Short() {
			n = 3
		}
		for s := uint64(1); s <= n; s++ {
			seeds = append(seeds, s)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("crash seed %d failed; reproduce with: go test -race ./store/pebblestore -run 'TestCrashRecovery' -crash.seed=%d -v", seed, seed)
				}
			}()
			runCrash(t, seed)
		})
	}
}

var errFault = errors.New("injected cell store fault")

// faultyCells injects failures into aggregator commits:
//   - nothing written, error;
//   - cells and dedupe written but not the position (a crash between a cell
//     write and a position commit, as a non-atomic production backend could
//     suffer), error;
//   - everything written, error (a lost acknowledgement).
//
// The aggregator must reload its position and replay without counting twice.
type faultyCells struct {
	pipeline.CellStore
	rng    *rand.Rand // used only by the goroutine stepping the aggregators
	pct    int
	faults int
}

func (f *faultyCells) Commit(ctx context.Context, w pipeline.Window) error {
	if f.pct == 0 || f.rng.IntN(100) >= f.pct {
		return f.CellStore.Commit(ctx, w)
	}
	f.faults++
	switch f.rng.IntN(3) {
	case 0:
		return errFault
	case 1:
		pos, wm, err := f.CellStore.Position(ctx, w.Partition)
		if err != nil {
			return err
		}
		back := w
		back.Through, back.Watermark = pos, wm
		if err := f.CellStore.Commit(ctx, back); err != nil {
			return err
		}
		return errFault
	default:
		if err := f.CellStore.Commit(ctx, w); err != nil {
			return err
		}
		return errFault
	}
}

// replayFromZero answers position 0 on the first Position call per partition.
type replayFromZero struct {
	pipeline.CellStore
	done map[uint32]bool
}

func (z *replayFromZero) Position(ctx context.Context, p uint32) (uint64, int64, error) {
	pos, wm, err := z.CellStore.Position(ctx, p)
	if !z.done[p] {
		z.done[p] = true
		pos = 0
	}
	return pos, wm, err
}

type acked struct {
	req edge.Request
	d   edge.Decision
}

type crashWorld struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	clk    *clock.Fake
	fs     *vfs.MemFS
	parts  int
	maxEv  int
	s      *pebblestore.Store
	cells  *faultyCells
	aggs   []*pipeline.Aggregator
	wc     *pipelinetest.WatermarkChecker
	items  []string
	users  []string
	epoch  uint64
	nextID int

	history []edge.Request // every keyed request issued, acknowledged or not

	mu     sync.Mutex // guards the fields below
	frozen bool       // a crash snapshot was taken: later acks prove nothing
	acks   []acked
}

func (w *crashWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("seed %d: "+format, append([]any{w.seed}, args...)...)
}

func (w *crashWorld) open() {
	w.t.Helper()
	s, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: w.fs, Region: "r1", Partitions: w.parts, Clock: w.clk, CacheBytes: 1 << 20,
	})
	if err != nil {
		w.fatalf("open: %v", err)
	}
	w.s = s
	// Under -race Pebble's invariant checks make every sstable iterator costly;
	// compacting what recovery left keeps reads cheap (and exercises compaction
	// of recovered data).
	if err := s.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		w.fatalf("compact: %v", err)
	}
	w.cells = &faultyCells{CellStore: s, rng: rand.New(rand.NewPCG(w.seed, uint64(w.nextID))), pct: w.rng.IntN(30)}
	w.wc = &pipelinetest.WatermarkChecker{Log: s, Cells: s}
	w.aggs = pipelinetest.NewAggregators(w.t, pipeline.Config{Region: "r1", Log: s, Cells: w.cells, Clock: w.clk, MaxEvents: w.maxEv})
}

func runCrash(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xC0FFEE))
	w := &crashWorld{
		t: t, seed: seed, rng: rng,
		clk:   clock.NewFake(time.UnixMilli(t0)),
		fs:    vfs.NewCrashableMem(),
		parts: 1 + rng.IntN(4),
		maxEv: 1 + rng.IntN(6),
		items: []string{"p0", "p1", "p2", "ü", "日本"},
		users: []string{"a", "b", "c", "d", "e", "f", "g", "h", "ñ", "😀"},
		epoch: 1,
	}
	w.open()
	defer func() { _ = w.s.Close() }()
	crashes := 2 + rng.IntN(2)
	rounds := 40
	if testing.Short() {
		rounds = 20
	}
	for range crashes {
		crashAt := rng.IntN(rounds)
		for r := range rounds {
			w.round(r == crashAt)
		}
		w.verify()
	}
	// A last stretch without a crash, then the full check and a whole-log replay.
	for range rounds / 2 {
		w.round(false)
	}
	w.verify()
	before := w.counts()
	z := &replayFromZero{CellStore: w.s, done: map[uint32]bool{}}
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: w.s, Cells: z, Clock: w.clk, MaxEvents: 1 + rng.IntN(5)}))
	if after := w.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		w.fatalf("replaying the whole log changed counts: %v -> %v", before, after)
	}
}

// genRound picks 1..8 requests on distinct edges.
func (w *crashWorld) genRound() []edge.Request {
	n := 1 + w.rng.IntN(8)
	used := map[[2]string]bool{}
	var reqs []edge.Request
	now := w.clk.Now().UnixMilli()
	for range n {
		var req edge.Request
		switch r := w.rng.IntN(100); {
		case r < 25 && len(w.history) > 0:
			req = w.history[w.rng.IntN(len(w.history))] // a client retry, same key
			req.Now = now
		case r < 30 && len(w.history) > 0:
			// A buggy client reusing a key for another request.
			old := w.history[w.rng.IntN(len(w.history))]
			req = edgetest.Like(w.items[w.rng.IntN(len(w.items))], old.User, old.IdemKey, w.epoch, now)
		default:
			w.nextID++
			item, user := w.items[w.rng.IntN(len(w.items))], w.users[w.rng.IntN(len(w.users))]
			key := fmt.Sprintf("k%d", w.nextID)
			switch r := w.rng.IntN(100); {
			case r < 50:
				req = edgetest.Like(item, user, key, w.epoch, now)
			case r < 90:
				req = edgetest.Unlike(item, user, key, w.epoch, now)
			case r < 97:
				req = edgetest.Unlike(item, user, "", w.epoch, now)
				req.Kind = edge.KindRetraction
			default:
				req = edgetest.Erase(item, user, w.epoch, now)
			}
		}
		k := [2]string{req.Item, req.User}
		if used[k] {
			continue
		}
		used[k] = true
		if req.IdemKey != "" {
			w.history = append(w.history, req)
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// round runs one group of concurrent requests while stepping aggregators; when
// crash is set, the region loses power after a random number of them returned.
func (w *crashWorld) round(crash bool) {
	ctx := context.Background()
	w.clk.Advance(time.Duration(w.rng.IntN(3)) * time.Millisecond)
	if w.rng.IntN(60) == 0 {
		w.epoch++
	}
	reqs := w.genRound()
	finished := make(chan struct{}, len(reqs))
	for _, req := range reqs {
		go func() {
			defer func() { finished <- struct{}{} }()
			d, err := w.s.Apply(ctx, req)
			if err != nil {
				return // outcome unknown: not an acknowledgement
			}
			w.mu.Lock()
			if !w.frozen {
				w.acks = append(w.acks, acked{req, d})
			}
			w.mu.Unlock()
		}()
	}
	if !crash {
		for range w.rng.IntN(3) {
			w.step(w.rng.IntN(w.parts))
		}
		if w.rng.IntN(40) == 0 {
			if err := w.s.DB().Flush(); err != nil {
				w.fatalf("flush: %v", err)
			}
		}
		for range reqs {
			<-finished
		}
		for p := range w.parts {
			w.wc.Check(w.t, uint32(p)) // new events never fall under a committed watermark
		}
		return
	}
	waitFor := w.rng.IntN(len(reqs) + 1)
	for range waitFor {
		<-finished
	}
	switch w.rng.IntN(3) {
	case 0:
		w.step(w.rng.IntN(w.parts))
	case 1:
		// Caught-up aggregators commit the head's CompleteThrough as their
		// watermark: the restart must not stamp new events at or below it.
		for p := range w.parts {
			for i := 0; i < 1000; i++ {
				_, caughtUp, err := w.aggs[p].Step(context.Background())
				if err != nil && !errors.Is(err, errFault) {
					w.fatalf("Step(%d): %v", p, err)
				}
				if caughtUp && err == nil {
					break
				}
			}
		}
		if w.rng.IntN(2) == 0 {
			// The OS wrote the unsynced aggregator commits out before the power went.
			if err := w.s.DB().LogData(nil, pebble.Sync); err != nil {
				w.fatalf("sync: %v", err)
			}
		}
	}
	pct := []int{0, 10, 50, 90, 100}[w.rng.IntN(5)]
	w.mu.Lock()
	crashed := w.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: w.rng})
	w.frozen = true
	w.mu.Unlock()
	for range len(reqs) - waitFor {
		<-finished
	}
	_ = w.s.Close() // the old process's later writes do not reach the clone
	w.mu.Lock()
	w.frozen = false
	w.mu.Unlock()
	w.fs = crashed
	if w.rng.IntN(2) == 0 {
		// The machine comes back with its clock stepped back a little.
		w.clk.Advance(-time.Duration(w.rng.IntN(5)) * time.Millisecond)
	}
	w.open()
}

// step runs one window of partition p and checks its committed watermark.
func (w *crashWorld) step(p int) {
	if _, _, err := w.aggs[p].Step(context.Background()); err != nil && !errors.Is(err, errFault) {
		w.fatalf("Step(%d): %v", p, err)
	}
	w.wc.Check(w.t, uint32(p))
}

func (w *crashWorld) counts() map[string]int64 {
	out := map[string]int64{}
	for _, item := range w.items {
		n, err := w.s.Count(context.Background(), item)
		if err != nil {
			w.fatalf("Count: %v", err)
		}
		out[item] = n
	}
	return out
}

func (w *crashWorld) verify() {
	t := w.t
	t.Helper()
	ctx := context.Background()
	w.cells.pct = 0
	pipelinetest.CatchUp(t, w.aggs)
	for p := range w.parts {
		w.wc.Check(t, uint32(p))
	}

	// The log and the edges agree.
	sum := map[[2]string]int{}
	for p := range w.parts {
		for _, ev := range pipelinetest.ReadAll(t, w.s, uint32(p), 500) {
			if ev.Kind.Counted() {
				sum[[2]string{ev.Item, ev.User}] += int(ev.Delta)
			}
		}
	}
	for _, item := range w.items {
		liked := 0
		for _, user := range w.users {
			e, _, err := w.s.Edge(ctx, item, user)
			if err != nil {
				w.fatalf("Edge: %v", err)
			}
			if got := sum[[2]string{item, user}]; got != e.State.Counts() {
				w.fatalf("edge (%s,%s) is %v at %v but its log deltas sum to %d", item, user, e.State, e.Version, got)
			}
			liked += e.State.Counts()
		}
		likers := edgetest.AllLikers(t, w.s, item, 3)
		n, err := w.s.Count(ctx, item)
		if err != nil {
			w.fatalf("Count: %v", err)
		}
		if n != int64(liked) || len(likers) != liked {
			w.fatalf("item %s: Count %d, Likers %d, LIKED edges %d", item, n, len(likers), liked)
		}
	}

	// Every acknowledged request survived.
	w.mu.Lock()
	acks := append([]acked(nil), w.acks...)
	w.mu.Unlock()
	var retries []acked
	for _, a := range acks {
		e, _, err := w.s.Edge(ctx, a.req.Item, a.req.User)
		if err != nil {
			w.fatalf("Edge: %v", err)
		}
		if e.Version.Less(a.d.Edge.Version) {
			w.fatalf("acknowledged %+v left the edge at %v, but the edge is back at %v", a.req, a.d.Edge.Version, e.Version)
		}
		if e.Version == a.d.Edge.Version && e.State != a.d.Edge.State {
			w.fatalf("acknowledged %+v left the edge %v at %v, now %v", a.req, a.d.Edge.State, e.Version, e.State)
		}
		switch a.d.Action {
		case edge.ActWrite, edge.ActNoop, edge.ActReplay, edge.ActConflict:
			if a.req.IdemKey != "" {
				retries = append(retries, a)
			}
		}
	}
	now := w.clk.Now().UnixMilli()
	for len(retries) > 0 {
		k := min(32, len(retries))
		var wg sync.WaitGroup
		errs := make([]string, k)
		for i, a := range retries[:k] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := a.req
				req.Now = now
				d, err := w.s.Apply(ctx, req)
				switch {
				case err != nil:
					errs[i] = err.Error()
				case a.d.Action == edge.ActConflict && d.Action != edge.ActConflict:
					errs[i] = fmt.Sprintf("acknowledged conflict %+v no longer conflicts: %+v", a.req, d)
				case a.d.Action != edge.ActConflict && (d.Action != edge.ActReplay || d.Answer != a.d.Answer):
					errs[i] = fmt.Sprintf("retry of acknowledged %+v (answer %+v) decided %d %+v", a.req, a.d.Answer, d.Action, d.Answer)
				}
			}()
		}
		wg.Wait()
		for _, e := range errs {
			if e != "" {
				w.fatalf("%s", e)
			}
		}
		retries = retries[k:]
	}
}
