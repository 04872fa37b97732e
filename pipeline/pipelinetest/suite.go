package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
)

// Harness is one region's backend as the suite sees it. Store's writes must be
// what Log carries; Cells and Counts must be the same cell state.
type Harness struct {
	Store  edge.Store
	Log    pipeline.Log
	Cells  pipeline.CellStore
	Counts counts.CountStore
	// Region is the region whose cells the aggregators write.
	Region string
	// Clock, when set, is the fake clock the backend stamps event times with;
	// the suite advances it. When nil the backend uses real time.
	Clock *clock.Fake
}

// Run runs the whole suite. open must return a fresh, empty backend each call
// and register its cleanup with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	t.Run("LogOrder", func(t *testing.T) { testLogOrder(t, open(t)) })
	t.Run("CommitFence", func(t *testing.T) { testCommitFence(t, open(t)) })
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, open(t)) })
	t.Run("EndToEnd", func(t *testing.T) { testEndToEnd(t, open(t)) })
}

const t0 = int64(1_700_000_000_000)

func (h Harness) advance(d time.Duration) {
	if h.Clock != nil && d > 0 {
		h.Clock.Advance(d)
	}
}

func (h Harness) clock() clock.Clock {
	if h.Clock != nil {
		return h.Clock
	}
	return clock.Real{}
}

// ReadAll reads a whole partition in pages of page events.
func ReadAll(t testing.TB, l pipeline.Log, p uint32, page int) []edge.Event {
	t.Helper()
	var all []edge.Event
	after := uint64(0)
	for {
		evs, head, err := l.Read(context.Background(), p, after, page)
		if err != nil {
			t.Fatalf("Read(%d, %d, %d): %v", p, after, page, err)
		}
		checkBatch(t, p, after, evs, head)
		all = append(all, evs...)
		if len(evs) == 0 {
			return all
		}
		after = evs[len(evs)-1].Pos
	}
}

// checkBatch checks one Read result: in partition p, strictly increasing,
// after `after`, not beyond the head.
func checkBatch(t testing.TB, p uint32, after uint64, evs []edge.Event, head pipeline.Head) {
	t.Helper()
	prev := after
	for _, ev := range evs {
		if ev.Partition != p {
			t.Fatalf("Read(%d) returned an event of partition %d", p, ev.Partition)
		}
		if ev.Pos <= prev {
			t.Fatalf("Read(%d, after %d): pos %d after %d (not strictly increasing)", p, after, ev.Pos, prev)
		}
		if ev.Pos > head.Pos {
			t.Fatalf("Read(%d): event pos %d beyond head %d", p, ev.Pos, head.Pos)
		}
		prev = ev.Pos
	}
}

type versionKey struct {
	item, user string
	v          crdt.Version
}

// evID is an event without its log placement, comparable (Idem by value).
type evID struct {
	ev      edge.Event
	idem    edge.IdemRef
	hasIdem bool
}

func idOf(ev edge.Event) evID {
	var id evID
	if ev.Idem != nil {
		id.idem, id.hasIdem = *ev.Idem, true
	}
	ev.Partition, ev.Pos, ev.EventTime, ev.Idem = 0, 0, 0, nil
	id.ev = ev
	return id
}

type observedHead struct {
	p    uint32
	head pipeline.Head
}

