package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

const t0 = int64(1_700_000_000_000)

// openMem opens a store on an in-memory filesystem.
func openMem(t *testing.T, partitions int, clk clock.Clock) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: vfs.NewMem(), Region: "r1", Partitions: partitions, Clock: clk, CacheBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreContractMem(t *testing.T) {
	edgetest.RunStore(t, func(t *testing.T) edge.Store {
		return openMem(t, 8, clock.NewFake(time.UnixMilli(t0)))
	})
}

// TestStoreContractDisk runs the suite once on a real directory (fsync and all).
func TestStoreContractDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("disk variant skipped in -short")
	}
	edgetest.RunStore(t, func(t *testing.T) edge.Store {
		s, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Region: "r1", Partitions: 4, CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestJobStoreContract(t *testing.T) {
	edgetest.RunJobStore(t, func(t *testing.T) (edge.Store, edge.JobStore) {
		s := openMem(t, 4, nil)
		return s, s
	})
}

func TestPipelineContract(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts int
		fake  bool
	}{
		{"fake-clock-16", 16, true},
		{"fake-clock-1", 1, true},
		{"real-clock-3", 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness {
				var fake *clock.Fake
				var clk clock.Clock = clock.Real{}
				if tc.fake {
					fake = clock.NewFake(time.UnixMilli(t0))
					clk = fake
				}
				s := openMem(t, tc.parts, clk)
				return pipelinetest.Harness{Store: s, Log: s, Cells: s, Counts: s, Region: s.Region(), Clock: fake}
			})
		})
	}
}

// TestReopenKeepsEverything closes and reopens a store on disk: edges, records,
// log heads, positions and cells survive, and new positions continue the log.
func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := clock.NewFake(time.UnixMilli(t0))
	open := func() *pebblestore.Store {
		s, err := pebblestore.Open(pebblestore.Options{Dir: dir, Region: "r1", Partitions: 2, Clock: clk, CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	var last edge.Decision
	for i, u := range []string{"a", "b", "c", "d", "e"} {
		clk.Advance(time.Millisecond)
		d, err := s.Apply(ctx, edgetest.Like("item", u, "k", 1, t0+int64(i)))
		if err != nil {
			t.Fatal(err)
		}
		last = d
	}
	aggs := pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk})
	pipelinetest.CatchUp(t, aggs)
	heads := map[uint32]uint64{}
	for p := range s.Partitions() {
		_, h, err := s.Read(ctx, uint32(p), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		heads[uint32(p)] = h.Pos
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, edgetest.Like("item", "z", "k", 1, t0)); !errors.Is(err, pebblestore.ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}

	s = open()
	defer s.Close()
	if n, err := s.Count(ctx, "item"); err != nil || n != 5 {
		t.Fatalf("Count after reopen = %d, %v", n, err)
	}
	d, err := s.Apply(ctx, edgetest.Like("item", "e", "k", 1, t0+100))
	if err != nil || d.Action != edge.ActReplay {
		t.Fatalf("replay after reopen = %+v, %v", d, err)
	}
	e, ok, err := s.Edge(ctx, "item", "e")
	if err != nil || !ok || e != last.Edge {
		t.Fatalf("edge after reopen = %+v %v %v, want %+v", e, ok, err, last.Edge)
	}
	clk.Advance(time.Millisecond)
	d, err = s.Apply(ctx, edgetest.Like("item", "f", "k", 1, t0+101))
	if err != nil || d.Event == nil {
		t.Fatalf("write after reopen = %+v, %v", d, err)
	}
	if want := heads[d.Event.Partition] + 1; d.Event.Pos != want {
		t.Fatalf("first position after reopen = %d, want %d", d.Event.Pos, want)
	}
	pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}))
	pipelinetest.CheckCounts(t, s, s, []string{"item"})

	// A database refuses to open as another region or partition count.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pebblestore.Open(pebblestore.Options{Dir: dir, Region: "r2", Partitions: 2}); err == nil {
		t.Fatal("opened as another region")
	}
	if _, err := pebblestore.Open(pebblestore.Options{Dir: dir, Region: "r1", Partitions: 3}); err == nil {
		t.Fatal("opened with another partition count")
	}
}

// TestBranchRecorded: the first write of an edge in an epoch records its base.
func TestBranchRecorded(t *testing.T) {
	ctx := context.Background()
	s := openMem(t, 2, nil)
	if _, err := s.Apply(ctx, edgetest.Like("i", "u", "k1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, edgetest.Unlike("i", "u", "k2", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, edgetest.Unlike("i", "u", "k3", 3, t0)); err != nil {
		t.Fatal(err)
	}
	bs, err := s.Branches(ctx, "i", "u")
	if err != nil {
		t.Fatal(err)
	}
	want := crdt.Branches{
		{Epoch: 1, Base: crdt.Register{}},
		{Epoch: 3, Base: crdt.Register{Version: crdt.Version{Epoch: 1, Op: 2}, State: crdt.Unliked}},
	}
	if len(bs) != len(want) || bs[0] != want[0] || bs[1] != want[1] {
		t.Fatalf("branches %+v, want %+v", bs, want)
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []pebblestore.Options{
		{Region: "r"},
		{Dir: "/db", FS: vfs.NewMem()},
		{Dir: "/db", FS: vfs.NewMem(), Region: "r", Partitions: -1},
		{Dir: "/db", FS: vfs.NewMem(), Region: "r", Partitions: 5000},
	} {
		if s, err := pebblestore.Open(o); err == nil {
			_ = s.Close()
			t.Fatalf("Open(%+v) succeeded", o)
		}
	}
	s := openMem(t, 2, nil)
	if _, _, err := s.Read(context.Background(), 2, 0, 10); err == nil {
		t.Fatal("Read of a partition out of range succeeded")
	}
}

// TestWatermarkHonestAcrossRestart: a watermark committed before a restart
// stays honest for events written after it, even when the clock has not moved
// (or went backwards) across the restart.
func TestWatermarkHonestAcrossRestart(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	for _, back := range []time.Duration{0, 5 * time.Second} {
		clk := clock.NewFake(time.UnixMilli(t0))
		open := func(c clock.Clock) *pebblestore.Store {
			s, err := pebblestore.Open(pebblestore.Options{Dir: fmt.Sprintf("/db%d", back), FS: fs, Region: "r1", Partitions: 1, Clock: c, CacheBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		s := open(clk)
		if _, err := s.Apply(ctx, edgetest.Like("i", "a", "k", 1, t0)); err != nil {
			t.Fatal(err)
		}
		pipelinetest.CatchUp(t, pipelinetest.NewAggregators(t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: clk}))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The clock after the restart is at or before the committed watermark.
		s = open(clock.NewFake(clk.Now().Add(-back)))
		if _, err := s.Apply(ctx, edgetest.Like("i", "b", "k", 1, t0)); err != nil {
			t.Fatal(err)
		}
		(&pipelinetest.WatermarkChecker{Log: s, Cells: s}).Check(t, 0)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
