package replication

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/clock"
)

// samples gathers reg: metric name → label values joined → value.
func samples(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		m := map[string]float64{}
		for _, s := range mf.GetMetric() {
			key := ""
			for _, l := range s.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			m[key] = s.GetGauge().GetValue() + s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
		}
		out[mf.GetName()] = m
	}
	return out
}

// TestShipperCollectorLagInEventsAndSeconds: per peer, lag in events and in
// seconds (now − the watermark the peer acknowledged), counters of pushes.
func TestShipperCollectorLagInEventsAndSeconds(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := newFakeSource("eu", parts)
	sink := newFakeSink(parts)
	sh := newShipper(t, ShipperConfig{Region: "eu", Source: src, Transport: &directTransport{srv: newServer(t, "us", parts, sink)}, Clock: clk, AntiEntropy: -1})
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewShipperCollector(sh, clk))
	if got := samples(t, reg)["likes_replication_lag_seconds"]; len(got) != 0 {
		t.Fatalf("lag reported with no peer: %v", got)
	}
	sh.SetPeers([]Peer{{Region: "us", GRPCAddr: "inproc"}})
	fill(src, 20, 4)
	step := func() { clk.Advance(100 * time.Millisecond) }
	eventually(t, "caught up", 10*time.Second, step, caughtUp(sh, "us", src))
	clk.Advance(3 * time.Second) // the watermark stays where the peer acknowledged it
	got := samples(t, reg)
	wm := time.UnixMilli(src.watermark())
	if v := got["likes_replication_lag_seconds"]["peer=us,"]; v != clk.Now().Sub(wm).Seconds() {
		t.Errorf("lag seconds %v, want %v", v, clk.Now().Sub(wm).Seconds())
	}
	if v, ok := got["likes_replication_lag_events"]["peer=us,"]; !ok || v != 0 {
		t.Errorf("lag events %v (reported %v), want 0", v, ok)
	}
	if v := got["likes_replication_pushes_total"]["peer=us,"]; v < 1 {
		t.Errorf("pushes %v", v)
	}
	if v := got["likes_replication_peer_active"]["peer=us,"]; v != 1 {
		t.Errorf("peer active %v", v)
	}
}

// TestGRPCMetricsCountCallsByCode runs both interceptors around a fake call.
func TestGRPCMetricsCountCallsByCode(t *testing.T) {
	m := NewGRPCMetrics(clock.NewFake(time.Unix(0, 0)))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	srv := m.ServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/likes.Peer/Digest"}
	_, _ = srv(context.Background(), nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "bad")
	})
	cli := m.ClientInterceptor()
	fail := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return status.Error(codes.Unavailable, "down")
	}
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	_ = cli(context.Background(), "/likes.Peer/Push", nil, nil, nil, fail)
	_ = cli(context.Background(), "/likes.Peer/Push", nil, nil, nil, ok)
	_ = cli(context.Background(), "/likes.Peer/Push", nil, nil, nil, ok)
	got := samples(t, reg)
	if v := got["grpc_client_handled_total"]["grpc_code=OK,grpc_method=/likes.Peer/Push,"]; v != 2 {
		t.Errorf("OK calls %v, want 2 (%v)", v, got["grpc_client_handled_total"])
	}
	if v := got["grpc_client_handled_total"]["grpc_code=Unavailable,grpc_method=/likes.Peer/Push,"]; v != 1 {
		t.Errorf("Unavailable calls %v, want 1", v)
	}
	if v := got["grpc_client_handling_seconds"]["grpc_method=/likes.Peer/Push,"]; v != 3 {
		t.Errorf("timed calls %v, want 3", v)
	}
	if v := got["grpc_server_handled_total"]["grpc_code=InvalidArgument,grpc_method=/likes.Peer/Digest,"]; v != 1 {
		t.Errorf("server InvalidArgument calls %v, want 1 (%v)", v, got["grpc_server_handled_total"])
	}
}
