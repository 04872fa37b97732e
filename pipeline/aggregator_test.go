package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// fakeLog is an in-memory pipeline.Log; the test appends events and sets each
// partition's CompleteThrough by hand.
type fakeLog struct {
	mu       sync.Mutex
	parts    [][]edge.Event
	complete []int64
	readErr  error // returned once by the next Read
}

var _ pipeline.Log = (*fakeLog)(nil)

func newFakeLog(parts int) *fakeLog {
	return &fakeLog{parts: make([][]edge.Event, parts), complete: make([]int64, parts)}
}

func (l *fakeLog) Partitions() int { return len(l.parts) }

func (l *fakeLog) Read(_ context.Context, p uint32, after uint64, max int) ([]edge.Event, pipeline.Head, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readErr; err != nil {
		l.readErr = nil
		return nil, pipeline.Head{}, err
	}
	evs := l.parts[p]
	head := pipeline.Head{CompleteThrough: l.complete[p]}
	if len(evs) > 0 {
		head.Pos = evs[len(evs)-1].Pos
	}
	var out []edge.Event
	for _, ev := range evs {
		if ev.Pos > after && len(out) < max {
			out = append(out, ev)
		}
	}
	return out, head, nil
}

// add appends ev to partition p at the next position (positions start at 1).
// CompleteThrough is left to the test, which keeps it honest.
func (l *fakeLog) add(p uint32, ev edge.Event) edge.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev.Partition = p
	ev.Pos = uint64(len(l.parts[p]) + 1)
	l.parts[p] = append(l.parts[p], ev)
	return ev
}

func (l *fakeLog) setComplete(p uint32, t int64) {
	l.mu.Lock()
	l.complete[p] = t
	l.mu.Unlock()
}

func (l *fakeLog) events(p uint32) []edge.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]edge.Event(nil), l.parts[p]...)
}

// fakeCells is an in-memory pipeline.CellStore and counts.CountStore.
type fakeCells struct {
	mu      sync.Mutex
	cells   map[crdt.CellKey]crdt.Cell
	applied map[pipeline.EdgeKey]pipeline.Applied
	pos     map[uint32][2]int64 // position, watermark
	commits int

	failNext    error                 // the next Commit writes nothing and returns this
	partialNext error                 // the next Commit writes cells and dedupe but not the position, and returns this
	cellsOnly   error                 // the next Commit writes only the cells, and returns this
	afterCells  func()                // called (once, then cleared) after Cells has read its answer
	onCommit    func(pipeline.Window) // called after each successful Commit
}

var (
	_ pipeline.CellStore = (*fakeCells)(nil)
	_ counts.CountStore  = (*fakeCells)(nil)
)

func newFakeCells() *fakeCells {
	return &fakeCells{cells: map[crdt.CellKey]crdt.Cell{}, applied: map[pipeline.EdgeKey]pipeline.Applied{}, pos: map[uint32][2]int64{}}
}

func (c *fakeCells) Position(_ context.Context, p uint32) (uint64, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.pos[p]
	return uint64(v[0]), v[1], nil
}

func (c *fakeCells) Cells(_ context.Context, keys []crdt.CellKey) (map[crdt.CellKey]crdt.Cell, error) {
	c.mu.Lock()
	out := map[crdt.CellKey]crdt.Cell{}
	for _, k := range keys {
		if v, ok := c.cells[k]; ok {
			out[k] = v
		}
	}
	hook := c.afterCells
	c.afterCells = nil
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return out, nil
}

