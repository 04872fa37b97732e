package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestCorrectionsOutOfVersionOrder is the regression test of a bug the
// simulation found (TestSimChains seeds 10047, 10058, 10060 and others, before
// the fix): a region that owned a range in two epochs (2 and 5) receives, from
// two other regions, an epoch-4 version first and an epoch-1 version second.
// Each opens a correction for a different branch, so the region's log holds
// corrections of one edge whose remote versions go DOWN (4.2, then 1.1). The
// aggregator dedupes corrections by "newest correction version applied"
// (pipeline.Applied.Correction), so it skipped the second one as a duplicate:
// the cell no longer equalled the sum of the log's deltas, and the item's
// count stayed off by one for good. Fixed in pebblestore (applyRemoteEvent):
// a correction's Version is now the edge's own correction sequence {0, n},
// which grows in log order.
func TestCorrectionsOutOfVersionOrder(t *testing.T) {
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

// scripted runs f on a started simulation (three regions, fault-free until f
// injects faults), failing t on any broken invariant.
func scripted(t *testing.T, f func(s *sim)) {
	t.Helper()
	s := newSim(Options{Seed: 1, Test: t.Name()})
	defer s.closeAll()
	defer func() {
		if p := recover(); p != nil {
			if fl, ok := p.(*Failure); ok {
				t.Fatal(fl.Msg)
			}
			panic(p)
		}
	}()
	s.start()
	s.clk.Advance(time.Second)
	s.refreshEtcd()
	f(s)
}

func stepAll(s *sim, r *region) {
	for _, a := range r.aggs {
		for {
			_, caught, err := a.Step(s.ctx)
			s.must(err, "step")
			if caught {
				break
			}
		}
	}
}

// TestShippedCellsSurviveCrash is the regression test of a bug the
// simulation found (TestSim seeds 167 and 253, before the fix): aggregator
// commits were not synced, so a crash rolled the cell outbox back and the
// restarted region reused its sequence numbers for new changes; a peer whose
// cursor had passed them skipped those changes for good (counts diverged) and
// took the sender's watermark for them (asOf lied). Fixed twice over: windows
// that change cells commit with a sync (pebblestore.Store.Commit), and
// pebblestore.CellChanges syncs the WAL before handing changes out.
func TestShippedCellsSurviveCrash(t *testing.T) {
	scripted(t, func(s *sim) {
		r0, r1 := s.regions[0], s.regions[1]
		u := s.usersOf[0][0] // range 0 is pinned to r0
		user := s.users[u]
		part := func(i int) uint32 { return edge.PartitionOf(s.items[i], edge.BucketOf(user), s.k.Partitions) }
		a, b := 0, -1
		for i := 1; i < len(s.items); i++ {
			if part(i) != part(a) {
				b = i
				break
			}
		}
		if b < 0 {
			t.Skip("no two items in different partitions")
		}
		_, err := r0.svc.Set(s.ctx, user, s.items[a], crdt.Liked, "ka")
		s.must(err, "like a")
		stepAll(s, r0) // cell of a: outbox seq 1, not synced
		s.shipDirect(r0, r1)
		s.crashSynced(r0, false) // the outbox entry is lost unless shipping synced it
		s.restart(r0)
		_, err = r0.svc.Set(s.ctx, user, s.items[b], crdt.Liked, "kb")
		s.must(err, "like b")
		_, _, err = r0.aggs[part(b)].Step(s.ctx) // b's cell first: would reuse seq 1
		s.must(err, "step b")
		stepAll(s, r0)
		for s.shipDirect(r0, r1) {
		}
		for _, i := range []int{a, b} {
			home, err := r0.st.Count(s.ctx, s.items[i])
			s.must(err, "count")
			peer, err := r1.st.Count(s.ctx, s.items[i])
			s.must(err, "count")
			if home != 1 || peer != 1 {
				t.Fatalf("%s: r0 counts %d, r1 counts %d, want 1 and 1", s.items[i], home, peer)
			}
		}
		s.checkHonestyAll()
	})
}

// TestShippedWatermarkSurvivesCrash is the regression test of a second bug
// of that kind (found by the simulation with a crash-heavy fault mix): a
// watermark-only window is committed without a sync, and the shipper sent its
// watermark; a crash lost the window, and a restart before the clock passed
// that watermark let the store (whose stamping floor is restored from the
// durable positions) stamp a new event at that very time, so the peer's asOf
// claimed an event it did not have. Fixed in pebblestore.CellChanges, which
// syncs the WAL on every call, so whatever a batch vouches for is durable.
func TestShippedWatermarkSurvivesCrash(t *testing.T) {
	scripted(t, func(s *sim) {
		r0, r1 := s.regions[0], s.regions[1]
		stepAll(s, r0) // watermark-only windows at t, not synced
		s.shipDirect(r0, r1)
		s.crashSynced(r0, false)
		s.restart(r0) // same millisecond
		u := s.usersOf[0][0]
		_, err := r0.svc.Set(s.ctx, s.users[u], s.items[0], crdt.Liked, "k") // checkFresh runs here
		s.must(err, "like")
	})
}

// TestErasureSurvivesUnplannedFailover is issue 17 (found by the chaos soak;
// the simulation found it too once it modelled erasures, TestSim seeds 11, 20
// and others): region ap is cut from its peers but still holds its lease and
// acknowledges a like it cannot replicate; ap is cut from etcd and its range
// fails over (unplanned) to us; the user's account erasure is acknowledged by
// us, which has never seen the edge, so its eraser neither lists nor
// tombstones it; the links heal, ap's LIKED replicates, nothing newer exists,
// and the erased user's like is applied and counted for good.
func TestErasureSurvivesUnplannedFailover(t *testing.T) {
	scripted(t, func(s *sim) {
		g := -1
		for r := range s.usersOf {
			if len(s.usersOf[r]) > 0 {
				g = r
				break
			}
		}
		ap := s.regions[s.idx(s.current(g).Region)]
		us := s.regions[(ap.idx+1)%len(s.regions)]
		u := s.usersOf[g][0]
		user, item := s.users[u], s.items[0]
		for b := range s.regions { // ap is cut from its peers
			if b != ap.idx {
				s.links[ap.idx][b].cut, s.links[b][ap.idx].cut = true, true
			}
		}
		_, err := ap.svc.Set(s.ctx, user, item, crdt.Liked, "k1") // acknowledged, not replicated
		s.must(err, "like at ap")
		ap.etcdUp = false // and from etcd: the range fails over to us
		p := s.movePin(g, us.name, s.clk.Now().Add(leaseTTL+maxSkew), false)
		s.clk.Advance(p.NotBefore.Sub(s.clk.Now()))
		s.refreshEtcd()
		j, err := us.er.Start(s.ctx, user)
		s.must(err, "erase at us")
		if j.State != edge.ErasureDone || j.Edges != 0 {
			t.Fatalf("erasure at us: %+v, want done with nothing to erase", j)
		}
		s.erasure[u].acked = us.name
		s.heal()
		s.checkFinal()
	})
}

// TestRetractionRacesFailover: an admin retraction the cut-off old owner
// accepted and could not replicate ends UNLIKED after an unplanned failover
// and healing, unless a write accepted later (in real time) by the new owner
// says otherwise; counts follow the edge either way (corrections).
func TestRetractionRacesFailover(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("laterLike=%v", later), func(t *testing.T) {
			scripted(t, func(s *sim) {
				g := -1
				for r := range s.usersOf {
					if len(s.usersOf[r]) > 0 {
						g = r
						break
					}
				}
				old := s.regions[s.idx(s.current(g).Region)]
				nu := s.regions[(old.idx+1)%len(s.regions)]
				u := s.usersOf[g][0]
				user, item := s.users[u], s.items[0]
				_, err := old.svc.Set(s.ctx, user, item, crdt.Liked, "k1")
				s.must(err, "like")
				for s.shipDirect(old, nu) { // the like reaches the new owner
				}
				for b := range s.regions {
					if b != old.idx {
						s.links[old.idx][b].cut, s.links[b][old.idx].cut = true, true
					}
				}
				_, err = old.svc.Retract(s.ctx, item, user) // acknowledged, not replicated
				s.must(err, "retract")
				old.etcdUp = false
				p := s.movePin(g, nu.name, s.clk.Now().Add(leaseTTL+maxSkew), false)
				s.clk.Advance(p.NotBefore.Sub(s.clk.Now()))
				s.refreshEtcd()
				want := crdt.Unliked
				if later {
					_, err = nu.svc.Set(s.ctx, user, item, crdt.Liked, "k2") // first touch in epoch 2
					s.must(err, "later like")
					want = crdt.Liked
				}
				s.heal()
				s.checkFinal()
				e, _, err := nu.st.Edge(s.ctx, item, user)
				s.must(err, "edge")
				if e.State != want || s.edges[0][u].last != want {
					t.Fatalf("edge after healing %v/%v (model %v), want %v", e.Version, e.State, s.edges[0][u].last, want)
				}
			})
		})
	}
}
