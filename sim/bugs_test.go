package sim

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"likes/clock"
	"likes/crdt"
	"likes/edge"
	"likes/pipeline"
	"likes/store/pebblestore"
)

// TestBugCorrectionsOutOfVersionOrder reproduces, without the simulation, what
// TestSimChains seeds 10047, 10058, 10060 (and others) found: a region that
// owned a range in two epochs (2 and 5) receives, from two other regions, an
// epoch-4 version first and an epoch-1 version second. Each opens a correction
// for a different branch, so the region's log holds corrections of one edge
// whose versions go DOWN (4.2, then 1.1). The aggregator dedupes corrections
// by "newest correction version applied" (pipeline.Applied.Correction) and
// skips the second one as a duplicate: the cell no longer equals the sum of
// the log's deltas, and the item's count is off by one forever.
//
// Proposed fix (pipeline/aggregator.go, fold): do not version-dedupe
// KindCorrection events. Each correction is a distinct log event, written
// once (ApplyRemote moves the branch bases in the same atomic write), so the
// per-cell position fence already applies it exactly once; Observe never emits
// two corrections for one (edge, version) at a region, so there is nothing to
// dedupe by version. (If a dedupe is wanted for a log with duplicates, key it
// by the event's position or by (edge, version) as a set, not by a max.)
func TestBugCorrectionsOutOfVersionOrder(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const parts = 4
	st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: vfs.NewMem(), Region: "rb", Partitions: parts, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const item, user = "i1", "u08"
	part := edge.PartitionOf(item, edge.BucketOf(user), parts)
	apply := func(ep uint64, target crdt.State, key string) {
		t.Helper()
		clk.Advance(time.Millisecond)
		d, err := st.Apply(ctx, edge.Request{Item: item, User: user, Target: target, Kind: edge.KindFlip,
			IdemKey: key, Fingerprint: key, Epoch: ep, Now: clk.Now().UnixMilli(), IdemTTLms: 1e9})
		if err != nil || d.Action != edge.ActWrite {
			t.Fatalf("apply epoch %d: %v %+v", ep, err, d)
		}
	}
	remote := func(from string, v crdt.Version, state crdt.State) {
		t.Helper()
		clk.Advance(time.Millisecond)
		ev := edge.Event{Partition: part, Pos: 1, Item: item, User: user, Bucket: edge.BucketOf(user),
			Version: v, State: state, Kind: edge.KindFlip, EventTime: clk.Now().UnixMilli()}
		if err := st.ApplyRemote(ctx, from, part, []edge.Event{ev}, 1); err != nil {
			t.Fatal(err)
		}
	}
	apply(2, crdt.Liked, "k1")                                // epoch 2: branch from 0.0 UNLIKED, writes 2.1 LIKED (+1)
	apply(5, crdt.Unliked, "k2")                              // epoch 5: branch from 2.1 LIKED, writes 5.2 UNLIKED (-1)
	remote("rc", crdt.Version{Epoch: 4, Op: 2}, crdt.Unliked) // corrects branch 5: +1
	remote("ra", crdt.Version{Epoch: 1, Op: 1}, crdt.Liked)   // corrects branch 2: -1

	evs, _, err := st.Read(ctx, part, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, ev := range evs {
		if ev.Kind.Counted() {
			sum += int64(ev.Delta)
			t.Logf("log @%d %s v=%v %v delta=%+d", ev.Pos, ev.Kind, ev.Version, ev.State, ev.Delta)
		}
	}
	agg, err := pipeline.NewAggregator(pipeline.Config{Region: "rb", Log: st, Cells: st, Clock: clk}, part)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, caught, err := agg.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if caught {
			break
		}
	}
	n, err := st.Count(ctx, item)
	if err != nil {
		t.Fatal(err)
	}
	if n != sum {
		t.Fatalf("cell of %s at rb counts %d, but rb's log deltas sum to %d: the aggregator skipped a correction whose version is older than an earlier correction's", item, n, sum)
	}
}