func (c *fakeCells) Applied(_ context.Context, _ uint32, keys []pipeline.EdgeKey) (map[pipeline.EdgeKey]pipeline.Applied, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[pipeline.EdgeKey]pipeline.Applied{}
	for _, k := range keys {
		if v, ok := c.applied[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

func (c *fakeCells) Commit(_ context.Context, w pipeline.Window) error {
	c.mu.Lock()
	if err := c.failNext; err != nil {
		c.failNext = nil
		c.mu.Unlock()
		return err
	}
	for _, u := range w.Cells {
		if c.cells[u.Key].HWM != u.Expect {
			c.mu.Unlock()
			return fmt.Errorf("%w: %v", pipeline.ErrFenced, u.Key)
		}
	}
	for _, u := range w.Cells {
		c.cells[u.Key] = u.Cell
	}
	if err := c.cellsOnly; err != nil {
		// A backend that keeps dedupe state apart from cells: only the fence
		// protects the replay.
		c.cellsOnly = nil
		c.mu.Unlock()
		return err
	}
	for k, a := range w.Dedupe {
		c.applied[k] = a
	}
	if err := c.partialNext; err != nil {
		c.partialNext = nil
		c.mu.Unlock()
		return err
	}
	c.pos[w.Partition] = [2]int64{int64(w.Through), w.Watermark}
	c.commits++
	hook := c.onCommit
	c.mu.Unlock()
	if hook != nil {
		hook(w)
	}
	return nil
}

func (c *fakeCells) Count(_ context.Context, item string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for k, v := range c.cells {
		if k.Item == item {
			n += v.Value()
		}
	}
	return n, nil
}

func (c *fakeCells) Watermarks(context.Context) (crdt.Watermarks, error) {
	return crdt.Watermarks{}, nil
}

func (c *fakeCells) count(item string) int64 { n, _ := c.Count(context.Background(), item); return n }

func (c *fakeCells) commitCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits
}

// flip, like and unlike build flip events of edge (item, user) at version 1.op.
func flip(item, user string, op uint64, s crdt.State, delta int32, t int64) edge.Event {
	return edge.Event{Item: item, User: user, Bucket: edge.BucketOf(user), Version: crdt.Version{Epoch: 1, Op: op},
		State: s, Delta: delta, EventTime: t, Kind: edge.KindFlip}
}

func like(item, user string, op uint64, t int64) edge.Event {
	return flip(item, user, op, crdt.Liked, 1, t)
}

func unlike(item, user string, op uint64, t int64) edge.Event {
	return flip(item, user, op, crdt.Unliked, -1, t)
}

func newAgg(t *testing.T, log pipeline.Log, cells pipeline.CellStore, p uint32, maxEvents int) *pipeline.Aggregator {
	t.Helper()
	a, err := pipeline.NewAggregator(pipeline.Config{Region: "r1", Log: log, Cells: cells, MaxEvents: maxEvents}, p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func step(t *testing.T, a *pipeline.Aggregator) (int, bool) {
	t.Helper()
	n, caughtUp, err := a.Step(context.Background())
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return n, caughtUp
}

func catchUp(t *testing.T, a *pipeline.Aggregator) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("aggregator never catches up")
		}
		if _, caughtUp := step(t, a); caughtUp {
			return
		}
	}
}

// checkHonest: every event with EventTime <= the committed watermark is at or
// before the committed position.
func checkHonest(t *testing.T, log *fakeLog, cells *fakeCells, p uint32) {
	t.Helper()
	pos, wm, _ := cells.Position(context.Background(), p)
	for _, ev := range log.events(p) {
		if ev.EventTime <= wm && ev.Pos > pos {
			t.Fatalf("watermark %d claims completeness but event at pos %d (time %d) is past position %d", wm, ev.Pos, ev.EventTime, pos)
		}
	}
}

func TestStepFoldsDeltasIntoCells(t *testing.T) {
	log, cells := newFakeLog(2), newFakeCells()
	log.add(0, like("a", "u1", 1, 10))
	log.add(0, like("a", "u2", 1, 11))
	log.add(0, like("b", "u1", 1, 12))
	log.add(0, like("a", "u3", 1, 13))
	log.add(0, unlike("a", "u2", 2, 14))
	log.add(1, like("a", "u9", 1, 15)) // another partition: another cell
	log.setComplete(0, 20)
	a := newAgg(t, log, cells, 0, 100)
	if n, caughtUp := step(t, a); n != 5 || !caughtUp {
		t.Fatalf("Step = %d, %v; want 5, true", n, caughtUp)
	}
	ka := crdt.CellKey{Item: "a", Region: "r1", Shard: 0}
	if got, want := cells.cells[ka], (crdt.Cell{P: 3, N: 1, HWM: 5, Watermark: 20}); got != want {
		t.Fatalf("cell a = %+v, want %+v", got, want)
	}
	if cells.count("a") != 2 || cells.count("b") != 1 {
		t.Fatalf("counts a=%d b=%d", cells.count("a"), cells.count("b"))
	}
	if pos, wm, _ := cells.Position(context.Background(), 0); pos != 5 || wm != 20 {
		t.Fatalf("position %d/%d, want 5/20", pos, wm)
	}
	if ap := cells.applied[pipeline.EdgeKey{Item: "a", User: "u2"}]; ap.Write != (crdt.Version{Epoch: 1, Op: 2}) {
		t.Fatalf("dedupe state of (a,u2) = %+v", ap)
	}
	st := a.Stats()
	if st.Position != 5 || st.Head != 5 || st.Watermark != 20 || st.Windows != 1 || st.Events != 5 {
		t.Fatalf("stats %+v", st)
	}
	b := newAgg(t, log, cells, 1, 100)
	catchUp(t, b)
	if cells.count("a") != 3 {
		t.Fatalf("count a across partitions = %d, want 3", cells.count("a"))
	}
}

func TestDuplicateEventsAtDifferentPositionsAreDeduped(t *testing.T) {
	for _, maxEvents := range []int{1, 2, 3, 100} {
		t.Run(fmt.Sprintf("max%d", maxEvents), func(t *testing.T) {
			log, cells := newFakeLog(1), newFakeCells()
			log.add(0, like("a", "u", 1, 10))
			log.add(0, like("a", "u", 1, 10)) // a relay re-publishing after a crash
			log.add(0, unlike("a", "u", 2, 11))
			log.add(0, like("a", "u", 1, 12)) // an old version arriving late
			log.add(0, unlike("a", "u", 2, 12))
			log.add(0, like("a", "v", 1, 13))
			// A correction is deduped on its own version line: the same version as
			// a write is not a duplicate of it, but a repeated correction is.
			corr := edge.Event{Item: "a", User: "v", Bucket: edge.BucketOf("v"), Version: crdt.Version{Epoch: 1, Op: 1},
				State: crdt.Liked, Delta: -1, EventTime: 14, Kind: edge.KindCorrection}
			log.add(0, corr)
			log.add(0, corr)
			// Events carried for replication only never count.
			log.add(0, edge.Event{Item: "a", User: "w", Version: crdt.Version{Epoch: 1, Op: 5}, State: crdt.Liked, Delta: 1, EventTime: 15, Kind: edge.KindRecord})
			log.add(0, edge.Event{User: "w", EventTime: 15, Kind: edge.KindPurge})
			a := newAgg(t, log, cells, 0, maxEvents)
			catchUp(t, a)
			// (a,u): +1 −1 = 0; (a,v): +1 then a −1 correction = 0.
			if n := cells.count("a"); n != 0 {
				t.Fatalf("count a = %d, want 0 (cell %+v)", n, cells.cells)
			}
			log.add(0, like("a", "u", 3, 16))
			log.add(0, unlike("a", "u", 2, 16))
			catchUp(t, a)
			if n := cells.count("a"); n != 1 {
				t.Fatalf("count a = %d, want 1", n)
			}
		})
	}
}

func TestCaughtUpSemantics(t *testing.T) {
	log, cells := newFakeLog(1), newFakeCells()
	a := newAgg(t, log, cells, 0, 2)
	// Empty log, nothing new to say: no commit.
	if n, caughtUp := step(t, a); n != 0 || !caughtUp {
		t.Fatalf("empty Step = %d, %v", n, caughtUp)
	}
	if cells.commitCount() != 0 {
		t.Fatalf("an idle step committed")
	}
	// Idle but the head says time moved: a watermark-only window.
	log.setComplete(0, 50)
	if n, caughtUp := step(t, a); n != 0 || !caughtUp {
		t.Fatalf("watermark-only Step = %d, %v", n, caughtUp)
	}
	if pos, wm, _ := cells.Position(context.Background(), 0); cells.commitCount() != 1 || pos != 0 || wm != 50 {
		t.Fatalf("after watermark-only step: commits %d, position %d/%d", cells.commitCount(), pos, wm)
	}
	for i := range 5 {
		log.add(0, like("a", fmt.Sprint("u", i), 1, int64(60+i)))
	}
	for _, want := range []struct {
		n        int
		caughtUp bool
	}{{2, false}, {2, false}, {1, true}, {0, true}} {
		if n, caughtUp := step(t, a); n != want.n || caughtUp != want.caughtUp {
			t.Fatalf("Step = %d, %v; want %d, %v", n, caughtUp, want.n, want.caughtUp)
		}
		checkHonest(t, log, cells, 0)
	}
	// A window that ends exactly at the head is caught up in the same step.
	log.add(0, like("b", "u", 1, 70))
	log.add(0, like("b", "v", 1, 70))
	if n, caughtUp := step(t, a); n != 2 || !caughtUp {
		t.Fatalf("Step to exactly the head = %d, %v; want 2, true", n, caughtUp)
	}
	if cells.count("a") != 5 || cells.count("b") != 2 {
		t.Fatalf("counts a=%d b=%d", cells.count("a"), cells.count("b"))
	}
}

func TestWatermarkHonestAndMonotone(t *testing.T) {
	log, cells := newFakeLog(1), newFakeCells()
	// One group commit: three events share an event time.
	log.add(0, like("a", "u1", 1, 10))
	log.add(0, like("a", "u2", 1, 10))
	log.add(0, like("a", "u3", 1, 10))
	log.add(0, like("a", "u4", 1, 20))
	log.setComplete(0, 25)
	a := newAgg(t, log, cells, 0, 2)
	step(t, a)
	// Events at time 10 remain: the partition is only complete through 9.
	if _, wm, _ := cells.Position(context.Background(), 0); wm != 9 {
		t.Fatalf("watermark after a window ending inside a group commit = %d, want 9", wm)
	}
	checkHonest(t, log, cells, 0)
	catchUp(t, a)
	if _, wm, _ := cells.Position(context.Background(), 0); wm != 25 {
		t.Fatalf("watermark when caught up = %d, want CompleteThrough 25", wm)
	}
	// A head whose CompleteThrough went backwards never moves the watermark back,
	// nor does a replay of old events.
	log.setComplete(0, 5)
	log.add(0, like("b", "u1", 1, 30))
	log.setComplete(0, 5)
	catchUp(t, a)
	if _, wm, _ := cells.Position(context.Background(), 0); wm != 25 {
		t.Fatalf("watermark moved back to %d", wm)
	}
	for k, c := range cells.cells {
		if c.Watermark > 25 {
			t.Fatalf("cell %v watermark %d beyond the partition's", k, c.Watermark)
		}
	}

	// Randomized: watermarks never decrease and are always honest.
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 1))
		log, cells := newFakeLog(1), newFakeCells()
		a := newAgg(t, log, cells, 0, 1+rng.IntN(4))
		now, last := int64(100), int64(0)
		for i := range 200 {
			if rng.IntN(3) == 0 {
				now += int64(rng.IntN(3))
			}
			if rng.IntN(2) == 0 {
				log.add(0, like(fmt.Sprint("i", rng.IntN(3)), fmt.Sprint("u", i), 1, now))
			}
			if rng.IntN(4) == 0 {
				// Later events are stamped >= now: complete through now-1.
				log.setComplete(0, now-1)
			}
			if rng.IntN(2) == 0 {
				step(t, a)
				checkHonest(t, log, cells, 0)
				_, wm, _ := cells.Position(context.Background(), 0)
				if wm < last {
					t.Fatalf("seed %d: watermark went from %d to %d", seed, last, wm)
				}
				last = wm
			}
		}
	}
}

