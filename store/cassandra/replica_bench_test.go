package cassandra_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
)

// BenchmarkApplyRemoteParts applies pushes of 64 new likes (distinct users,
// each with its idempotency record) from another region: the cost of
// Cassandra as a replica (one op = one push; divide by 64 for an event).
func BenchmarkApplyRemoteParts(b *testing.B) {
	st := openRegionB(b, "eu")
	ctx := context.Background()
	pos := make([]uint64, st.Partitions())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		parts := make([]replica.RemotePart, st.Partitions())
		for k := 0; k < 64; k++ {
			u := fmt.Sprintf("u%d-%d", i, k)
			item := fmt.Sprintf("i%d", k%10)
			bk := edge.BucketOf(u)
			p := edge.PartitionOf(item, bk, st.Partitions())
			pos[p]++
			parts[p].Partition = p
			parts[p].Events = append(parts[p].Events, edge.Event{Partition: p, Pos: pos[p], Kind: edge.KindFlip, Delta: 1, Bucket: bk,
				Item: item, User: u, State: crdt.Liked, Version: crdt.Version{Epoch: 1, Op: 1}, EventTime: t0,
				Idem: &edge.IdemRef{Key: "k", Fingerprint: "f", ExpiresAt: t0 + 3600_000, Liked: true, Changed: true}})
			parts[p].Through = pos[p]
		}
		var run []replica.RemotePart
		for _, p := range parts {
			if len(p.Events) > 0 {
				run = append(run, p)
			}
		}
		if err := st.ApplyRemoteParts(ctx, "us", run); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "events/s")
}
