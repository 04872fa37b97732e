package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/pebblestore"
)

const day = 24 * time.Hour

// retFixture is one store on a fake clock with its aggregators stepped by hand.
type retFixture struct {
	t    *testing.T
	clk  *clock.Fake
	fs   vfs.FS
	st   *pebblestore.Store
	aggs []*pipeline.Aggregator
	n    int
}

func newRetFixture(t *testing.T, parts int) *retFixture {
	f := &retFixture{t: t, clk: clock.NewFake(time.UnixMilli(t0)), fs: vfs.NewMem()}
	f.open(parts)
	return f
}

func (f *retFixture) open(parts int) {
	f.t.Helper()
	st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: f.fs, Region: "r1", Partitions: parts, Clock: f.clk, CacheBytes: 1 << 20})
	if err != nil {
		f.t.Fatal(err)
	}
	f.st = st
	f.t.Cleanup(func() { _ = st.Close() })
	f.aggs = nil
	for p := 0; p < parts; p++ {
		a, err := pipeline.NewAggregator(pipeline.Config{Region: "r1", Log: st, Cells: st, Clock: f.clk}, uint32(p))
		if err != nil {
			f.t.Fatal(err)
		}
		f.aggs = append(f.aggs, a)
	}
}

// write flips one edge of a small key space with an idempotency key.
func (f *retFixture) write(item, user string, target crdt.State) {
	f.t.Helper()
	f.n++
	req := edge.Request{Item: item, User: user, Target: target, Kind: edge.KindFlip, Epoch: 1,
		IdemKey: fmt.Sprintf("k%d", f.n), Fingerprint: fmt.Sprintf("f%d", f.n),
		Now: f.clk.Now().UnixMilli(), IdemTTLms: day.Milliseconds()}
	if _, err := f.st.Apply(context.Background(), req); err != nil {
		f.t.Fatal(err)
	}
}

func (f *retFixture) aggregate() {
	f.t.Helper()
	for _, a := range f.aggs {
		for {
			_, caught, err := a.Step(context.Background())
			if err != nil {
				f.t.Fatal(err)
			}
			if caught {
				break
			}
		}
	}
}

func (f *retFixture) retain(peers ...pebblestore.PeerCursor) pebblestore.RetentionStats {
	f.t.Helper()
	var total pebblestore.RetentionStats
	for i := 0; i < 100; i++ {
		st, err := f.st.Retain(context.Background(), pebblestore.RetentionRound{
			Now: f.clk.Now(), Horizon: 7 * day, Peers: peers, Log: true, Scan: 64,
		})
		if err != nil {
			f.t.Fatal(err)
		}
		total.LogDeleted += st.LogDeleted
		total.OutboxDeleted += st.OutboxDeleted
		total.DedupeDeleted += st.DedupeDeleted
		total.IdemDeleted += st.IdemDeleted
		total.LogFloors, total.OutboxFloor = st.LogFloors, st.OutboxFloor
		if !st.More {
			return total
		}
	}
	f.t.Fatal("retention rounds never finished")
	return total
}