func TestCommitFailureReloadsAndReplays(t *testing.T) {
	log, cells := newFakeLog(1), newFakeCells()
	for i := range 6 {
		log.add(0, like("a", fmt.Sprint("u", i), 1, int64(10+i)))
	}
	a := newAgg(t, log, cells, 0, 4)
	boom := errors.New("boom")

	cells.failNext = boom
	if _, _, err := a.Step(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Step with failing commit: %v", err)
	}
	if cells.count("a") != 0 {
		t.Fatalf("failed commit wrote cells")
	}
	// Cells and dedupe written, position not (a crash between the two).
	cells.partialNext = boom
	if _, _, err := a.Step(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Step with partial commit: %v", err)
	}
	if cells.count("a") != 4 {
		t.Fatalf("partial commit: count %d, want 4", cells.count("a"))
	}
	if pos, _, _ := cells.Position(context.Background(), 0); pos != 0 {
		t.Fatalf("partial commit moved the position to %d", pos)
	}
	// The aggregator reloads position 0 and replays; the cell fence drops what
	// the cells already hold.
	catchUp(t, a)
	if cells.count("a") != 6 {
		t.Fatalf("after replay: count %d, want 6", cells.count("a"))
	}
	// Cells written, dedupe state and position not: the fence alone holds.
	for i := range 3 {
		log.add(0, unlike("a", fmt.Sprint("u", i), 2, int64(20+i)))
	}
	cells.cellsOnly = boom
	if _, _, err := a.Step(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Step with cells-only commit: %v", err)
	}
	// The replayed window reaches past the cells' HWM, so it is committed, and
	// only the per-event fence keeps the three unlikes from counting twice.
	log.add(0, like("a", "u9", 1, 25))
	catchUp(t, a)
	if cells.count("a") != 4 {
		t.Fatalf("after cells-only commit and replay: count %d, want 4", cells.count("a"))
	}
	log.readErr = boom
	if _, _, err := a.Step(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Step with failing read: %v", err)
	}
	log.add(0, like("a", "u0", 3, 30))
	catchUp(t, a)
	if cells.count("a") != 5 {
		t.Fatalf("after read error: count %d, want 5", cells.count("a"))
	}
}

