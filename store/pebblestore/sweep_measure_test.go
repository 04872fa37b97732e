package pebblestore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/store/pebblestore"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMeasureIdemSweep (LIKES_MEASURE=1, LIKES_SWEEP_RECORDS=N, default
// 500 000) measures the idempotency sweep against the write path that
// creates the records, in the same run: N likes (one record each) written
// through Apply by 64 workers, then, a day later, one sweep pass deleting
// them all in rounds of 4096 (the Retainer's default). The sweep keeps up
// with any write rate when its records per second (and CPU per record) are
// well beyond the write path's, since a pass's length follows the record
// count (RetainerConfig.IdemPass).
func TestMeasureIdemSweep(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 to measure")
	}
	n := 500_000
	if v := os.Getenv("LIKES_SWEEP_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(1_800_000_000_000))
	st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: vfs.NewMem(), Region: "r1", Partitions: 16, CacheBytes: 64 << 20, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start, cpu0 := time.Now(), cpuNow()
	var wg sync.WaitGroup
	const workers = 64
	now := clk.Now().UnixMilli()
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				req := edge.Request{Item: fmt.Sprintf("item%05d", i%50000), User: fmt.Sprintf("user%07d", i), Target: crdt.Liked,
					Kind: edge.KindFlip, Epoch: 1, IdemKey: fmt.Sprintf("key-%d", i), Fingerprint: fmt.Sprintf("%032x", i),
					Now: now, IdemTTLms: (24 * time.Hour).Milliseconds()}
				if _, err := st.Apply(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	write, writeCPU := time.Since(start), cpuNow()-cpu0
	if err := st.CompactAll(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(25 * time.Hour)
	r, err := pebblestore.NewManualRetainer(pebblestore.RetainerConfig{Store: st, Clock: clk, KeepLog: true, Retention: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start, cpu0 = time.Now(), cpuNow()
	rounds := 0
	for r.Stats().IdemDeleted < uint64(n) {
		if _, err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if rounds++; rounds > n {
			t.Fatal("the sweep never finished")
		}
	}
	sweep, sweepCPU := time.Since(start), cpuNow()-cpu0
	wr, sr := float64(n)/write.Seconds(), float64(n)/sweep.Seconds()
	t.Logf("records %d; write path: %.0f records/s, %.1f µs CPU per record; sweep: %.0f records/s, %.2f µs CPU per record, %d rounds",
		n, wr, float64(writeCPU.Microseconds())/float64(n), sr, float64(sweepCPU.Microseconds())/float64(n), rounds)
	t.Logf("sweep ÷ write path: throughput ×%.1f, CPU per record ×%.3f", sr/wr, float64(sweepCPU)/float64(writeCPU))
}