func testLogOrder(t *testing.T, h Harness) {
	ctx := context.Background()
	parts := h.Log.Partitions()
	if parts < 1 {
		t.Fatalf("Partitions() = %d", parts)
	}
	writers, ops := 6, 150
	if testing.Short() {
		writers, ops = 4, 60
	}
	items := []string{"i0", "i1", "i2", "i3", "ü", "日本"}

	var mu sync.Mutex
	want := map[evID]int{}                  // what the log must hold: Decision.LogEvent of every Apply
	reported := map[versionKey]edge.Event{} // the events writes reported
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for i := range ops {
				h.advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				// Each writer owns its users, so an edge's writes are sequential.
				user := fmt.Sprintf("w%d-u%d", w, rng.IntN(4))
				item := items[rng.IntN(len(items))]
				key := fmt.Sprintf("k%d", i)
				if rng.IntN(4) == 0 {
					key = ""
				}
				req := edgetest.Like(item, user, key, 1, t0+int64(i))
				if rng.IntN(2) == 0 {
					req = edgetest.Unlike(item, user, key, 1, t0+int64(i))
				}
				d, err := h.Store.Apply(ctx, req)
				if err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				mu.Lock()
				if le := d.LogEvent(req); le != nil {
					want[idOf(*le)]++
				}
				if d.Action == edge.ActWrite {
					reported[versionKey{item, user, d.Edge.Version}] = *d.Event
				}
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); done.Store(true) }()

	// One tailer round-robins the partitions while the writers run.
	seen := make([][]edge.Event, parts)
	cursor := make([]uint64, parts)
	var heads []observedHead
	rng := rand.New(rand.NewPCG(1, 1))
	for {
		finished := done.Load()
		idle := true
		for p := range parts {
			evs, head, err := h.Log.Read(ctx, uint32(p), cursor[p], 1+rng.IntN(5))
			if err != nil {
				t.Fatal(err)
			}
			checkBatch(t, uint32(p), cursor[p], evs, head)
			heads = append(heads, observedHead{uint32(p), head})
			if len(evs) > 0 {
				idle = false
				seen[p] = append(seen[p], evs...)
				cursor[p] = evs[len(evs)-1].Pos
			}
		}
		if finished && idle {
			break
		}
		runtime.Gosched()
	}
	if t.Failed() {
		return
	}

	for p := range parts {
		all := ReadAll(t, h.Log, uint32(p), 1000)
		if len(all) != len(seen[p]) {
			t.Fatalf("partition %d: tailer saw %d events, a full read finds %d (an event appeared behind the cursor)", p, len(seen[p]), len(all))
		}
		for i := range all {
			if idOf(all[i]) != idOf(seen[p][i]) || all[i].Pos != seen[p][i].Pos || all[i].EventTime != seen[p][i].EventTime {
				t.Fatalf("partition %d: tailer saw %+v at index %d, full read %+v", p, seen[p][i], i, all[i])
			}
		}
		lastTime := int64(0)
		lastVersion := map[[2]string]crdt.Version{}
		lastCounted := map[[2]string]crdt.Version{}
		for _, ev := range all {
			if ev.EventTime < lastTime {
				t.Fatalf("partition %d: event time %d at pos %d after %d", p, ev.EventTime, ev.Pos, lastTime)
			}
			lastTime = ev.EventTime
			if ev.EventTime <= 0 {
				t.Fatalf("event without an event time: %+v", ev)
			}
			if wp := edge.PartitionOf(ev.Item, ev.Bucket, parts); ev.Partition != wp {
				t.Fatalf("event %+v in partition %d, PartitionOf says %d", ev, ev.Partition, wp)
			}
			if ev.Bucket != edge.BucketOf(ev.User) {
				t.Fatalf("event %+v has bucket %d, want %d", ev, ev.Bucket, edge.BucketOf(ev.User))
			}
			id := idOf(ev)
			if want[id] == 0 {
				t.Fatalf("log holds an event no Apply accounts for (or holds it twice): %+v", ev)
			}
			want[id]--
			// An edge's events follow its versions: counted writes strictly
			// increase, record events repeat the current version.
			ek := [2]string{ev.Item, ev.User}
			if v, ok := lastVersion[ek]; ok && ev.Version.Less(v) {
				t.Fatalf("partition %d: edge %v version %v at pos %d after version %v", p, ek, ev.Version, ev.Pos, v)
			}
			lastVersion[ek] = ev.Version
			if ev.Kind.Counted() {
				if v, ok := lastCounted[ek]; ok && !v.Less(ev.Version) {
					t.Fatalf("partition %d: edge %v write %v at pos %d after write %v", p, ek, ev.Version, ev.Pos, v)
				}
				lastCounted[ek] = ev.Version
				r := reported[versionKey{ev.Item, ev.User, ev.Version}]
				if r.Pos != 0 && (r.Pos != ev.Pos || r.Partition != ev.Partition) {
					t.Fatalf("Apply reported event at %d/%d, log has it at %d/%d", r.Partition, r.Pos, ev.Partition, ev.Pos)
				}
				if r.EventTime != 0 && r.EventTime != ev.EventTime {
					t.Fatalf("Apply reported event time %d, log has %d", r.EventTime, ev.EventTime)
				}
			}
		}
		// Event times are non-decreasing along the partition (checked above), so
		// the events with EventTime <= CompleteThrough are a prefix of it.
		for _, oh := range heads {
			if oh.p != uint32(p) {
				continue
			}
			n := sort.Search(len(all), func(i int) bool { return all[i].EventTime > oh.head.CompleteThrough })
			if n > 0 && all[n-1].Pos > oh.head.Pos {
				ev := all[n-1]
				t.Fatalf("partition %d: head %+v claims completeness through %d, but the event at pos %d has time %d",
					p, oh.head, oh.head.CompleteThrough, ev.Pos, ev.EventTime)
			}
		}
	}
	for id, n := range want {
		if n != 0 {
			t.Fatalf("event %+v (idem %+v) missing from the log (%d times)", id.ev, id.idem, n)
		}
	}
}