// TestZombieIsFenced: two incarnations of one partition's aggregator (an old
// one that has not noticed it was replaced) race; the loser's commit is fenced,
// and nothing is counted twice.
func TestZombieIsFenced(t *testing.T) {
	log, cells := newFakeLog(1), newFakeCells()
	for i := range 3 {
		log.add(0, like("a", fmt.Sprint("u", i), 1, int64(10+i)))
	}
	zombie := newAgg(t, log, cells, 0, 100)
	live := newAgg(t, log, cells, 0, 100)
	// The live one commits between the zombie's read of the cells and its commit.
	cells.afterCells = func() { catchUp(t, live) }
	if _, _, err := zombie.Step(context.Background()); !errors.Is(err, pipeline.ErrFenced) {
		t.Fatalf("zombie Step: %v, want ErrFenced", err)
	}
	if cells.count("a") != 3 {
		t.Fatalf("count %d, want 3", cells.count("a"))
	}
	log.add(0, like("a", "u9", 1, 20))
	catchUp(t, zombie) // reloaded: continues from the live position
	catchUp(t, live)
	if cells.count("a") != 4 {
		t.Fatalf("count %d, want 4", cells.count("a"))
	}
}

// zeroOnce answers position 0 on the first Position call.
type zeroOnce struct {
	*fakeCells
	used bool
}