func (f *retFixture) counts() map[string]int {
	f.t.Helper()
	c, err := f.st.KeyCounts()
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *retFixture) count(item string) int64 {
	f.t.Helper()
	n, err := f.st.Count(context.Background(), item)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestRetentionTruncatesBelowEveryConsumer: nothing younger than the horizon,
// nothing an aggregator has not folded and nothing a holding peer has not
// acknowledged is deleted; the rest is, and counts stay exact.
func TestRetentionTruncatesBelowEveryConsumer(t *testing.T) {
	f := newRetFixture(t, 2)
	for i := 0; i < 40; i++ {
		f.write(fmt.Sprintf("i%d", i%4), fmt.Sprintf("u%d", i), crdt.Liked)
	}
	// Young events are kept whatever the consumers say.
	f.aggregate()
	if st := f.retain(); st.LogDeleted != 0 || st.OutboxDeleted != 0 {
		t.Fatalf("deleted young data: %+v", st)
	}
	before := f.counts()
	f.clk.Advance(8 * day)
	// A holding peer that has acknowledged nothing holds everything.
	zero := pebblestore.PeerCursor{Region: "r2", Cursor: replica.Cursor{Log: []uint64{0, 0}}}
	if st := f.retain(zero); st.LogDeleted != 0 || st.OutboxDeleted != 0 {
		t.Fatalf("deleted what a holding peer has not acknowledged: %+v", st)
	}
	// A peer through partition 0 only: partition 0 is truncated, 1 is not.
	heads := []uint64{0, 0}
	for p := range heads {
		evs, h, err := f.st.Read(context.Background(), uint32(p), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		heads[p] = h.Pos
		_ = evs
	}
	half := pebblestore.PeerCursor{Region: "r2", Cursor: replica.Cursor{Log: []uint64{heads[0], 0}, Cells: 0}}
	st := f.retain(half)
	if st.LogDeleted != heads[0] || st.LogFloors[0] != heads[0] || st.LogFloors[1] != 0 {
		t.Fatalf("peer-held truncation: %+v, heads %v", st, heads)
	}
	// Reading below the floor fails loudly, never skips.
	if _, _, err := f.st.Read(context.Background(), 0, 0, 10); !errors.Is(err, pipeline.ErrTruncated) {
		t.Fatalf("read below the floor: %v, want ErrTruncated", err)
	}
	// No peer holds anything: everything old and folded goes.
	st = f.retain()
	if st.LogFloors[1] != heads[1] {
		t.Fatalf("floors %v, want heads %v", st.LogFloors, heads)
	}
	after := f.counts()
	if after["log"] != 0 || after["outbox"] != 0 {
		t.Fatalf("log/outbox left: %v (before %v)", after, before)
	}
	if after["idempotency"] != 0 || after["dedupe"] != 0 {
		t.Fatalf("expired records or old dedupe left: %v", after)
	}
	for i := 0; i < 4; i++ {
		if n := f.count(fmt.Sprintf("i%d", i)); n != 10 {
			t.Fatalf("count of i%d = %d, want 10", i, n)
		}
	}
	if _, _, err := f.st.CellChanges(context.Background(), 0, 10); !errors.Is(err, pipeline.ErrTruncated) {
		t.Fatalf("cell changes below the outbox floor: %v, want ErrTruncated", err)
	}
}

// TestRetentionNeverPassesTheAggregator: old events an aggregator has not
// folded stay until it has.
func TestRetentionNeverPassesTheAggregator(t *testing.T) {
	f := newRetFixture(t, 1)
	for i := 0; i < 10; i++ {
		f.write("i", fmt.Sprintf("u%d", i), crdt.Liked)
	}
	f.clk.Advance(8 * day)
	if st := f.retain(); st.LogDeleted != 0 {
		t.Fatalf("deleted unfolded events: %+v", st)
	}
	f.aggregate()
	if st := f.retain(); st.LogDeleted != 10 {
		t.Fatalf("deleted %d, want 10", st.LogDeleted)
	}
	if n := f.count("i"); n != 10 {
		t.Fatalf("count %d", n)
	}
}

// TestRetentionSurvivesRestart: a partition truncated through its head keeps
// its head and cell outbox sequence across a restart (positions are never
// reused), and new writes are counted.
func TestRetentionSurvivesRestart(t *testing.T) {
	f := newRetFixture(t, 1)
	for i := 0; i < 5; i++ {
		f.write("i", fmt.Sprintf("u%d", i), crdt.Liked)
	}
	f.aggregate()
	changes, seq, err := f.st.CellChanges(context.Background(), 0, 100)
	if err != nil || len(changes) == 0 {
		t.Fatal(changes, err)
	}
	f.clk.Advance(8 * day)
	f.retain()
	f.retain() // the checkpoint written by the first round dates the outbox
	if c := f.counts(); c["log"] != 0 {
		t.Fatalf("log not truncated: %v", c)
	}
	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	f.open(1)
	if fl, _ := f.st.LogFloor(context.Background(), 0); fl != 5 {
		t.Fatalf("floor after restart %d, want 5", fl)
	}
	f.write("i", "u9", crdt.Liked)
	evs, h, err := f.st.Read(context.Background(), 0, 5, 10)
	if err != nil || h.Pos != 6 || len(evs) != 1 || evs[0].Pos != 6 {
		t.Fatalf("after restart: evs %v head %+v err %v (want position 6)", evs, h, err)
	}
	f.aggregate()
	if n := f.count("i"); n != 6 {
		t.Fatalf("count %d, want 6", n)
	}
	_, seq2, err := f.st.CellChanges(context.Background(), f.st.OutboxFloor(), 100)
	if err != nil || seq2 <= seq {
		t.Fatalf("outbox sequence after restart %d (before %d), err %v: reused", seq2, seq, err)
	}
}

// TestRetentionSweepsExpiredIdempotency: records expired for over a minute
// are removed from disk, own and replicated; live ones stay and replay.
func TestRetentionSweepsExpiredIdempotency(t *testing.T) {
	f := newRetFixture(t, 1)
	f.write("i", "u1", crdt.Liked) // k1
	// A replicated record from another region (the sweep covers them too).
	ev := edge.Event{Item: "i", User: "u2", Kind: edge.KindFlip, State: crdt.Liked, Delta: 1, Pos: 1,
		Version: crdt.Version{Epoch: 1, Op: 1}, EventTime: f.clk.Now().UnixMilli(), Bucket: edge.BucketOf("u2"),
		Idem: &edge.IdemRef{Key: "rk", Fingerprint: "rf", ExpiresAt: f.clk.Now().Add(day).UnixMilli(), Liked: true, Changed: true}}
	if err := f.st.ApplyRemote(context.Background(), "r2", 0, []edge.Event{ev}, 1); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(12 * time.Hour)
	f.write("i", "u3", crdt.Liked) // k2: expires 12h later than the others
	if c := f.counts(); c["idempotency"] != 3 {
		t.Fatalf("records %v", c)
	}
	f.clk.Advance(12*time.Hour + 30*time.Second)
	if st := f.retain(); st.IdemDeleted != 0 {
		t.Fatalf("deleted records within the grace minute: %+v", st)
	}
	f.clk.Advance(time.Minute)
	if st := f.retain(); st.IdemDeleted != 2 {
		t.Fatalf("deleted %d expired records, want 2", st.IdemDeleted)
	}
	if c := f.counts(); c["idempotency"] != 1 {
		t.Fatalf("records left %v, want 1", c)
	}
	// The live record still replays.
	req := edge.Request{Item: "i", User: "u3", Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1,
		IdemKey: "k2", Fingerprint: "f2", Now: f.clk.Now().UnixMilli(), IdemTTLms: day.Milliseconds()}
	d, err := f.st.Apply(context.Background(), req)
	if err != nil || d.Action != edge.ActReplay {
		t.Fatalf("live record: %+v %v, want a replay", d.Action, err)
	}
}

// TestRetainerLoop: the loop runs rounds on its clock and Close is
// idempotent and waits.
func TestRetainerLoop(t *testing.T) {
	f := newRetFixture(t, 1)
	for i := 0; i < 3; i++ {
		f.write("i", fmt.Sprintf("u%d", i), crdt.Liked)
	}
	f.aggregate()
	r, err := pebblestore.NewRetainer(pebblestore.RetainerConfig{Store: f.st, Clock: f.clk, Retention: time.Hour, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().LogDeleted < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("loop never truncated: %+v", r.Stats())
		}
		f.clk.Advance(2 * time.Hour)
		runtime.Gosched() // let the loop take the tick
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pebblestore.NewRetainer(pebblestore.RetainerConfig{Store: f.st, Retention: -time.Hour}); err == nil {
		t.Fatal("negative retention accepted")
	}
}

// TestRetainerSweepKeepsUp: the idempotency sweep's work per interval
// follows the number of records (records × Interval ÷ IdemPass), not a
// fixed cap, so a pass never takes longer than IdemPass at any write rate:
// here 2 000 expired records, 4 per round, a pass of two intervals. The
// former fixed cap (64 rounds an interval) needed 8.
func TestRetainerSweepKeepsUp(t *testing.T) {
	f := newRetFixture(t, 1)
	const n = 2000
	for i := 0; i < n; i++ {
		f.write(fmt.Sprintf("i%d", i%10), fmt.Sprintf("u%d", i), crdt.Liked)
	}
	if err := f.st.CompactAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := pebblestore.NewManualRetainer(pebblestore.RetainerConfig{Store: f.st, Clock: f.clk, Retention: 7 * day,
		Interval: time.Minute, IdemPass: 2 * time.Minute, Scan: 4, KeepLog: true})
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(day + 2*time.Minute)
	var scanned []uint64
	for i := 0; i < 3 && r.Stats().IdemDeleted < n; i++ {
		before := r.Stats().IdemScanned
		if failing := r.Interval(context.Background(), false); failing {
			t.Fatalf("interval %d failed: %+v", i, r.Stats())
		}
		scanned = append(scanned, r.Stats().IdemScanned-before)
	}
	if got := r.Stats().IdemDeleted; got != n {
		t.Fatalf("deleted %d of %d expired records in %d intervals (scanned %v)", got, n, len(scanned), scanned)
	}
	if len(scanned) > 2 {
		t.Fatalf("the pass took %d intervals (scanned %v), want at most 2 (IdemPass)", len(scanned), scanned)
	}
	for _, s := range scanned {
		if s > n+4 {
			t.Fatalf("an interval scanned %d records: more than one pass (%v)", s, scanned)
		}
	}
	if c := f.counts(); c["idempotency"] != 0 {
		t.Fatalf("records left: %v", c)
	}
	if _, err := pebblestore.NewManualRetainer(pebblestore.RetainerConfig{Store: f.st, IdemPass: -time.Hour}); err == nil {
		t.Fatal("a negative IdemPass accepted")
	}
}
