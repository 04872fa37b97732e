package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestMeasureBackupRestore (LIKES_MEASURE=1, LIKES_BACKUP_EDGES=N, default
// 200 000) times likectl backup and restore of one region folder on disk
// holding N liked edges with their idempotency records.
func TestMeasureBackupRestore(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 to measure")
	}
	n := 200_000
	if v := os.Getenv("LIKES_BACKUP_EDGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	data, out, data2 := t.TempDir(), filepath.Join(t.TempDir(), "bk"), t.TempDir()
	st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(data, "us"), Region: "us", Partitions: 16})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				if _, err := st.Apply(ctx, edgetest.Like(fmt.Sprintf("item-%d", i%10000), fmt.Sprintf("user-%d", i), fmt.Sprintf("key-%d", i), 1, 1)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	du, _ := st.DiskUsage()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var o bytes.Buffer
	start := time.Now()
	if err := run(ctx, []string{"backup", "--data", data, "--regions", "us", "--out", out, "--etcd-snapshot=false"}, &o, &o); err != nil {
		t.Fatalf("%v\n%s", err, o.String())
	}
	bk := time.Since(start)
	start = time.Now()
	if err := run(ctx, []string{"restore", "--from", out, "--data", data2, "--region", "us", "--peers", "eu"}, &o, &o); err != nil {
		t.Fatalf("%v\n%s", err, o.String())
	}
	rs := time.Since(start)
	t.Logf("\n%d edges (+records), %d bytes on disk (%d in sstables): backup %v, restore (copy, fold the log, mark the rebuild) %v",
		n, du.Total, du.Tables, bk.Round(time.Millisecond), rs.Round(time.Millisecond))
}
