package replication_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"sync"
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

// TestShipperSnapshotOverGRPC: the production path of a snapshot catch-up.
// A region whose log was truncated by retention ships to a peer that never
// received it (its cursor is below the truncation point), and to a peer that
// lost its data and rebuilds: over loopback gRPC, the real Shipper detects
// both, sends the snapshots and then the log, and each peer ends with the
// sender's edges and counts; over protocol 2 (the Snapshot method of
// likes.peer.v2) and, from a caller limited to protocol 1, over version 1.
func TestShipperSnapshotOverGRPC(t *testing.T) {
	for _, c := range []struct {
		max    int
		method string
	}{{0, "/likes.peer.v2.Replication/Snapshot"}, {1, "/likes.replication.v1.Replication/Snapshot"}} {
		t.Run(c.method, func(t *testing.T) { shipSnapshots(t, c.max, c.method) })
	}
}

func shipSnapshots(t *testing.T, maxProto int, method string) {
	ctx := context.Background()
	const parts, likes = 4, 300
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
		req := edgetest.Like(fmt.Sprintf("item-%d", i%7), fmt.Sprintf("user-%d", i), fmt.Sprintf("key-%d", i), 1, clk.Now().UnixMilli())
		if _, err := src.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	pipelinetest.CatchUp(t, aggs)
	clk.Advance(48 * time.Hour)
	for i := 0; i < 3; i++ { // the first round dates the outbox, the next truncate it
		if _, err := src.Retain(ctx, pebblestore.RetentionRound{Now: clk.Now(), Horizon: 24 * time.Hour, Log: true}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(25 * time.Hour)
	}
	if fl, _ := src.LogFloor(context.Background(), 0); fl == 0 {
		t.Fatal("the log was not truncated")
	}
	behind, rebuilding := open("us"), open("ap")
	if err := rebuilding.MarkRebuild([]string{"eu"}); err != nil {
		t.Fatal(err)
	}
	var peers []replication.Peer
	var calls methodCounter
	for _, dst := range []*pebblestore.Store{behind, rebuilding} {
		srv, err := replication.NewServer(replication.ServerConfig{Region: dst.Region(), Partitions: parts, Sink: dst})
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, replication.Peer{Region: dst.Region(), GRPCAddr: serveCounting(t, srv, &calls)})
	}
	tr, err := replication.NewGRPCTransport(replication.TransportConfig{MaxProtocol: maxProto})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	sh, err := replication.NewShipper(replication.ShipperConfig{Region: "eu", Source: src, Transport: tr,
		PollInterval: 5 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, AntiEntropy: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Close() })
	sh.SetPeers(peers)
	deadline := time.Now().Add(30 * time.Second)
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	for _, dst := range []*pebblestore.Store{behind, rebuilding} {
		for {
			done := true
			for i := 0; i < 7; i++ {
				item := fmt.Sprintf("item-%d", i)
				a, _ := src.Count(ctx, item)
				b, err := dst.Count(ctx, item)
				if err != nil || a != b {
					done = false
				}
			}
			if done && len(dst.Rebuilding()) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never caught up: %+v", dst.Region(), sh.Stats())
			}
			<-tk.C // poll the condition until the deadline
		}
		for i := 0; i < likes; i++ {
			item, user := fmt.Sprintf("item-%d", i%7), fmt.Sprintf("user-%d", i)
			a, _, _ := src.Edge(ctx, item, user)
			b, _, err := dst.Edge(ctx, item, user)
			if err != nil || a.Register() != b.Register() {
				t.Fatalf("%s: edge %s/%s %v, want %v (%v)", dst.Region(), item, user, b, a, err)
			}
		}
	}
	// The peer may have applied the mark a moment before the Shipper counts
	// the snapshot.
	for counted := false; !counted; {
		counted = true
		for _, st := range sh.Stats() {
			counted = counted && st.Snapshots >= 1
		}
		if !counted && time.Now().After(deadline) {
			break
		}
		if !counted {
			<-tk.C
		}
	}
	for _, st := range sh.Stats() {
		if st.Snapshots != 1 {
			t.Errorf("%s: %d snapshots, want 1 (%+v; calls %v)", st.Region, st.Snapshots, st, calls.snapshot())
		}
	}
	got := calls.snapshot()
	if len(got) != 1 || got[method] == 0 {
		t.Errorf("snapshot calls by method %v, want only %s", got, method)
	}
}

// methodCounter counts the Snapshot calls a server received, by method.
type methodCounter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *methodCounter) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasSuffix(info.FullMethod, "/Snapshot") {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]int{}
		}
		c.m[info.FullMethod]++
		c.mu.Unlock()
	}
	return h(ctx, req)
}

func (c *methodCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// serveCounting is serve with c counting the calls.
func serveCounting(t *testing.T, srv *replication.Server, c *methodCounter) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(replication.ServerOptions(), grpc.ChainUnaryInterceptor(c.intercept))...)
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}
