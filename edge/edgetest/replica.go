package edgetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replica"
)

// ReplicaStore is a store that can be a replication peer: the edge store and
// job store of one region, the sending side (replica.Source) and the
// receiving side (replica.Sink) of replication.
type ReplicaStore interface {
	edge.Store
	edge.JobStore
	replica.Source
	replica.Sink
}

// CellReplicaStore is a ReplicaStore that also folds its log into cells
// (pipeline.CellStore) and answers counts (counts.CountStore): RunReplicaCells
// runs its aggregators and ships its cells.
type CellReplicaStore interface {
	ReplicaStore
	pipeline.CellStore
	counts.CountStore
}

// RunReplica runs the replica contract: events shipped from one store to
// another (replica.Source.Read → replica.Sink.ApplyRemote) leave the receiver
// in the state the shared rule (edge.ApplyRemoteEvent) says, whatever the
// duplicates, overlaps and reordering of runs, with stale versions losing,
// branch corrections telescoping across a chain of regions, erasure marks,
// purges and late edges re-opening an erasure, and the cursor recorded with
// what was applied and never moving back. open(t, region) must return a fresh,
// empty store of region (every call of one test with the same partition
// count) and register its cleanup on t.
//
// What it cannot see through the interfaces, and each store's own tests must
// show: that a crash mid-apply leaves the cursor and the effects consistent.
func RunReplica(t *testing.T, open func(t *testing.T, region string) ReplicaStore) {
	t.Run("ShipConverges", func(t *testing.T) { testShipConverges(t, open(t, "a"), open(t, "b")) })
	t.Run("DuplicatesOverlapsReorder", func(t *testing.T) { testShipReorder(t, open(t, "a"), open(t, "b")) })
	t.Run("StaleVersionsAndCorrectionChain", func(t *testing.T) { testCorrectionChain(t, open(t, "a"), open(t, "b"), open(t, "c")) })
	t.Run("ErasureMarkAndPurge", func(t *testing.T) { testErasureMark(t, open(t, "a"), open(t, "b")) })
	t.Run("LateEdgeReopensErasure", func(t *testing.T) { testLateEdgeReopens(t, open(t, "a"), open(t, "b")) })
	t.Run("RefusesBadRuns", func(t *testing.T) { testRefusesBadRuns(t, open(t, "a")) })
	t.Run("PartsSink", func(t *testing.T) {
		b := open(t, "b")
		if _, ok := b.(replica.PartsSink); !ok {
			t.Skip("the store is not a replica.PartsSink")
		}
		testPartsSink(t, open(t, "a"), b)
	})
}

// peer names a store and its region in a test.
type peer struct {
	region string
	s      ReplicaStore
}