func cellMap(t testing.TB, cs pipeline.CellStore, keys ...crdt.CellKey) map[crdt.CellKey]crdt.Cell {
	t.Helper()
	m, err := cs.Cells(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func count(t testing.TB, c counts.CountStore, item string) int64 {
	t.Helper()
	n, err := c.Count(context.Background(), item)
	if err != nil {
		t.Fatalf("Count(%q): %v", item, err)
	}
	return n
}

func position(t testing.TB, cs pipeline.CellStore, p uint32) (uint64, int64) {
	t.Helper()
	pos, wm, err := cs.Position(context.Background(), p)
	if err != nil {
		t.Fatalf("Position(%d): %v", p, err)
	}
	return pos, wm
}

func testCommitFence(t *testing.T, h Harness) {
	ctx := context.Background()
	a := crdt.CellKey{Item: "fa", Region: h.Region, Shard: 0}
	b := crdt.CellKey{Item: "fb", Region: h.Region, Shard: 0}
	e1 := pipeline.EdgeKey{Item: "fa", User: "u1"}
	e2 := pipeline.EdgeKey{Item: "fb", User: "u2"}
	ca := crdt.Cell{P: 3, N: 1, HWM: 5, Watermark: 100}
	if err := h.Cells.Commit(ctx, pipeline.Window{
		Partition: 0, Through: 5, Watermark: 100,
		Cells:  []pipeline.CellUpdate{{Key: a, Expect: 0, Cell: ca}},
		Dedupe: map[pipeline.EdgeKey]pipeline.Applied{e1: {Write: crdt.Version{Epoch: 1, Op: 2}}},
	}); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		cells := cellMap(t, h.Cells, a, b)
		if len(cells) != 1 || cells[a] != ca {
			t.Fatalf("%s: cells %+v, want only %v = %+v", what, cells, a, ca)
		}
		ap, err := h.Cells.Applied(ctx, 0, []pipeline.EdgeKey{e1, e2})
		if err != nil {
			t.Fatal(err)
		}
		if len(ap) != 1 || ap[e1] != (pipeline.Applied{Write: crdt.Version{Epoch: 1, Op: 2}}) {
			t.Fatalf("%s: dedupe %+v", what, ap)
		}
		if br, ok := h.Cells.(pipeline.BaseReader); ok {
			bc, ba, err := br.Base(ctx, 0, []crdt.CellKey{a, b}, []pipeline.EdgeKey{e1, e2})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(bc, cells) || !maps.Equal(ba, ap) {
				t.Fatalf("%s: Base answers cells %+v, dedupe %+v; Cells and Applied %+v, %+v", what, bc, ba, cells, ap)
			}
		}
		if pos, wm := position(t, h.Cells, 0); pos != 5 || wm != 100 {
			t.Fatalf("%s: position %d/%d, want 5/100", what, pos, wm)
		}
		if n := count(t, h.Counts, "fa"); n != 2 {
			t.Fatalf("%s: Count(fa) = %d, want 2", what, n)
		}
		if n := count(t, h.Counts, "fb"); n != 0 {
			t.Fatalf("%s: Count(fb) = %d, want 0", what, n)
		}
	}
	check("after first commit")
	cb := crdt.Cell{P: 7, HWM: 9, Watermark: 200}
	bad := []pipeline.Window{
		{ // a stale expectation on an existing cell
			Partition: 0, Through: 9, Watermark: 200,
			Cells:  []pipeline.CellUpdate{{Key: a, Expect: 0, Cell: crdt.Cell{P: 9, HWM: 9}}, {Key: b, Expect: 0, Cell: cb}},
			Dedupe: map[pipeline.EdgeKey]pipeline.Applied{e2: {Write: crdt.Version{Epoch: 1, Op: 1}}},
		},
		{ // the failing fence comes after a good one
			Partition: 0, Through: 9, Watermark: 200,
			Cells:  []pipeline.CellUpdate{{Key: b, Expect: 0, Cell: cb}, {Key: a, Expect: 4, Cell: crdt.Cell{P: 9, HWM: 9}}},
			Dedupe: map[pipeline.EdgeKey]pipeline.Applied{e1: {Write: crdt.Version{Epoch: 1, Op: 7}}},
		},
		{ // an expectation ahead of the cell
			Partition: 0, Through: 9, Watermark: 200,
			Cells: []pipeline.CellUpdate{{Key: a, Expect: 6, Cell: crdt.Cell{P: 9, HWM: 9}}},
		},
		{ // a missing cell expected to exist
			Partition: 0, Through: 9, Watermark: 200,
			Cells: []pipeline.CellUpdate{{Key: b, Expect: 3, Cell: cb}},
		},
	}
	for i, w := range bad {
		err := h.Cells.Commit(ctx, w)
		if !errors.Is(err, pipeline.ErrFenced) {
			t.Fatalf("fenced window %d: err %v, want ErrFenced", i, err)
		}
		check(fmt.Sprintf("after fenced window %d", i))
	}
	// The right expectations pass.
	ca2 := crdt.Cell{P: 4, N: 1, HWM: 9, Watermark: 200}
	if err := h.Cells.Commit(ctx, pipeline.Window{
		Partition: 0, Through: 9, Watermark: 200,
		Cells: []pipeline.CellUpdate{{Key: a, Expect: 5, Cell: ca2}, {Key: b, Expect: 0, Cell: cb}},
	}); err != nil {
		t.Fatal(err)
	}
	if cells := cellMap(t, h.Cells, a, b); cells[a] != ca2 || cells[b] != cb {
		t.Fatalf("cells after good commit: %+v", cells)
	}
	if n := count(t, h.Counts, "fa") + count(t, h.Counts, "fb"); n != 3+7 {
		t.Fatalf("counts after good commit sum to %d, want 10", n)
	}
	// Replaying the same window now fails the fence.
	err := h.Cells.Commit(ctx, pipeline.Window{
		Partition: 0, Through: 9, Watermark: 200,
		Cells: []pipeline.CellUpdate{{Key: a, Expect: 5, Cell: ca2}},
	})
	if !errors.Is(err, pipeline.ErrFenced) {
		t.Fatalf("replayed window: err %v, want ErrFenced", err)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	ctx := context.Background()
	parts := h.Log.Partitions()
	for p := range parts {
		if pos, wm := position(t, h.Cells, uint32(p)); pos != 0 || wm != 0 {
			t.Fatalf("fresh Position(%d) = %d/%d", p, pos, wm)
		}
	}
	if n := count(t, h.Counts, "rt"); n != 0 {
		t.Fatalf("Count of an item without cells = %d", n)
	}
	if m := cellMap(t, h.Cells, crdt.CellKey{Item: "rt", Region: h.Region}); len(m) != 0 {
		t.Fatalf("Cells of nothing = %+v", m)
	}
	want := int64(0)
	for p := range parts {
		k := crdt.CellKey{Item: "rt", Region: h.Region, Shard: uint32(p)}
		c := crdt.Cell{P: uint64(10 + 3*p), N: uint64(2 * p), HWM: uint64(10 + p), Watermark: int64(1000 + p)}
		if p%3 == 2 {
			c.N = c.P + 5 // a cell may be negative on its own
		}
		want += c.Value()
		ek := pipeline.EdgeKey{Item: "rt", User: fmt.Sprintf("u%d", p)}
		ap := pipeline.Applied{Write: crdt.Version{Epoch: 1, Op: uint64(p + 1)}, Correction: crdt.Version{Epoch: 2, Op: uint64(p)}}
		// Neighbouring items whose ids share a prefix with "rt".
		others := []pipeline.CellUpdate{
			{Key: crdt.CellKey{Item: "r", Region: h.Region, Shard: uint32(p)}, Cell: crdt.Cell{P: 100, HWM: uint64(10 + p)}},
			{Key: crdt.CellKey{Item: "rt2", Region: h.Region, Shard: uint32(p)}, Cell: crdt.Cell{P: 1000, HWM: uint64(10 + p)}},
		}
		w := pipeline.Window{
			Partition: uint32(p), Through: uint64(10 + p), Watermark: int64(1000 + p),
			Cells:  append([]pipeline.CellUpdate{{Key: k, Cell: c}}, others...),
			Dedupe: map[pipeline.EdgeKey]pipeline.Applied{ek: ap},
		}
		if err := h.Cells.Commit(ctx, w); err != nil {
			t.Fatal(err)
		}
		if pos, wm := position(t, h.Cells, uint32(p)); pos != uint64(10+p) || wm != int64(1000+p) {
			t.Fatalf("Position(%d) = %d/%d after commit", p, pos, wm)
		}
		if got := cellMap(t, h.Cells, k); got[k] != c {
			t.Fatalf("cell %v = %+v, want %+v", k, got[k], c)
		}
		got, err := h.Cells.Applied(ctx, uint32(p), []pipeline.EdgeKey{ek, {Item: "rt", User: "nobody"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[ek] != ap {
			t.Fatalf("Applied(%d) = %+v, want %v: %+v", p, got, ek, ap)
		}
	}
	if n := count(t, h.Counts, "rt"); n != want {
		t.Fatalf("Count(rt) = %d, want the sum of its cells %d", n, want)
	}
	if n := count(t, h.Counts, "r"); n != int64(100*parts) {
		t.Fatalf("Count(r) = %d, want %d", n, 100*parts)
	}
	wms, err := h.Counts.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wms[h.Region] != 1000 {
		t.Fatalf("Watermarks()[%q] = %d, want the min over partitions 1000", h.Region, wms[h.Region])
	}
	// A window without cells moves position and watermark; dedupe state is
	// overwritten per edge.
	ek := pipeline.EdgeKey{Item: "rt", User: "u0"}
	ap := pipeline.Applied{Write: crdt.Version{Epoch: 3, Op: 9}}
	if err := h.Cells.Commit(ctx, pipeline.Window{Partition: 0, Through: 50, Watermark: 5000, Dedupe: map[pipeline.EdgeKey]pipeline.Applied{ek: ap}}); err != nil {
		t.Fatal(err)
	}
	if pos, wm := position(t, h.Cells, 0); pos != 50 || wm != 5000 {
		t.Fatalf("Position(0) = %d/%d, want 50/5000", pos, wm)
	}
	if got, err := h.Cells.Applied(ctx, 0, []pipeline.EdgeKey{ek}); err != nil || got[ek] != ap {
		t.Fatalf("Applied after overwrite = %+v, %v", got, err)
	}
	wms, err = h.Counts.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantWM := int64(5000)
	if parts > 1 {
		wantWM = 1001
	}
	if wms[h.Region] != wantWM {
		t.Fatalf("Watermarks()[%q] = %d, want %d", h.Region, wms[h.Region], wantWM)
	}
}

// zeroOnce makes an aggregator start over from position 0: its first Position
// call per partition answers 0 (keeping the real watermark), as a consumer
// whose offsets were lost would.
type zeroOnce struct {
	pipeline.CellStore
	mu   sync.Mutex
	done map[uint32]bool
}

func (z *zeroOnce) Position(ctx context.Context, p uint32) (uint64, int64, error) {
	pos, wm, err := z.CellStore.Position(ctx, p)
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.done == nil {
		z.done = map[uint32]bool{}
	}
	if !z.done[p] {
		z.done[p] = true
		pos = 0
	}
	return pos, wm, err
}

// CatchUp steps each aggregator until it reports it reached the log head.
func CatchUp(t testing.TB, aggs []*pipeline.Aggregator) {
	t.Helper()
	for _, a := range aggs {
		for i := 0; ; i++ {
			if i > 1_000_000 {
				t.Fatalf("aggregator never catches up")
			}
			_, caughtUp, err := a.Step(context.Background())
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			if caughtUp {
				break
			}
		}
	}
}

// WatermarkChecker checks that committed watermarks are honest: every event
// with EventTime <= a partition's committed watermark is at or before its
// committed position. It caches the log it has read (the log only grows).
type WatermarkChecker struct {
	Log   pipeline.Log
	Cells pipeline.CellStore
	evs   map[uint32][]edge.Event
}

// Check checks partition p now.
func (c *WatermarkChecker) Check(t testing.TB, p uint32) {
	t.Helper()
	if c.evs == nil {
		c.evs = map[uint32][]edge.Event{}
	}
	pos, wm := position(t, c.Cells, p)
	evs := c.evs[p]
	old := len(evs)
	for {
		after := uint64(0)
		if len(evs) > 0 {
			after = evs[len(evs)-1].Pos
		}
		more, head, err := c.Log.Read(context.Background(), p, after, 1000)
		if err != nil {
			t.Fatalf("Read(%d): %v", p, err)
		}
		checkBatch(t, p, after, more, head)
		if len(more) == 0 {
			break
		}
		evs = append(evs, more...)
	}
	c.evs[p] = evs
	// Event times never decrease along a partition, so the events with
	// EventTime <= wm are a prefix.
	n := sort.Search(len(evs), func(i int) bool { return evs[i].EventTime > wm })
	if n > 0 && evs[n-1].Pos > pos {
		t.Fatalf("partition %d: watermark %d claims completeness, but the event at pos %d (time %d) is beyond position %d",
			p, wm, evs[n-1].Pos, evs[n-1].EventTime, pos)
	}
	for i := max(old, 1); i < len(evs); i++ {
		if evs[i].EventTime < evs[i-1].EventTime {
			t.Fatalf("partition %d: event time decreases at pos %d", p, evs[i].Pos)
		}
	}
}

// CheckCounts fails t unless every item's Count equals its number of LIKED
// edges as Likers lists them.
func CheckCounts(t testing.TB, s edge.Store, c counts.CountStore, items []string) {
	t.Helper()
	for _, item := range items {
		likers := edgetest.AllLikers(t, s, item, 50)
		if n := count(t, c, item); n != int64(len(likers)) {
			t.Fatalf("Count(%q) = %d, but %d LIKED edges", item, n, len(likers))
		}
	}
}

// NewAggregators returns one aggregator per partition.
func NewAggregators(t testing.TB, cfg pipeline.Config) []*pipeline.Aggregator {
	t.Helper()
	var aggs []*pipeline.Aggregator
	for p := range cfg.Log.Partitions() {
		a, err := pipeline.NewAggregator(cfg, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		aggs = append(aggs, a)
	}
	return aggs
}

func testEndToEnd(t *testing.T, h Harness) {
	ctx := context.Background()
	steps := 1500
	if testing.Short() {
		steps = 500
	}
	rng := rand.New(rand.NewPCG(42, 43))
	items := []string{"e0", "e1", "e2", "e3", "ë"}
	users := []string{"a", "b", "c", "d", "e", "f", "g", "ü"}
	parts := h.Log.Partitions()
	cfg := pipeline.Config{Region: h.Region, Log: h.Log, Cells: h.Cells, Clock: h.clock(), MaxEvents: 1 + rng.IntN(3)}
	aggs := NewAggregators(t, cfg)
	wc := &WatermarkChecker{Log: h.Log, Cells: h.Cells}
	var history []edge.Request
	epoch := uint64(1)
	for i := range steps {
		h.advance(time.Duration(rng.IntN(2)) * time.Millisecond)
		if rng.IntN(200) == 0 {
			epoch++ // a first touch in a new epoch writes a version with delta 0
		}
		item, user := items[rng.IntN(len(items))], users[rng.IntN(len(users))]
		key := fmt.Sprintf("k%d", i)
		var req edge.Request
		switch r := rng.IntN(100); {
		case r < 40:
			req = edgetest.Like(item, user, key, epoch, t0+int64(i))
		case r < 75:
			req = edgetest.Unlike(item, user, key, epoch, t0+int64(i))
		case r < 92 && len(history) > 0:
			req = history[rng.IntN(len(history))] // a client retry
			req.Now = t0 + int64(i)
		case r < 96:
			req = edgetest.Unlike(item, user, "", epoch, t0+int64(i))
			req.Kind = edge.KindRetraction
		default:
			req = edgetest.Erase(item, user, epoch, t0+int64(i))
		}
		if req.Epoch < epoch && rng.IntN(2) == 0 {
			req.Epoch = epoch
		}
		if _, err := h.Store.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
		if req.Kind == edge.KindErasure && rng.IntN(2) == 0 {
			// Purging records and index writes nothing a count depends on.
			if err := h.Store.PurgeUser(ctx, user); err != nil {
				t.Fatal(err)
			}
		}
		if req.IdemKey != "" {
			history = append(history, req)
		}
		for range rng.IntN(3) {
			p := rng.IntN(parts)
			if _, _, err := aggs[p].Step(ctx); err != nil {
				t.Fatal(err)
			}
			wc.Check(t, uint32(p))
		}
	}
	CatchUp(t, aggs)
	for p := range parts {
		wc.Check(t, uint32(p))
	}
	CheckCounts(t, h.Store, h.Counts, items)
	before := map[string]int64{}
	for _, item := range items {
		before[item] = count(t, h.Counts, item)
	}

	// Fresh aggregators replaying the whole log change nothing.
	replayCfg := cfg
	replayCfg.Cells = &zeroOnce{CellStore: h.Cells}
	replayCfg.MaxEvents = 1 + rng.IntN(7)
	CatchUp(t, NewAggregators(t, replayCfg))
	for _, item := range items {
		if n := count(t, h.Counts, item); n != before[item] {
			t.Fatalf("replaying the log moved Count(%q) from %d to %d", item, before[item], n)
		}
	}
	CheckCounts(t, h.Store, h.Counts, items)
}
