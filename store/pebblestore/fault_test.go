package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

// diskFault is an errorfs injector switched on and off by the test.
type diskFault struct {
	kind atomic.Int32 // faultNone…
	hits atomic.Int64
}

const (
	faultNone    = iota
	faultENOSPC  // every file write fails: a full disk
	faultSync    // every fsync fails: an I/O error at sync
	faultSSTable // creating an sstable fails: flushes and compactions fail
)

func (d *diskFault) String() string { return "diskFault" }

func (d *diskFault) MaybeError(op errorfs.Op) error {
	var err error
	switch d.kind.Load() {
	case faultENOSPC:
		if op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt || op.Kind == errorfs.OpFilePreallocate {
			err = syscall.ENOSPC
		}
	case faultSync:
		if op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo {
			err = syscall.EIO
		}
	case faultSSTable:
		if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") {
			err = syscall.ENOSPC
		}
	}
	if err != nil {
		d.hits.Add(1)
	}
	return err
}

type faultWorld struct {
	t     *testing.T
	mem   *vfs.MemFS
	fault *diskFault
	clk   *clock.Fake
	s     *pebblestore.Store
	n     int
	acked map[[2]string]bool // (item, user) liked and acknowledged
	tried map[[2]string]bool // every like tried, acknowledged or not
}

func newFaultWorld(t *testing.T) *faultWorld {
	w := &faultWorld{
		t: t, mem: vfs.NewCrashableMem(), fault: &diskFault{}, clk: clock.NewFake(time.UnixMilli(t0)),
		acked: map[[2]string]bool{}, tried: map[[2]string]bool{},
	}
	s, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: errorfs.Wrap(w.mem, w.fault), Region: "r1", Partitions: 4, Clock: w.clk, CacheBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.s = s
	t.Cleanup(func() { _ = s.Close() })
	return w
}

// likes applies n likes of distinct edges concurrently and returns how many
// were acknowledged and the slowest answer.
func (w *faultWorld) likes(n int) (ok int, errs []error, slowest time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		w.n++
		item, user := fmt.Sprintf("i%d", w.n%3), fmt.Sprintf("u%d", w.n)
		k := [2]string{item, user}
		w.tried[k] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := w.s.Apply(ctx, edgetest.Like(item, user, "k-"+user, 1, w.clk.Now().UnixMilli()))
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			slowest = max(slowest, d)
			if err == nil {
				ok++
				w.acked[k] = true
			} else {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return ok, errs, slowest
}

// waitHealth polls the store (running its monitor round) until writable is as
// wanted.
func (w *faultWorld) waitHealth(writable bool) pebblestore.Health {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 20000; i++ {
		// Recovery needs monitor rounds (a probe once no fault was seen for a
		// check interval); a fault is noticed by itself, and moving the clock
		// while waiting for it would let a probe clear it between two looks.
		if writable {
			w.clk.Advance(600 * time.Millisecond)
			w.s.CheckHealth()
		}
		if h := w.s.Health(); h.Writable == writable {
			return h
		}
		if time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	w.t.Fatalf("store never became writable=%v: %+v", writable, w.s.Health())
	return pebblestore.Health{}
}

// verify checks the store against the acknowledged likes: each is LIKED, the
// aggregators fold the log into counts equal to the LIKED edges, on the live
// store and on what a power cut now would leave.
func (w *faultWorld) verify(s *pebblestore.Store, what string) {
	w.t.Helper()
	ctx := context.Background()
	liked := map[string]int64{}
	for k := range w.tried {
		e, found, err := s.Edge(ctx, k[0], k[1])
		if err != nil {
			w.t.Fatalf("%s: Edge: %v", what, err)
		}
		if w.acked[k] && (!found || e.State != crdt.Liked) {
			w.t.Fatalf("%s: acknowledged like %v is lost (found=%v state=%v)", what, k, found, e.State)
		}
		if found && e.State == crdt.Liked {
			liked[k[0]]++
		}
	}
	pipelinetest.CatchUp(w.t, pipelinetest.NewAggregators(w.t, pipeline.Config{Region: "r1", Log: s, Cells: s, Clock: w.clk, MaxEvents: 50}))
	for _, item := range []string{"i0", "i1", "i2"} {
		n, err := s.Count(ctx, item)
		if err != nil {
			w.t.Fatalf("%s: Count: %v", what, err)
		}
		if n != liked[item] {
			w.t.Fatalf("%s: item %s counts %d, %d LIKED edges", what, item, n, liked[item])
		}
	}
}

func (w *faultWorld) verifyCrashClone() {
	w.t.Helper()
	clone := w.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: clone, Region: "r1", Partitions: 4, Clock: w.clk, CacheBytes: 1 << 20})
	if err != nil {
		w.t.Fatal(err)
	}
	defer s.Close()
	w.verify(s, "after a power cut")
}

