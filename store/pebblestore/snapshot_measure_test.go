package pebblestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestMeasureSnapshot (LIKES_MEASURE=1, LIKES_SNAPSHOT_EDGES=N, default
// 1 000 000) measures a snapshot of a store holding N liked edges (each with
// its idempotency record): the time to read it in chunks of 4096, its size as
// the version-1 wire encodes it (JSON), and the time to apply it to an empty
// store.
func TestMeasureSnapshot(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 to measure")
	}
	n := 1_000_000
	if v := os.Getenv("LIKES_SNAPSHOT_EDGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	open := func(region string) *pebblestore.Store {
		st, err := pebblestore.Open(pebblestore.Options{Dir: "/db", FS: vfs.NewMem(), Region: region, Partitions: 16, CacheBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	src, dst := open("r1"), open("r2")
	start := time.Now()
	var wg sync.WaitGroup
	const workers = 64
	now := time.Now().UnixMilli()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				req := edge.Request{Item: fmt.Sprintf("item%05d", i%50000), User: fmt.Sprintf("user%07d", i), Target: crdt.Liked,
					Kind: edge.KindFlip, Epoch: 1, IdemKey: fmt.Sprintf("key-%d", i), Fingerprint: fmt.Sprintf("%032x", i),
					Now: now, IdemTTLms: (24 * time.Hour).Milliseconds()}
				if _, err := src.Apply(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	load := time.Since(start)
	start = time.Now()
	rd, err := src.OpenSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var read, apply time.Duration
	var bytes, entries, chunks int
	for more := true; more; {
		t0 := time.Now()
		c, m, err := rd.Next(ctx, 4096)
		if err != nil {
			t.Fatal(err)
		}
		read += time.Since(t0)
		more = m
		b, _ := json.Marshal(c)
		bytes += len(b)
		entries += c.Len()
		chunks++
		t0 = time.Now()
		if err := dst.ApplySnapshot(ctx, "r1", c); err != nil {
			t.Fatal(err)
		}
		apply += time.Since(t0)
	}
	if err := dst.FinishSnapshot(ctx, "r1", rd.Mark()); err != nil {
		t.Fatal(err)
	}
	_ = rd.Close()
	t.Logf("\n%d edges (+%d records): loaded in %v; snapshot: %d entries in %d chunks, read %v, %d bytes as v1 JSON (%.1f per entry), applied in %v; total %v",
		n, n, load.Round(time.Millisecond), entries, chunks, read.Round(time.Millisecond), bytes, float64(bytes)/float64(entries),
		apply.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
