package pebblestore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/store/pebblestore"
)

// BenchmarkApplyParallel measures group-committed likes on disk (each Apply
// waits for its fsync) with many writers at once: the write path's cost,
// including the storage-fault admission check.
func BenchmarkApplyParallel(b *testing.B) {
	s, err := pebblestore.Open(pebblestore.Options{Dir: b.TempDir(), Region: "r1", Partitions: 16, Clock: clock.Real{}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			u := fmt.Sprintf("u%d", i)
			if _, err := s.Apply(context.Background(), edgetest.Like(fmt.Sprintf("i%d", i%100), u, "k"+u, 1, time.Now().UnixMilli())); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