// TestStorageFaults injects, on Pebble's error-injecting filesystem, a full
// disk under the WAL, a failing fsync, and failing sstable writes (flushes and
// compactions). For each: writes are refused at once with
// edge.ErrStorageUnavailable and the store reports why; reads keep serving;
// nothing is acknowledged that is not durable (a power cut's crash clone keeps
// every acknowledged like); when the fault clears the store writes again by
// itself; counts equal the LIKED edges.
func TestStorageFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind int32
	}{{"wal-enospc", faultENOSPC}, {"fsync-error", faultSync}, {"flush-error", faultSSTable}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFaultWorld(t)
			if ok, errs, _ := w.likes(20); ok != 20 {
				t.Fatalf("before the fault: %d of 20 acknowledged: %v", ok, errs)
			}
			w.fault.kind.Store(tc.kind)
			if tc.kind == faultSSTable {
				// A flush is what meets the fault: ask for one and wait until
				// the store notices it failed.
				if _, err := w.s.DB().AsyncFlush(); err != nil {
					t.Fatal(err)
				}
				w.waitHealth(false)
			}
			ok, errs, slowest := w.likes(40)
			h := w.s.Health()
			t.Logf("%s: %d acknowledged, %d refused, slowest answer %v, health %+v", tc.name, ok, len(errs), slowest, h)
			if len(errs) == 0 || h.Writable {
				t.Fatalf("the fault refused nothing: %d acknowledged, health %+v (fault hits %d)", ok, h, w.fault.hits.Load())
			}
			for _, err := range errs {
				if !errors.Is(err, edge.ErrStorageUnavailable) {
					t.Fatalf("a refused write's error is not edge.ErrStorageUnavailable: %v", err)
				}
			}
			if slowest > 5*time.Second {
				t.Fatalf("writes were not refused fast: slowest %v", slowest)
			}
			// Refused at once now, and reads serve.
			start := time.Now()
			if _, err := w.s.Apply(context.Background(), edgetest.Like("i0", "late", "k-late", 1, w.clk.Now().UnixMilli())); !errors.Is(err, edge.ErrStorageUnavailable) {
				t.Fatalf("a write during the fault: %v", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("refusing a write took %v", d)
			}
			for k := range w.acked {
				if e, found, err := w.s.Edge(context.Background(), k[0], k[1]); err != nil || !found || e.State != crdt.Liked {
					t.Fatalf("read during the fault: %v %v %v", e, found, err)
				}
				break
			}
			if tc.kind != faultSSTable {
				// Still failing: a monitor round must not reopen onto a disk
				// that cannot write.
				w.clk.Advance(time.Second)
				w.s.CheckHealth()
				if w.s.Health().Writable {
					t.Fatal("the store took writes again while the fault persisted")
				}
			}
			w.verifyCrashClone()
			// Watermarks handed out during the fault (the clock moves on) must
			// not claim a refused group that later turns out durable.
			w.clk.Advance(time.Second)
			type issued struct {
				pos      uint64
				complete int64
			}
			var during []issued
			for p := range uint32(4) {
				_, h, err := w.s.Read(context.Background(), p, 0, 0)
				if err != nil && !errors.Is(err, edge.ErrStorageUnavailable) {
					t.Fatal(err)
				}
				during = append(during, issued{h.Pos, h.CompleteThrough})
			}

			w.fault.kind.Store(faultNone)
			w.waitHealth(true)
			for p, h := range during {
				evs, _, err := w.s.Read(context.Background(), uint32(p), h.pos, 10000)
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs {
					if ev.EventTime <= h.complete {
						t.Fatalf("partition %d: event %d (time %d) appeared after CompleteThrough %d was handed out at head %d", p, ev.Pos, ev.EventTime, h.complete, h.pos)
					}
				}
			}
			// A flush or compaction that failed while the fault was on may
			// report its error after the store already recovered (Pebble
			// calls its listener when the job ends, and retries jobs): the
			// store refuses again until its next success or probe, and
			// recovers by itself. Each round waits for that, bounded.
			for round := 1; ; round++ {
				ok, errs, _ := w.likes(20)
				if ok == 20 {
					break
				}
				if round == 5 || tc.kind != faultSSTable {
					t.Fatalf("after recovery (round %d): %d of 20 acknowledged: %v", round, ok, errs[:min(len(errs), 3)])
				}
				t.Logf("after recovery, round %d: %d of 20 acknowledged (a late background error: %v)", round, ok, errs[0])
				w.waitHealth(true)
			}
			w.verify(w.s, "live store after recovery")
			w.verifyCrashClone()
			if h := w.s.Health(); h.Faults == 0 {
				t.Fatalf("no fault counted: %+v", h)
			}
		})
	}
}

