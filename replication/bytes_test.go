package replication_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestReplicationBytesPerLike (issue 11) ships the log and cells of 2 000
// likes (distinct users, 200 items, UUID-sized idempotency keys, folded by the
// real aggregators) from a Pebble store to another over loopback gRPC with
// the real Sender, Server and transport, once per protocol version, and
// reports the encoded bytes per like event sent to that one peer. Version 2
// must stay within 150 bytes.
func TestReplicationBytesPerLike(t *testing.T) {
	ctx := context.Background()
	const likes, items, parts = 2000, 200, 4
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	open := func(region string) *pebblestore.Store {
		st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(t.TempDir(), region), Region: region, Partitions: parts, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	src := open("eu")
	aggs := pipelinetest.NewAggregators(t, pipeline.Config{Region: "eu", Log: src, Cells: src, Clock: clk, Window: time.Millisecond})
	for i := range likes {
		clk.Advance(time.Millisecond)
		key := fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", i, i%65536, i%4096, i%4096, i)
		req := edgetest.Like(fmt.Sprintf("item-%d", i%items), fmt.Sprintf("user-%d", i), key, 1, clk.Now().UnixMilli())
		if _, err := src.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 { // a window of the aggregators every 100 likes
			pipelinetest.CatchUp(t, aggs)
		}
	}
	perLike := map[int]float64{}
	for _, v := range []int{1, 2} {
		dst := open(fmt.Sprintf("us%d", v))
		srv, err := replication.NewServer(replication.ServerConfig{Region: "us", Partitions: parts, Sink: dst})
		if err != nil {
			t.Fatal(err)
		}
		addr := serve(t, srv)
		tr, err := replication.NewGRPCTransport(replication.TransportConfig{MaxProtocol: v})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		peer := replication.Peer{Region: "us", GRPCAddr: addr}
		snd := replication.NewSender("eu", 4096, 4096)
		for i := 0; ; i++ {
			b, send, _, err := snd.Next(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			if !send || i > 1000 {
				break
			}
			cur, err := tr.Push(ctx, peer, b)
			if err != nil {
				t.Fatalf("v%d push: %v", v, err)
			}
			snd.Acked(b, cur)
		}
		if st := snd.State(); st.EventsShipped != likes || st.LagEvents != 0 {
			t.Fatalf("v%d shipped %d events (lag %d), want %d", v, st.EventsShipped, st.LagEvents, likes)
		}
		perLike[v] = float64(tr.BytesSent(addr)) / likes
	}
	t.Logf("replication bytes per like event to one peer: v1 %.1f, v2 %.1f (v2/v1 = %.2f)", perLike[1], perLike[2], perLike[2]/perLike[1])
	if perLike[2] > 150 {
		t.Errorf("protocol 2 sends %.1f bytes per like, want at most 150", perLike[2])
	}
}

// serve runs srv on a loopback gRPC server until the test ends.
func serve(t *testing.T, srv *replication.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(replication.ServerOptions()...)
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}
