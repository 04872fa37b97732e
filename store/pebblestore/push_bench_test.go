package pebblestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/pebblestore"
)

// perPartition hides ApplyRemoteParts, so the server applies a push one
// partition (one durable commit) at a time: the reference.
type perPartition struct{ *pebblestore.Store }

func (p perPartition) ApplyRemote(ctx context.Context, from string, part uint32, evs []edge.Event, through uint64) error {
	return p.Store.ApplyRemote(ctx, from, part, evs, through)
}

// BenchmarkPush applies pushes of 16 partitions × 8 events on disk (synced
// commits), through the replication server, with and without PartsSink.
// Compare the two ns/op figures of one run.
func BenchmarkPush(b *testing.B) {
	for _, mode := range []string{"one-commit-per-push", "one-commit-per-partition"} {
		b.Run(mode, func(b *testing.B) {
			st, err := pebblestore.Open(pebblestore.Options{Dir: b.TempDir(), Region: "eu", Partitions: 16, Clock: clock.Real{}})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = st.Close() }()
			var sink replication.Sink = st
			if mode == "one-commit-per-partition" {
				sink = perPartition{st}
			}
			srv, err := replication.NewServer(replication.ServerConfig{Region: "eu", Partitions: 16, Sink: sink})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			pos := make([]uint64, 16)
			// Events must be valid where the server validates them: the
			// user's bucket, and an item of the event's partition.
			bucket := edge.BucketOf("u")
			next := make([]int, 16)
			item := func(p uint32) string {
				for {
					next[p]++
					it := fmt.Sprintf("i%d-%d", p, next[p])
					if edge.PartitionOf(it, bucket, 16) == p {
						return it
					}
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch := replication.Batch{From: "us", Partitions: 16}
				for p := range uint32(16) {
					pb := replication.PartBatch{Partition: p, After: pos[p]}
					for range 8 {
						pos[p]++
						pb.Events = append(pb.Events, edge.Event{Partition: p, Pos: pos[p], Kind: edge.KindFlip, Delta: 1, Bucket: bucket,
							Item: item(p), User: "u", State: crdt.Liked, Version: crdt.Version{Epoch: 1, Op: 1}, EventTime: 1_800_000_000_000})
					}
					pb.Through = pos[p]
					batch.Parts = append(batch.Parts, pb)
				}
				if _, err := srv.Push(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
