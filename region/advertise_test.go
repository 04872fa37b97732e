package region_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/region"
)

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestAdvertisedAddresses: a region registers in etcd, and gossips, the
// advertised gRPC and HTTP addresses rather than its listeners' (a region
// bound to every interface tells its peers one they can dial), and its
// memberlist advertises the advertised gossip address, a name resolved once.
func TestAdvertisedAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ecfg := epochtest.Config(t, 8)
	bind, adv := freeLoopbackPort(t), freeLoopbackPort(t)
	cfg := config(t.TempDir())
	cfg.Cluster = &region.Cluster{
		Etcd: cli, Epoch: ecfg, Regions: []string{"us", "eu"},
		GRPCListen: "127.0.0.1:0", GRPCAdvertise: "us.peers.example:9080",
		HTTPAdvertise: "https://us.likes.example",
		GossipBind:    "127.0.0.1", GossipPort: bind, GossipAdvertise: "localhost:" + strconv.Itoa(adv),
	}
	r, err := region.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	dir, err := etcdepoch.NewDirectory(cli, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := dir.Regions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 1 || regs[0].GRPC != "us.peers.example:9080" || regs[0].HTTP != "https://us.likes.example" {
		t.Fatalf("registered %+v, want the advertised gRPC and HTTP addresses", regs)
	}
	if h, p, err := net.SplitHostPort(r.GossipAddr()); err != nil || p != strconv.Itoa(adv) || !net.ParseIP(h).IsLoopback() {
		t.Fatalf("gossip address %q (%v), want localhost resolved, port %d (bound to %d)", r.GossipAddr(), err, adv, bind)
	}
	if _, p, _ := net.SplitHostPort(r.GRPCAddr()); p == "9080" || p == "0" {
		t.Fatalf("the gRPC listener %s should be the listen address, not the advertised one", r.GRPCAddr())
	}

	cfg2 := config(t.TempDir())
	cfg2.Name = "eu"
	cfg2.Cluster = &region.Cluster{Etcd: cli, Epoch: ecfg, Regions: []string{"us", "eu"}, GossipAdvertise: "no-port"}
	if r2, err := region.Open(context.Background(), cfg2); err == nil {
		_ = r2.Close()
		t.Fatal("a GossipAdvertise without a port was accepted")
	}
}
