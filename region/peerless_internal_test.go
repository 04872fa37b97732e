package region

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// A region that replicates with nobody (the production engines) takes only
// its write authority from etcd: lease, pins, epochs; no gRPC, gossip or
// shipper. A Cluster naming other regions is refused for it.
func TestPeerlessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	ecfg := epochtest.Config(t, 8)

	if _, err := startCluster(ctx, "us", &Cluster{Etcd: cli, Epoch: ecfg, Regions: []string{"us", "eu"}}, nil, clock.Real{}, log); err == nil ||
		!strings.Contains(err.Error(), "only a region on the embedded store replicates") {
		t.Fatalf("a peer for a region without replication: %v", err)
	}
	if !(&Cluster{Regions: []string{"us"}}).Peerless("us") || (&Cluster{Seeds: []string{"x:1"}}).Peerless("us") ||
		(&Cluster{Regions: []string{"eu"}}).Peerless("us") {
		t.Fatal("Peerless")
	}

	p, err := startCluster(ctx, "us", &Cluster{Etcd: cli, Epoch: ecfg, Regions: []string{"us"}}, nil, clock.Real{}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if p.grpcSrv != nil || p.member != nil || p.shipperRef.Load() != nil || p.forwarder != nil || len(p.singletons)+len(p.direct) != 0 || p.shipperStats() != nil {
		t.Fatal("a peerless region started replication parts")
	}
	p.serve(nil) // nothing to serve; must not start anything
	var ep uint64
	epochtest.Eventually(t, 10*time.Second, "the region to hold its pins", func() bool {
		ep, err = p.authority.Authorize(ctx, "alice")
		return err == nil
	})
	if ep != 1 {
		t.Fatalf("epoch %d, want 1", ep)
	}
	if _, self, err := p.home("alice"); !self || err != nil {
		t.Fatalf("home = %v, %v; want this region", self, err)
	}
}
