package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// TestDedupeCarriesEventTime: a window's dedupe entries carry the event time
// of the newest event they applied (what pruning reads).
func TestDedupeCarriesEventTime(t *testing.T) {
	ctx := context.Background()
	log, cells := newFakeLog(1), newFakeCells()
	a, err := pipeline.NewAggregator(pipeline.Config{Region: "r", Log: log, Cells: cells, Clock: clock.NewFake(time.UnixMilli(1000))}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ek := pipeline.EdgeKey{Item: "i", User: "u"}
	log.add(0, edge.Event{Item: "i", User: "u", Kind: edge.KindFlip, State: crdt.Liked, Delta: 1, Version: crdt.Version{Epoch: 1, Op: 1}, EventTime: 500})
	log.add(0, edge.Event{Item: "i", User: "u", Kind: edge.KindFlip, State: crdt.Unliked, Delta: -1, Version: crdt.Version{Epoch: 1, Op: 2}, EventTime: 700})
	log.setComplete(0, 800)
	if _, _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := cells.Applied(ctx, 0, []pipeline.EdgeKey{ek})
	if got[ek].At != 700 || got[ek].Write != (crdt.Version{Epoch: 1, Op: 2}) {
		t.Fatalf("dedupe entry %+v, want At 700 at version 1/2", got[ek])
	}
}

// TestPrunedDedupeCountsTheNextVersion: an edge whose dedupe entry was pruned
// (its newest event older than the horizon) counts its next version exactly
// once, and a replay of the window that folded it adds nothing (the fence).
func TestPrunedDedupeCountsTheNextVersion(t *testing.T) {
	ctx := context.Background()
	log, cells := newFakeLog(1), newFakeCells()
	a, err := pipeline.NewAggregator(pipeline.Config{Region: "r", Log: log, Cells: cells, Clock: clock.NewFake(time.UnixMilli(1000))}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ek := pipeline.EdgeKey{Item: "i", User: "u"}
	log.add(0, edge.Event{Item: "i", User: "u", Kind: edge.KindFlip, State: crdt.Liked, Delta: 1, Version: crdt.Version{Epoch: 1, Op: 1}, EventTime: 500})
	log.setComplete(0, 600)
	if _, _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	cells.mu.Lock()
	delete(cells.applied, ek) // pruned
	cells.mu.Unlock()
	log.add(0, edge.Event{Item: "i", User: "u", Kind: edge.KindFlip, State: crdt.Unliked, Delta: -1, Version: crdt.Version{Epoch: 1, Op: 2}, EventTime: 900})
	log.setComplete(0, 1000)
	if _, _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	// A replay from scratch (a restarted aggregator that lost its position in
	// memory only) finds every cell at its HWM.
	b, err := pipeline.NewAggregator(pipeline.Config{Region: "r", Log: log, Cells: cells, Clock: clock.NewFake(time.UnixMilli(1000))}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Step(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := cells.Count(ctx, "i")
	if err != nil || n != 0 {
		t.Fatalf("count %d (%v), want 0 after like then unlike", n, err)
	}
}
