package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
)

// TestRemoteApplyCrashes: an unplanned failover left this region ("r1",
// epoch 2) writing an edge while the old owner's three writes (like, unlike,
// like at epoch 1) were still on their way. Their run is applied with a crash
// at the n-th time a remote apply reaches a stage (the edge row's
// transaction written; a correction's outbox sequence written), then applied
// again: the edge stays at this region's version, the corrections are
// appended exactly once each (distinct, growing versions), and the deltas
// telescope (Σ of both regions' deltas == this region's state).
func TestRemoteApplyCrashes(t *testing.T) {
	ks := FreshKeyspace(t)
	s := openTest(t, ks, 2, clock.NewFake(clock.Real{}.Now()))
	ctx := context.Background()
	now := s.opts.Clock.Now().UnixMilli()
	pos := uint64(0) // the sender's positions grow across the cases
	for _, stage := range []string{"remote-edge-written", "sequence-written"} {
		for nth := 1; nth <= 3; nth++ {
			user := fmt.Sprintf("u-%s-%d", stage, nth)
			const item = "i"
			if _, err := s.Apply(ctx, edgetest.Unlike(item, user, "b1", 2, now)); err != nil {
				t.Fatal(err)
			}
			part := edge.PartitionOf(item, edge.BucketOf(user), s.Partitions())
			var run []edge.Event
			remoteSum := 0
			for i, st := range []crdt.State{crdt.Liked, crdt.Unliked, crdt.Liked} {
				delta := int32(1)
				if st == crdt.Unliked {
					delta = -1
				}
				remoteSum += int(delta)
				pos++
				run = append(run, edge.Event{Partition: part, Pos: pos, Item: item, User: user, Bucket: edge.BucketOf(user),
					Version: crdt.Version{Epoch: 1, Op: uint64(i + 1)}, State: st, Delta: delta, EventTime: now, Kind: edge.KindFlip,
					Idem: &edge.IdemRef{Key: fmt.Sprint("a", i), Fingerprint: "f", ExpiresAt: now + 3600_000, Liked: st == crdt.Liked, Changed: true}})
			}
			var seen atomic.Int32
			s.SetTestHook(func(st string) error {
				if st == stage && seen.Add(1) == int32(nth) {
					return errCrash
				}
				return nil
			})
			err := s.ApplyRemote(ctx, "a", part, run, run[len(run)-1].Pos)
			s.SetTestHook(nil)
			if seen.Load() >= int32(nth) && !errors.Is(err, errCrash) {
				t.Fatalf("%s #%d: crashed apply returned %v", stage, nth, err)
			}
			if err := s.ApplyRemote(ctx, "a", part, run, run[len(run)-1].Pos); err != nil {
				t.Fatalf("%s #%d: apply after the crash: %v", stage, nth, err)
			}
			if err := s.ApplyRemote(ctx, "a", part, run, run[len(run)-1].Pos); err != nil { // a duplicate push
				t.Fatal(err)
			}
			e, _, err := s.Edge(ctx, item, user)
			if err != nil || e.State != crdt.Unliked || e.Version != (crdt.Version{Epoch: 2, Op: 1}) {
				t.Fatalf("%s #%d: edge %+v (%v), want this region's unlike at 2.1", stage, nth, e, err)
			}
			localSum, corrections := 0, map[crdt.Version]bool{}
			for _, ev := range eventsOf(logOf(t, s), item, user) {
				localSum += int(ev.Delta)
				if ev.Kind == edge.KindCorrection {
					if corrections[ev.Version] || ev.Version.Epoch != 0 {
						t.Fatalf("%s #%d: correction %v twice or not in epoch 0", stage, nth, ev.Version)
					}
					corrections[ev.Version] = true
				}
			}
			if localSum+remoteSum != 0 {
				t.Fatalf("%s #%d: Σ deltas %d here + %d remote, want 0 (the edge is UNLIKED); %d corrections",
					stage, nth, localSum, remoteSum, len(corrections))
			}
		}
	}
}
