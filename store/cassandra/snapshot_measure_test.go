package cassandra_test

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
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestMeasureSnapshotCassandra (LIKES_MEASURE=1, LIKES_SNAPSHOT_EDGES=N,
// default 20 000; the servers of scripts/servers.sh env) measures a snapshot
// of a Cassandra region holding N liked edges, each with its idempotency
// record: reading it in chunks of 4 096, and applying it to an empty
// Cassandra store and to an empty embedded one; the same N from an embedded
// store to an embedded one is the reference, in the same run.
func TestMeasureSnapshotCassandra(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 (and the servers of scripts/servers.sh env) to measure")
	}
	n := 20_000
	if v := os.Getenv("LIKES_SNAPSHOT_EDGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("LIKES_SNAPSHOT_EDGES=%q", v)
		}
	}
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	pebble := func(region string) snapStore {
		st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: vfs.NewMem(), Region: region, Partitions: 16, Clock: clk, CacheBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	cass := func(region string) snapStore { return newRetFixture(t, region, 16).st }
	load := func(st snapStore) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		const workers = 32
		now := clk.Now().UnixMilli()
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					req := edge.Request{Item: fmt.Sprintf("item%05d", i%5000), User: fmt.Sprintf("user%07d", i), Target: crdt.Liked,
						Kind: edge.KindFlip, Epoch: 1, IdemKey: fmt.Sprintf("key-%d", i), Fingerprint: fmt.Sprintf("%032x", i),
						Now: now, IdemTTLms: day.Milliseconds()}
					if _, err := st.Apply(ctx, req); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	type result struct {
		name             string
		entries, chunks  int
		read, apply      time.Duration
		cpuRead, cpuAppl time.Duration // this process's CPU
	}
	transfer := func(name string, src, dst snapStore) result {
		r := result{name: name}
		rd, err := src.OpenSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		for more := true; more; {
			t0, c1 := time.Now(), cpu()
			var c replica.SnapshotChunk
			if c, more, err = rd.Next(ctx, 4096); err != nil {
				t.Fatal(err)
			}
			r.read += time.Since(t0)
			r.cpuRead += cpu() - c1
			r.entries += c.Len()
			r.chunks++
			t0, c1 = time.Now(), cpu()
			if err := dst.ApplySnapshot(ctx, "r1", c); err != nil {
				t.Fatal(err)
			}
			r.apply += time.Since(t0)
			r.cpuAppl += cpu() - c1
		}
		if err := dst.FinishSnapshot(ctx, "r1", rd.Mark()); err != nil {
			t.Fatal(err)
		}
		return r
	}
	pSrc, cSrc := pebble("r1"), cass("r1")
	pLoad, cLoad := load(pSrc), load(cSrc)
	t.Logf("loaded %d edges: embedded %v, Cassandra %v", n, pLoad.Round(time.Millisecond), cLoad.Round(time.Millisecond))
	results := []result{
		transfer("embedded → embedded (reference)", pSrc, pebble("r2")),
		transfer("Cassandra → embedded", cSrc, pebble("r2")),
		transfer("Cassandra → Cassandra", cSrc, cass("r2")),
		transfer("embedded → Cassandra", pSrc, cass("r2")),
	}
	ref := results[0]
	for _, r := range results {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(r.entries) }
		t.Logf("%-32s %d entries in %d chunks: read %v (%.1f µs/entry, CPU %.1f µs), apply %v (%.1f µs/entry, CPU %.1f µs); read ×%.1f, apply ×%.1f the reference",
			r.name, r.entries, r.chunks, r.read.Round(time.Millisecond), per(r.read), per(r.cpuRead), r.apply.Round(time.Millisecond),
			per(r.apply), per(r.cpuAppl), r.read.Seconds()/ref.read.Seconds(), r.apply.Seconds()/ref.apply.Seconds())
	}
}

// cpu is this process's user + system CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
