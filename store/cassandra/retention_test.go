package cassandra_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/cassandra"
	"github.com/likes-dev/likes/store/retain"
)

const day = 24 * time.Hour

// retFixture is one Cassandra store on a fake clock with its aggregators
// stepped by hand (pebblestore's retention fixture, on Cassandra).
type retFixture struct {
	t    *testing.T
	ctx  context.Context
	clk  *clock.Fake
	st   *cassandra.Store
	aggs []*pipeline.Aggregator
	n    int
	scan int // Round.Scan of retain (default 16: many bounded rounds)
}

func newRetFixture(t *testing.T, region string, parts int) *retFixture {
	t.Helper()
	return newRetFixtureWith(t, region, parts, nil)
}

// newRetFixtureWith is newRetFixture with opt changing the store's options.
func newRetFixtureWith(t *testing.T, region string, parts int, opt func(*cassandra.Options)) *retFixture {
	t.Helper()
	f := &retFixture{t: t, ctx: context.Background(), clk: clock.NewFake(time.UnixMilli(t0))}
	ks := cassandra.FreshKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := cassandra.Options{
		Session: cassandra.SharedSession(t), Keyspace: ks, Region: region, Partitions: parts, Clock: f.clk,
		SweepEvery: -1, OnError: func(err error) { t.Logf("background: %v", err) },
	}
	if opt != nil {
		opt(&o)
	}
	st, err := cassandra.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f.st = st
	for p := 0; p < parts; p++ {
		a, err := pipeline.NewAggregator(pipeline.Config{Region: region, Log: st, Cells: st, Clock: f.clk}, uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		f.aggs = append(f.aggs, a)
	}
	return f
}

// write flips one edge with an idempotency key.
func (f *retFixture) write(item, user string, target crdt.State) {
	f.t.Helper()
	f.n++
	req := edge.Request{Item: item, User: user, Target: target, Kind: edge.KindFlip, Epoch: 1,
		IdemKey: fmt.Sprintf("k%d", f.n), Fingerprint: fmt.Sprintf("f%d", f.n),
		Now: f.clk.Now().UnixMilli(), IdemTTLms: day.Milliseconds()}
	if _, err := f.st.Apply(f.ctx, req); err != nil {
		f.t.Fatal(err)
	}
}

func (f *retFixture) aggregate() {
	f.t.Helper()
	pipelinetest.CatchUp(f.t, f.aggs)
}

func (f *retFixture) retain(peers ...replica.PeerCursor) cassandra.RetentionStats {
	f.t.Helper()
	return f.retainRelayed(nil, peers...)
}

// retainRelayed runs rounds until done; relayed: Round.Relayed (nil: the
// aggregators read this store's log).
func (f *retFixture) retainRelayed(relayed []uint64, peers ...replica.PeerCursor) cassandra.RetentionStats {
	f.t.Helper()
	var total cassandra.RetentionStats
	for i := 0; i < 100; i++ {
		st, err := f.st.Retain(f.ctx, cassandra.RetentionRound{Now: f.clk.Now(), Horizon: 7 * day, Peers: peers, Log: true, Relayed: relayed, Scan: cmp.Or(f.scan, 16)})
		if err != nil {
			f.t.Fatal(err)
		}
		total.LogDeleted += st.LogDeleted
		total.OutboxDeleted += st.OutboxDeleted
		total.DedupeDeleted += st.DedupeDeleted
		total.LogFloors, total.OutboxFloor = st.LogFloors, st.OutboxFloor
		if !st.More {
			return total
		}
	}
	f.t.Fatal("retention rounds never finished")
	return total
}

func (f *retFixture) head(part uint32) uint64 {
	f.t.Helper()
	_, h, err := f.st.Read(f.ctx, part, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return h.Pos
}

func (f *retFixture) rows(part uint32, through uint64) int {
	f.t.Helper()
	n, err := f.st.OutboxRows(f.ctx, part, through)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *retFixture) count(item string) int64 {
	f.t.Helper()
	n, err := f.st.Count(f.ctx, item)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestRetentionTruncatesBelowEveryConsumer: nothing younger than the
// horizon, nothing an aggregator has not folded and nothing a holding peer
// has not acknowledged is deleted (a peer far behind keeps every row until
// it stops holding, i.e. until it has been silent for the horizon); the rest
// goes, by partition and range deletes, and counts and the log above the
// floor stay exact.
func TestRetentionTruncatesBelowEveryConsumer(t *testing.T) {
	f := newRetFixture(t, "r1", 2)
	ctx := f.ctx
	for i := 0; i < 40; i++ {
		f.write(fmt.Sprintf("i%d", i%4), fmt.Sprintf("u%d", i), crdt.Liked)
	}
	f.aggregate()
	heads := []uint64{f.head(0), f.head(1)}
	if heads[0] == 0 || heads[1] == 0 || heads[0]+heads[1] != 40 {
		t.Fatalf("heads %v", heads)
	}
	// Young events are kept whatever the consumers say.
	if st := f.retain(); st.LogDeleted != 0 || st.OutboxDeleted != 0 || st.DedupeDeleted != 0 {
		t.Fatalf("deleted young data: %+v", st)
	}
	f.clk.Advance(8 * day)
	// A holding peer that acknowledged nothing holds everything, however old.
	zero := replica.PeerCursor{Region: "r2", Cursor: replica.Cursor{Log: []uint64{0, 0}}}
	if st := f.retain(zero); st.LogDeleted != 0 || st.OutboxDeleted != 0 {
		t.Fatalf("deleted what a holding peer has not acknowledged: %+v", st)
	}
	// A peer claiming cursors far past the heads (a hostile or confused
	// answer) holds nothing back, but truncation still never passes the
	// aggregator: new old events it has not folded stay.
	f.clk.Advance(-8 * day)
	f.write("i9", "late1", crdt.Liked)
	f.write("i9", "late2", crdt.Liked)
	f.clk.Advance(8*day + time.Hour)
	liar := replica.PeerCursor{Region: "r3", Cursor: replica.Cursor{Log: []uint64{1 << 40, 1 << 40}, Cells: 1 << 40}}
	// A peer through partition 0 only: partition 0 is truncated, 1 is not.
	half := replica.PeerCursor{Region: "r2", Cursor: replica.Cursor{Log: []uint64{heads[0], 0}}}
	st := f.retain(half, liar)
	if st.LogDeleted != heads[0] || st.LogFloors[0] != heads[0] || st.LogFloors[1] != 0 {
		t.Fatalf("peer-held truncation: %+v, heads %v", st, heads)
	}
	if n := f.rows(0, heads[0]); n != 0 {
		t.Fatalf("%d rows left at or below the floor of partition 0", n)
	}
	if n := f.rows(1, heads[1]); n != int(heads[1]) {
		t.Fatalf("partition 1 has %d of its %d held rows", n, heads[1])
	}
	// Reading below the floor fails loudly, never skips; at the floor it
	// reads on exactly.
	if _, _, err := f.st.Read(ctx, 0, 0, 10); !errors.Is(err, pipeline.ErrTruncated) {
		t.Fatalf("read below the floor: %v, want ErrTruncated", err)
	}
	if fl, err := f.st.LogFloor(ctx, 0); err != nil || fl != heads[0] {
		t.Fatalf("LogFloor %d %v", fl, err)
	}
	// No peer holds anything: everything old and folded goes; the two
	// unfolded events stay, readable above the floor.
	st = f.retain()
	for p := uint32(0); p < 2; p++ {
		if st.LogFloors[p] != heads[p] {
			t.Fatalf("floors %v, want the folded heads %v", st.LogFloors, heads)
		}
		evs, h, err := f.st.Read(ctx, p, st.LogFloors[p], 100)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, u := range []string{"late1", "late2"} {
			if edge.PartitionOf("i9", edge.BucketOf(u), 2) == p {
				want++
			}
		}
		if len(evs) != want || h.Pos != heads[p]+uint64(want) {
			t.Fatalf("partition %d above the floor: %d events, head %d; want %d", p, len(evs), h.Pos, want)
		}
		if n := f.rows(p, heads[p]); n != 0 {
			t.Fatalf("%d rows left below the floor of partition %d", n, p)
		}
	}
	if st.OutboxFloor == 0 {
		t.Fatalf("cell-change feed not truncated: %+v", st)
	}
	if _, _, err := f.st.CellChanges(ctx, 0, 10); !errors.Is(err, pipeline.ErrTruncated) {
		t.Fatalf("cell changes below the feed floor: %v, want ErrTruncated", err)
	}
	if n, err := f.st.DedupeRows(ctx); err != nil || n != 0 {
		t.Fatalf("%d old dedupe rows left (%v)", n, err)
	}
	for i := 0; i < 4; i++ {
		if n := f.count(fmt.Sprintf("i%d", i)); n != 10 {
			t.Fatalf("count of i%d = %d, want 10", i, n)
		}
	}
	// The late events are folded and counted once; then they go too.
	f.aggregate()
	if n := f.count("i9"); n != 2 {
		t.Fatalf("count of i9 = %d, want 2", n)
	}
	if st := f.retain(); st.LogDeleted != 2 {
		t.Fatalf("deleted %d late events, want 2: %+v", st.LogDeleted, st)
	}
}

// TestRetentionBelowRelayed: with the aggregators on Kafka (Round.Relayed)
// a partition is cut below what the relay published, whatever the
// aggregators' positions say (they are topic offsets), still never past a
// holding peer; dedupe rows are kept.
func TestRetentionBelowRelayed(t *testing.T) {
	f := newRetFixture(t, "r1", 2)
	for i := 0; i < 20; i++ {
		f.write(fmt.Sprintf("i%d", i%4), fmt.Sprintf("u%d", i), crdt.Liked)
	}
	f.aggregate() // positions at the heads, and one dedupe row per edge
	heads := []uint64{f.head(0), f.head(1)}
	f.clk.Advance(8 * day)
	if st := f.retainRelayed([]uint64{0, 0}); st.LogDeleted != 0 {
		t.Fatalf("deleted what the relay has not published: %+v", st)
	}
	peer := replica.PeerCursor{Region: "r2", Cursor: replica.Cursor{Log: []uint64{heads[0], 1}, Cells: 1 << 40}}
	st := f.retainRelayed([]uint64{heads[0], heads[1]}, peer)
	if st.LogFloors[0] != heads[0] || st.LogFloors[1] > 1 || st.DedupeDeleted != 0 {
		t.Fatalf("round %+v, heads %v: want partition 0 cut at its head, 1 held by the peer, dedupe kept", st, heads)
	}
	if n, err := f.st.DedupeRows(f.ctx); err != nil || n != 20 {
		t.Fatalf("%d dedupe rows left, want all 20 (%v)", n, err)
	}
	if st := f.retainRelayed([]uint64{heads[0], heads[1]}); st.LogFloors[1] != heads[1] {
		t.Fatalf("round without the peer %+v: want partition 1 cut at its head %d", st, heads[1])
	}
	for i := 0; i < 4; i++ {
		if n := f.count(fmt.Sprintf("i%d", i)); n != 5 {
			t.Fatalf("count of i%d = %d, want 5", i, n)
		}
	}
}

// TestRetentionFloorIsNotAKafkaPosition: with the aggregators on Kafka
// (Options.ForeignPositions) a floor raised in this log's positions never
// becomes an aggregator position: an aggregator that committed fewer topic
// offsets than the outbox floor must resume where it is, not jump ahead and
// skip the events in between.
func TestRetentionFloorIsNotAKafkaPosition(t *testing.T) {
	for _, foreign := range []bool{false, true} {
		f := newRetFixtureWith(t, "r1", 1, func(o *cassandra.Options) { o.ForeignPositions = foreign })
		for i := 0; i < 10; i++ {
			f.write("i", fmt.Sprintf("u%d", i), crdt.Liked)
		}
		head := f.head(0)
		f.clk.Advance(8 * day)
		if st := f.retainRelayed([]uint64{head}); st.LogFloors[0] != head {
			t.Fatalf("foreign %v: floor %d, want %d", foreign, st.LogFloors[0], head)
		}
		pos, _, err := f.st.Position(f.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]uint64{false: head, true: 0}[foreign]; pos != want {
			t.Fatalf("foreign positions %v: Position %d, want %d", foreign, pos, want)
		}
	}
}

// TestRetentionKeepsYoungDedupe: only dedupe rows whose newest event is
// older than the horizon are pruned; a pruned edge's next version counts
// exactly once.
func TestRetentionKeepsYoungDedupe(t *testing.T) {
	f := newRetFixture(t, "r1", 1)
	f.write("i", "old", crdt.Liked)
	f.aggregate()
	f.clk.Advance(6 * day)
	f.write("i", "young", crdt.Liked)
	f.aggregate()
	f.clk.Advance(2 * day)
	if st := f.retain(); st.DedupeDeleted != 1 || st.LogDeleted != 1 {
		t.Fatalf("pruned %d dedupe rows and %d events, want 1 and 1: %+v", st.DedupeDeleted, st.LogDeleted, st)
	}
	if n, err := f.st.DedupeRows(f.ctx); err != nil || n != 1 {
		t.Fatalf("%d dedupe rows left, want 1 (%v)", n, err)
	}
	f.write("i", "old", crdt.Unliked)
	f.aggregate()
	if n := f.count("i"); n != 1 {
		t.Fatalf("count %d, want 1", n)
	}
}

// TestRetainerRefusesBadConfig: the loop itself is retain.Loop (tested
// under the embedded store, and run on Cassandra by region's
// TestEnginesRegionRetention); its configuration is checked here.
func TestRetainerRefusesBadConfig(t *testing.T) {
	f := newRetFixture(t, "r1", 1)
	for _, cfg := range []retain.Config{{Retention: -time.Hour}, {}, {Retention: time.Hour, Interval: -time.Minute}} {
		if _, err := cassandra.NewRetainer(f.st, cfg, true); err == nil {
			t.Fatalf("config %+v accepted", cfg)
		}
	}
	if _, err := cassandra.NewRetainer(nil, retain.Config{Retention: time.Hour}, true); err == nil {
		t.Fatal("no store accepted")
	}
	r, err := cassandra.NewRetainer(f.st, retain.Config{Retention: time.Hour, Clock: f.clk}, true)
	if err != nil {
		t.Fatal(err)
	}
	f.write("i", "u", crdt.Liked)
	f.aggregate()
	f.clk.Advance(2 * time.Hour)
	if failing := r.Interval(f.ctx, false); failing || r.Stats().LogDeleted != 1 {
		t.Fatalf("a manual interval: failing %v, %+v", failing, r.Stats())
	}
}