// TestLowDiskWatermark: below the free-space watermark writes are refused at
// once (before Pebble could meet ENOSPC), reads serve, and writes resume when
// space returns above the watermark plus its margin.
func TestLowDiskWatermark(t *testing.T) {
	var free atomic.Uint64
	free.Store(100 << 20)
	clk := clock.NewFake(time.UnixMilli(t0))
	s, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: vfs.NewMem(), Region: "r1", Partitions: 2, Clock: clk, CacheBytes: 1 << 20,
		MinFreeFraction: 0.05, MinFreeBytes: 1 << 20,
		FreeSpace: func() (uint64, uint64, error) { return free.Load(), 1000 << 20, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Apply(ctx, edgetest.Like("i", "a", "k1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	free.Store(49 << 20) // below 5% of 1000 MiB
	s.CheckHealth()
	h := s.Health()
	if h.Writable || h.MinFreeBytes != 50<<20 || !strings.Contains(h.Reason, "free disk space") {
		t.Fatalf("health below the watermark: %+v", h)
	}
	if _, err := s.Apply(ctx, edgetest.Like("i", "b", "k2", 1, t0)); !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("write below the watermark: %v", err)
	}
	if e, ok, err := s.Edge(ctx, "i", "a"); err != nil || !ok || e.State != crdt.Liked {
		t.Fatalf("read below the watermark: %v %v %v", e, ok, err)
	}
	free.Store(52 << 20) // above the watermark but inside its margin: still refused
	s.CheckHealth()
	if s.Health().Writable {
		t.Fatal("writes resumed inside the watermark's margin")
	}
	free.Store(60 << 20)
	s.CheckHealth()
	if h := s.Health(); !h.Writable || h.Faults != 1 {
		t.Fatalf("health after space returned: %+v", h)
	}
	if _, err := s.Apply(ctx, edgetest.Like("i", "b", "k2", 1, t0)); err != nil {
		t.Fatal(err)
	}
}

func TestParseMinFree(t *testing.T) {
	for _, tc := range []struct {
		in    string
		bytes uint64
		frac  float64
		bad   bool
	}{
		{"3%", 0, 0.03, false}, {"64MiB", 64 << 20, 0, false}, {"3%,64MiB", 64 << 20, 0.03, false},
		{"0", 0, 0, false}, {"1048576", 1 << 20, 0, false}, {"2GiB", 2 << 30, 0, false},
		{"100%", 0, 0, true}, {"-1%", 0, 0, true}, {"lots", 0, 0, true}, {"", 0, 0, true}, {"5MB", 0, 0, true},
	} {
		b, f, err := pebblestore.ParseMinFree(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (b != tc.bytes || f != tc.frac)) {
			t.Errorf("ParseMinFree(%q) = %d, %v, %v", tc.in, b, f, err)
		}
		if err != nil && !errors.Is(err, pebblestore.ErrBadMinFree) {
			t.Errorf("ParseMinFree(%q): %v is not ErrBadMinFree", tc.in, err)
		}
	}
}