func (z *zeroOnce) Position(ctx context.Context, p uint32) (uint64, int64, error) {
	pos, wm, err := z.fakeCells.Position(ctx, p)
	if !z.used {
		z.used = true
		pos = 0
	}
	return pos, wm, err
}

// TestRandomExactlyOnce: a random edge history with duplicates re-published at
// later positions, random window sizes, failed and partial commits, and whole-log
// replays; each item's count always converges to its number of liked edges.
func TestRandomExactlyOnce(t *testing.T) {
	seeds := uint64(60)
	if testing.Short() {
		seeds = 15
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 77))
		parts := 1 + rng.IntN(3)
		log, cells := newFakeLog(parts), newFakeCells()
		aggs := make([]*pipeline.Aggregator, parts)
		for p := range parts {
			aggs[p] = newAgg(t, log, cells, uint32(p), 1+rng.IntN(5))
		}
		type ek struct{ item, user string }
		state := map[ek]edge.Event{} // last event per edge
		var published []edge.Event
		injected := errors.New("injected")
		now := int64(1000)
		for range 400 {
			now += int64(rng.IntN(2))
			switch r := rng.IntN(10); {
			case r < 6:
				k := ek{fmt.Sprint("i", rng.IntN(4)), fmt.Sprint("u", rng.IntN(6))}
				cur := state[k]
				target := crdt.Liked
				if cur.State == crdt.Liked {
					target = crdt.Unliked
				}
				ev := flip(k.item, k.user, cur.Version.Op+1, target, int32(target.Counts()-cur.State.Counts()), now)
				state[k] = ev
				p := uint32(edge.PartitionOf(k.item, ev.Bucket, parts))
				published = append(published, log.add(p, ev))
			case r < 8 && len(published) > 0:
				dup := published[rng.IntN(len(published))]
				dup.EventTime = now
				log.add(dup.Partition, dup)
			default:
				p := rng.IntN(parts)
				// (No cells-only faults here: with duplicates in the log, dedupe
				// state that is not committed with the cells cannot be exact.)
				switch rng.IntN(6) {
				case 0:
					cells.failNext = injected
				case 1:
					cells.partialNext = injected
				}
				_, _, err := aggs[p].Step(context.Background())
				if err != nil && !errors.Is(err, injected) {
					t.Fatalf("seed %d: %v", seed, err)
				}
				cells.failNext, cells.partialNext, cells.cellsOnly = nil, nil, nil
			}
		}
		for _, a := range aggs {
			catchUp(t, a)
		}
		want := map[string]int64{}
		for k, ev := range state {
			want[k.item] += int64(ev.State.Counts())
		}
		check := func(what string) {
			for i := range 4 {
				item := fmt.Sprint("i", i)
				if got := cells.count(item); got != want[item] {
					t.Fatalf("seed %d %s: count %s = %d, want %d", seed, what, item, got, want[item])
				}
			}
		}
		check("caught up")
		for p := range parts {
			r := newAgg(t, log, &zeroOnce{fakeCells: cells}, uint32(p), 1+rng.IntN(5))
			catchUp(t, r)
		}
		check("after replaying the whole log")
	}
}