// readLog returns every event of partition p of src after `after`.
func readLog(t testing.TB, src replica.Source, p uint32, after uint64) []edge.Event {
	t.Helper()
	var out []edge.Event
	for i := 0; ; i++ {
		if i > 10_000 {
			t.Fatalf("partition %d: log never ends", p)
		}
		evs, _, err := src.Read(context.Background(), p, after, 7)
		if err != nil {
			t.Fatalf("Read(%d, %d): %v", p, after, err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		after = evs[len(evs)-1].Pos
	}
}

// ship applies everything of from's log that to has not applied, in runs of
// at most 5 events ending at their last event (as the replication sender
// does).
func ship(t testing.TB, from, to peer) {
	t.Helper()
	ctx := context.Background()
	cur, err := to.s.Cursor(ctx, from.region)
	if err != nil {
		t.Fatalf("Cursor(%q): %v", from.region, err)
	}
	if len(cur.Log) != from.s.Partitions() {
		t.Fatalf("Cursor(%q) has %d partitions, the sender %d", from.region, len(cur.Log), from.s.Partitions())
	}
	for p := range from.s.Partitions() {
		evs := readLog(t, from.s, uint32(p), cur.Log[p])
		for len(evs) > 0 {
			run := evs[:min(5, len(evs))]
			evs = evs[len(run):]
			applyRun(t, to, from.region, uint32(p), run)
		}
	}
}

func applyRun(t testing.TB, to peer, from string, p uint32, run []edge.Event) {
	t.Helper()
	through := uint64(0)
	if len(run) > 0 {
		through = run[len(run)-1].Pos
	}
	if err := to.s.ApplyRemote(context.Background(), from, p, slices.Clone(run), through); err != nil {
		t.Fatalf("%s: ApplyRemote(from %s, partition %d, through %d): %v", to.region, from, p, through, err)
	}
}

// mustSameEdges fails unless a and b hold the same edges (state and version)
// for every (item, user).
func mustSameEdges(t testing.TB, a, b peer, items, users []string) {
	t.Helper()
	for _, item := range items {
		for _, user := range users {
			ea, oka := getEdge(t, a.s, item, user)
			eb, okb := getEdge(t, b.s, item, user)
			if oka != okb || ea.Register() != eb.Register() {
				t.Fatalf("edge (%q, %q): %s has %v %v (found %v), %s has %v %v (found %v)",
					item, user, a.region, ea.State, ea.Version, oka, b.region, eb.State, eb.Version, okb)
			}
		}
		if la, lb := AllLikers(t, a.s, item, 3), AllLikers(t, b.s, item, 3); !slices.Equal(la, lb) {
			t.Fatalf("likers of %q: %s %v, %s %v", item, a.region, la, b.region, lb)
		}
	}
}

// mustCursorAtHead fails unless to has applied from's whole log.
func mustCursorAtHead(t testing.TB, from, to peer) {
	t.Helper()
	cur, err := to.s.Cursor(context.Background(), from.region)
	if err != nil {
		t.Fatal(err)
	}
	for p := range from.s.Partitions() {
		evs := readLog(t, from.s, uint32(p), 0)
		want := uint64(0)
		if len(evs) > 0 {
			want = evs[len(evs)-1].Pos
		}
		if cur.Log[p] != want {
			t.Fatalf("%s's cursor of %s partition %d = %d, want the last position %d", to.region, from.region, p, cur.Log[p], want)
		}
	}
}

// ownLog returns s's whole log.
func ownLog(t testing.TB, s replica.Source) []edge.Event {
	t.Helper()
	var out []edge.Event
	for p := range s.Partitions() {
		out = append(out, readLog(t, s, uint32(p), 0)...)
	}
	return out
}

// logSum is the sum of the counted deltas of item in the peers' logs: the
// count the item's cells converge to.
func logSum(t testing.TB, item string, peers ...peer) int {
	t.Helper()
	n := 0
	for _, p := range peers {
		for _, ev := range ownLog(t, p.s) {
			if ev.Item == item && ev.Kind.Counted() {
				n += int(ev.Delta)
			}
		}
	}
	return n
}

func likes(t testing.TB, s edge.Store, epoch uint64, items, users []string) []edge.Request {
	t.Helper()
	var reqs []edge.Request
	n := 0
	for _, item := range items {
		for _, user := range users {
			n++
			var req edge.Request
			if n%3 == 0 {
				req = Unlike(item, user, fmt.Sprintf("k-%s-%s-u", item, user), epoch, t0+int64(n))
				apply(t, s, Like(item, user, fmt.Sprintf("k-%s-%s-l", item, user), epoch, t0+int64(n)))
			} else {
				req = Like(item, user, fmt.Sprintf("k-%s-%s-l", item, user), epoch, t0+int64(n))
			}
			apply(t, s, req)
			reqs = append(reqs, req)
		}
	}
	return reqs
}

var (
	rItems = []string{"i1", "i2", "ïtem"}
	rUsers = []string{"u1", "u2", "u3", "ü4", "u5"}
)

func testShipConverges(t *testing.T, a, b ReplicaStore) {
	pa, pb := peer{"a", a}, peer{"b", b}
	reqs := likes(t, a, 1, rItems, rUsers)
	ship(t, pa, pb)
	mustSameEdges(t, pa, pb, rItems, rUsers)
	mustCursorAtHead(t, pa, pb)
	ship(t, pa, pb) // nothing new
	mustCursorAtHead(t, pa, pb)
	if evs := ownLog(t, b); len(evs) != 0 {
		t.Fatalf("the receiver appended %d events of its own (first %+v): it never wrote, nothing to correct", len(evs), evs[0])
	}
	for _, user := range rUsers {
		if ia, ib := AllUserItems(t, a, user, 2), AllUserItems(t, b, user, 2); !slices.Equal(ia, ib) {
			t.Fatalf("items of %q: a %v, b %v", user, ia, ib)
		}
	}
	// The range moves to b: a retry of a's request there replays a's answer
	// (the idempotency records travelled with the events), never re-executes.
	for _, req := range reqs {
		da := apply(t, a, req)
		mustAction(t, "retry at a", da, edge.ActReplay)
		r := req
		r.Epoch, r.Now = 2, req.Now+1000
		db := apply(t, b, r)
		mustAction(t, "retry at b", db, edge.ActReplay)
		if db.Answer != da.Answer {
			t.Fatalf("retry of %s: b answers %+v, a answered %+v", req.IdemKey, db.Answer, da.Answer)
		}
	}
}

func testShipReorder(t *testing.T, a, b ReplicaStore) {
	pa, pb := peer{"a", a}, peer{"b", b}
	ctx := context.Background()
	likes(t, a, 1, rItems, rUsers)
	for p := a.Partitions() - 1; p >= 0; p-- { // partitions in reverse order
		evs := readLog(t, a, uint32(p), 0)
		for i := 0; i < len(evs); i += 3 {
			// Overlapping runs, each applied twice: [i-2, i+3).
			run := evs[max(0, i-2):min(len(evs), i+3)]
			applyRun(t, pb, "a", uint32(p), run)
			applyRun(t, pb, "a", uint32(p), run)
		}
		if len(evs) > 1 {
			// A stale run (through below the cursor) changes nothing and
			// does not move the cursor back.
			applyRun(t, pb, "a", uint32(p), evs[:1])
			cur, err := b.Cursor(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if cur.Log[p] != evs[len(evs)-1].Pos {
				t.Fatalf("partition %d: cursor %d after a stale run, want %d", p, cur.Log[p], evs[len(evs)-1].Pos)
			}
		}
	}
	mustSameEdges(t, pa, pb, rItems, rUsers)
	mustCursorAtHead(t, pa, pb)
	if evs := ownLog(t, b); len(evs) != 0 {
		t.Fatalf("the receiver appended %d events of its own", len(evs))
	}
	// An empty run through the cursor is a no-op.
	for p := range a.Partitions() {
		if err := b.ApplyRemote(ctx, "a", uint32(p), nil, 0); err != nil {
			t.Fatalf("empty run: %v", err)
		}
	}
	mustCursorAtHead(t, pa, pb)
}

// testCorrectionChain: regions a, b, c own the edge in epochs 1, 2, 3, each
// writing before the previous owners' writes reached it (unplanned
// failovers). Every late version loses to the newer epoch's edge and costs a
// correction; delivered one run at a time, in any order between regions, with
// duplicates, the sum of every region's counted deltas equals the state the
// edge converges to, at every step where a region has caught up.
func testCorrectionChain(t *testing.T, a, b, c ReplicaStore) {
	pa, pb, pc := peer{"a", a}, peer{"b", b}, peer{"c", c}
	const item, user = "chain", "u-chain"
	apply(t, a, Like(item, user, "a1", 1, t0))
	apply(t, a, Unlike(item, user, "a2", 1, t0+1))
	apply(t, a, Like(item, user, "a3", 1, t0+2))
	apply(t, b, Unlike(item, user, "b1", 2, t0+3)) // first touch at 2: a version, delta 0
	apply(t, c, Like(item, user, "c1", 3, t0+4))
	mustEdge(t, c, item, user, crdt.Liked, crdt.Version{Epoch: 3, Op: 1})

	// b hears a's writes one at a time: each one newer than b's base costs b a
	// correction; b's edge stays at epoch 2.
	p := edge.PartitionOf(item, edge.BucketOf(user), a.Partitions())
	evs := readLog(t, a, p, 0)
	if len(evs) != 3 {
		t.Fatalf("a's log of the edge has %d events, want 3", len(evs))
	}
	for i, ev := range evs {
		applyRun(t, pb, "a", p, []edge.Event{ev})
		applyRun(t, pb, "a", p, []edge.Event{ev}) // a duplicate: nothing more
		if got, want := logSum(t, item, pa, pb), 0; i == len(evs)-1 && got != want {
			t.Fatalf("after all of a's writes at b: Σ deltas of a and b = %d, want b's state %v (%d)", got, crdt.Unliked, want)
		}
	}
	mustEdge(t, b, item, user, crdt.Unliked, crdt.Version{Epoch: 2, Op: 1})
	var last crdt.Version
	for _, ev := range ownLog(t, b) {
		if ev.Kind != edge.KindCorrection {
			continue
		}
		if ev.Version.Epoch != 0 || !last.Less(ev.Version) || ev.Item != item || ev.User != user {
			t.Fatalf("b's correction %+v: want epoch 0, a growing op (after %v), the edge's ids", ev, last)
		}
		last = ev.Version
	}
	// c hears b's log first (b's edge and b's corrections), then a's.
	ship(t, pb, pc)
	ship(t, pb, pc)
	ship(t, pa, pc)
	mustEdge(t, c, item, user, crdt.Liked, crdt.Version{Epoch: 3, Op: 1})
	// Everyone hears everyone; the edge converges to c's version and the
	// deltas telescope to it.
	all := []peer{pa, pb, pc}
	for range 2 {
		for _, from := range all {
			for _, to := range all {
				if from.region != to.region {
					ship(t, from, to)
				}
			}
		}
	}
	for _, x := range all {
		mustEdge(t, x.s, item, user, crdt.Liked, crdt.Version{Epoch: 3, Op: 1})
	}
	if got := logSum(t, item, all...); got != 1 {
		t.Fatalf("Σ deltas over a, b, c = %d, want 1 (the edge is LIKED)", got)
	}
	mustCursorAtHead(t, pa, pc)
	mustCursorAtHead(t, pb, pc)
	mustCursorAtHead(t, pc, pa)
}

func testErasureMark(t *testing.T, a, b ReplicaStore) {
	pa, pb := peer{"a", a}, peer{"b", b}
	ctx := context.Background()
	const user = "u-erased"
	items := []string{"e1", "e2", "e3"}
	for i, item := range items {
		apply(t, a, Like(item, user, fmt.Sprint("k", i), 1, t0))
	}
	ship(t, pa, pb)
	if err := a.PutErasure(ctx, edge.ErasureJob{User: user, State: edge.ErasureRunning, StartedAt: t0 + 10}); err != nil {
		t.Fatal(err)
	}
	ship(t, pa, pb)
	j, ok, err := b.Erasure(ctx, user)
	if err != nil || !ok || !j.Remote || j.State != edge.ErasureRunning {
		t.Fatalf("b's job after a's erasure started: %+v found %v err %v; want a Remote running mark", j, ok, err)
	}
	// The mark refuses the user's writes at b too (the range may move there).
	d := apply(t, b, Like("e9", user, "k9", 2, t0+20))
	mustAction(t, "like of an erased user at b", d, edge.ActErased)
	// a finishes: tombstones, purge, done.
	for _, item := range items {
		apply(t, a, Erase(item, user, 1, t0+30))
	}
	if err := a.PurgeUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	if err := a.PutErasure(ctx, edge.ErasureJob{User: user, State: edge.ErasureDone, StartedAt: t0 + 10, FinishedAt: t0 + 40, Edges: 3, Unliked: 3}); err != nil {
		t.Fatal(err)
	}
	ship(t, pa, pb)
	ship(t, pa, pb)
	j, ok, err = b.Erasure(ctx, user)
	if err != nil || !ok || !j.Remote || j.State != edge.ErasureDone {
		t.Fatalf("b's job after a's purge: %+v found %v err %v; want a Remote done mark", j, ok, err)
	}
	for _, item := range items {
		if e, _ := getEdge(t, b, item, user); e.State != crdt.Erased {
			t.Fatalf("edge (%q, %q) at b is %v after the erasure", item, user, e.State)
		}
	}
	if got := AllUserItems(t, b, user, 2); len(got) != 0 {
		t.Fatalf("b still indexes %v for the purged user", got)
	}
	for _, item := range items {
		if got := logSum(t, item, pa, pb); got != 0 {
			t.Fatalf("Σ deltas of %q = %d after the erasure", item, got)
		}
	}
	mustCursorAtHead(t, pa, pb)
}

func testLateEdgeReopens(t *testing.T, a, b ReplicaStore) {
	pa, pb := peer{"a", a}, peer{"b", b}
	ctx := context.Background()
	const user, item = "u-late", "late"
	// a (the old owner, cut off) acknowledges a like that has not reached b.
	apply(t, a, Like(item, user, "k1", 1, t0))
	// b (the new owner) erases the user and finishes: it holds nothing.
	if err := b.PutErasure(ctx, edge.ErasureJob{User: user, State: edge.ErasureRunning, StartedAt: t0 + 5}); err != nil {
		t.Fatal(err)
	}
	if err := b.PurgeUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	if err := b.PutErasure(ctx, edge.ErasureJob{User: user, State: edge.ErasureDone, StartedAt: t0 + 5, FinishedAt: t0 + 6}); err != nil {
		t.Fatal(err)
	}
	// The late like arrives: b's job runs again and b's index lists the edge.
	ship(t, pa, pb)
	j, ok, err := b.Erasure(ctx, user)
	if err != nil || !ok || j.Remote || j.State != edge.ErasureRunning || j.Late < 1 {
		t.Fatalf("b's own job after a late edge: %+v found %v err %v; want running again, Late >= 1", j, ok, err)
	}
	if got := AllUserItems(t, b, user, 2); !slices.Equal(got, []string{item}) {
		t.Fatalf("b indexes %v for the user, want the late edge's item", got)
	}
	// The same event again re-opens nothing more.
	ship(t, pa, pb)
	j2, _, err := b.Erasure(ctx, user)
	if err != nil || j2.Late != j.Late {
		t.Fatalf("a duplicate re-opened the job again: %+v then %+v (%v)", j, j2, err)
	}
	// The eraser's write at b (the owner, epoch 2) cancels the late +1.
	apply(t, b, Erase(item, user, 2, t0+10))
	if got := logSum(t, item, pa, pb); got != 0 {
		t.Fatalf("Σ deltas = %d after the late edge was erased", got)
	}
}

func testRefusesBadRuns(t *testing.T, a ReplicaStore) {
	ctx := context.Background()
	ev := edge.Event{Partition: 0, Pos: 1, Item: "i", User: "u", Bucket: edge.BucketOf("u"),
		Version: crdt.Version{Epoch: 1, Op: 1}, State: crdt.Liked, Delta: 1, EventTime: t0, Kind: edge.KindFlip}
	ev.Partition = edge.PartitionOf("i", ev.Bucket, a.Partitions())
	if err := a.ApplyRemote(ctx, "a", ev.Partition, []edge.Event{ev}, 1); err == nil {
		t.Fatal("a store applied its own region's events as remote")
	}
	if err := a.ApplyRemote(ctx, "z", uint32(a.Partitions()), []edge.Event{ev}, 1); err == nil {
		t.Fatal("a store applied a run of a partition out of range")
	}
	if _, ok, _ := a.Edge(ctx, "i", "u"); ok {
		t.Fatal("a refused run left an edge")
	}
}

func testPartsSink(t *testing.T, a, b ReplicaStore) {
	ps := b.(replica.PartsSink)
	pa, pb := peer{"a", a}, peer{"b", b}
	likes(t, a, 1, rItems, rUsers)
	var parts []replica.RemotePart
	for p := range a.Partitions() {
		if evs := readLog(t, a, uint32(p), 0); len(evs) > 0 {
			parts = append(parts, replica.RemotePart{Partition: uint32(p), Events: evs, Through: evs[len(evs)-1].Pos})
		}
	}
	for range 2 {
		if err := ps.ApplyRemoteParts(context.Background(), "a", parts); err != nil {
			t.Fatal(err)
		}
	}
	mustSameEdges(t, pa, pb, rItems, rUsers)
	mustCursorAtHead(t, pa, pb)
}

// RunReplicaCells runs the cells half of the replica contract: each region's
// aggregators fold its log into its own cells, the cells changed ship
// (CellChanges → MergeCells) with the sender's watermark, and every region's
// count of an item equals its LIKED edges; merges are idempotent, keep the
// higher hwm, refuse the receiver's own cells, and record the cell cursor and
// the watermark. open is as for RunReplica.
func RunReplicaCells(t *testing.T, open func(t *testing.T, region string) CellReplicaStore) {
	t.Run("CountsConverge", func(t *testing.T) { testCellsConverge(t, open(t, "a"), open(t, "b")) })
	t.Run("MergeRules", func(t *testing.T) { testMergeRules(t, open(t, "b")) })
}

func catchUp(t testing.TB, region string, s CellReplicaStore) {
	t.Helper()
	cfg := pipeline.Config{Region: region, Log: s, Cells: s, Clock: clock.Real{}}
	for p := range s.Partitions() {
		a, err := pipeline.NewAggregator(cfg, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if i > 100_000 {
				t.Fatal("aggregator never catches up")
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

func shipCells(t testing.TB, from, to string, src, dst CellReplicaStore) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		if i > 10_000 {
			t.Fatal("cell changes never end")
		}
		cur, err := dst.Cursor(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		wm, err := src.OwnWatermark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cells, through, err := src.CellChanges(ctx, cur.Cells, 3)
		if err != nil {
			t.Fatal(err)
		}
		if through < cur.Cells {
			t.Fatalf("CellChanges(%d) covers through %d, behind its start", cur.Cells, through)
		}
		for _, c := range cells {
			if c.Key.Region != from {
				t.Fatalf("%s's CellChanges returned a cell of region %q", from, c.Key.Region)
			}
		}
		if err := dst.MergeCells(ctx, from, cells, through, wm); err != nil {
			t.Fatalf("MergeCells: %v", err)
		}
		if through == cur.Cells && len(cells) == 0 {
			return
		}
	}
}

func mustCounts(t testing.TB, s CellReplicaStore, items []string) {
	t.Helper()
	for _, item := range items {
		n, err := s.Count(context.Background(), item)
		if err != nil {
			t.Fatal(err)
		}
		if l := AllLikers(t, s, item, 4); n != int64(len(l)) {
			t.Fatalf("Count(%q) = %d, %d LIKED edges", item, n, len(l))
		}
	}
}

func scanCells(t testing.TB, s replica.Sink, region string) map[crdt.CellKey]crdt.Cell {
	t.Helper()
	out := map[crdt.CellKey]crdt.Cell{}
	if err := s.ScanCells(context.Background(), region, func(c replica.CellState) error {
		if c.Key.Region != region {
			return fmt.Errorf("ScanCells(%q) returned a cell of %q", region, c.Key.Region)
		}
		out[c.Key] = c.Cell
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func testCellsConverge(t *testing.T, a, b CellReplicaStore) {
	pa, pb := peer{"a", a}, peer{"b", b}
	ctx := context.Background()
	likes(t, a, 1, rItems, rUsers)
	likes(t, b, 1, rItems, []string{"v1", "v2"}) // b's own users
	catchUp(t, "a", a)
	catchUp(t, "b", b)
	for range 2 { // the second round ships nothing new
		ship(t, pa, pb)
		ship(t, pb, pa)
		catchUp(t, "a", a)
		catchUp(t, "b", b)
		shipCells(t, "a", "b", a, b)
		shipCells(t, "b", "a", b, a)
	}
	mustCounts(t, a, rItems)
	mustCounts(t, b, rItems)
	for _, r := range []string{"a", "b"} {
		if ca, cb := scanCells(t, a, r), scanCells(t, b, r); !reflect.DeepEqual(ca, cb) {
			t.Fatalf("cells of %s: a holds %v, b holds %v", r, ca, cb)
		}
	}
	wm, err := a.OwnWatermark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wms, err := b.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wms["a"] <= 0 || wms["a"] > wm {
		t.Fatalf("b knows a's watermark as %d, a's own is %d", wms["a"], wm)
	}
}

func testMergeRules(t *testing.T, b CellReplicaStore) {
	ctx := context.Background()
	k := crdt.CellKey{Item: "m1", Region: "a", Shard: 0}
	newer := crdt.Cell{P: 5, N: 1, HWM: 9, Watermark: t0 + 9}
	older := crdt.Cell{P: 3, N: 0, HWM: 4, Watermark: t0 + 4}
	for _, c := range []crdt.Cell{newer, older, newer} {
		if err := b.MergeCells(ctx, "a", []replica.CellState{{Key: k, Cell: c}}, 7, t0+9); err != nil {
			t.Fatal(err)
		}
	}
	if got := scanCells(t, b, "a")[k]; got != newer {
		t.Fatalf("cell after merges of hwm 9, 4, 9: %+v, want %+v", got, newer)
	}
	if n, err := b.Count(ctx, "m1"); err != nil || n != 4 {
		t.Fatalf("Count = %d (%v), want 4", n, err)
	}
	if err := b.MergeCells(ctx, "a", nil, 3, 0); err != nil { // an older cursor never moves it back
		t.Fatal(err)
	}
	cur, err := b.Cursor(ctx, "a")
	if err != nil || cur.Cells != 7 {
		t.Fatalf("cell cursor %d (%v), want 7", cur.Cells, err)
	}
	own := crdt.CellKey{Item: "m1", Region: "b", Shard: 0}
	if err := b.MergeCells(ctx, "a", []replica.CellState{{Key: own, Cell: newer}}, 8, 0); err == nil {
		t.Fatal("a peer's merge of the receiver's own cell was accepted")
	}
	if err := b.MergeCells(ctx, "b", nil, 8, 0); err == nil {
		t.Fatal("a merge from the receiver's own region was accepted")
	}
	wms, err := b.Watermarks(ctx)
	if err != nil || wms["a"] != t0+9 {
		t.Fatalf("a's watermark at b: %d (%v), want %d", wms["a"], err, t0+9)
	}
}