func TestConfigValidated(t *testing.T) {
	log, cells := newFakeLog(1), newFakeCells()
	for _, cfg := range []pipeline.Config{
		{Log: log, Cells: cells},
		{Region: "r", Cells: cells},
		{Region: "r", Log: log},
		{Region: "r", Log: log, Cells: cells, Window: -time.Second},
		{Region: "r", Log: log, Cells: cells, MaxEvents: -1},
	} {
		if _, err := pipeline.NewAggregator(cfg, 0); err == nil {
			t.Fatalf("NewAggregator(%+v) succeeded", cfg)
		}
		if g, err := pipeline.NewGroup(context.Background(), cfg); err == nil {
			g.Close()
			t.Fatalf("NewGroup(%+v) succeeded", cfg)
		}
	}
}

// TestGroupRunsOnTicks: a Group steps every partition when its fake clock ticks.
func TestGroupRunsOnTicks(t *testing.T) {
	log, cells := newFakeLog(3), newFakeCells()
	for p := range 3 {
		for i := range 5 {
			log.add(uint32(p), like(fmt.Sprint("i", p), fmt.Sprint("u", i), 1, int64(10+i)))
		}
	}
	clk := clock.NewFake(time.UnixMilli(0))
	committed := make(chan pipeline.Window, 100)
	cells.onCommit = func(w pipeline.Window) {
		select {
		case committed <- w:
		default:
		}
	}
	g, err := pipeline.NewGroup(context.Background(), pipeline.Config{Region: "r1", Log: log, Cells: cells, Clock: clk, Window: time.Second, MaxEvents: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	deadline := time.Now().Add(20 * time.Second)
	for cells.count("i0")+cells.count("i1")+cells.count("i2") != 15 {
		if time.Now().After(deadline) {
			t.Fatalf("group did not drain the log: stats %+v", g.Stats())
		}
		// The loops may not have created their tickers yet: keep ticking until
		// they have drained the log (each tick drains a bounded backlog).
		clk.Advance(time.Second)
		select {
		case <-committed:
		default:
			runtime.Gosched()
		}
	}
	for p, st := range g.Stats() {
		if st.Position != 5 || st.Head != 5 {
			t.Fatalf("partition %d stats %+v", p, st)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}
