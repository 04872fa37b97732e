package replication

import (
	"net"
	"strconv"
	"testing"
)

// freePort is a TCP port free on loopback a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestMembershipAdvertise: a node tells others the advertised address and
// port, not its bind address (a region bound to every interface advertises
// one its peers can dial); an out-of-range port is refused.
func TestMembershipAdvertise(t *testing.T) {
	bind := freePort(t)
	m, err := NewMembership(MembershipConfig{Region: "us", GRPCAddr: "us.example:9080", BindAddr: "127.0.0.1", BindPort: bind,
		AdvertiseAddr: "127.0.0.1", AdvertisePort: 17946})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, want := m.Addr(), "127.0.0.1:17946"; got != want {
		t.Fatalf("Addr = %s, want the advertised %s (bound to port %d)", got, want, bind)
	}
	if m.Self().GRPCAddr != "us.example:9080" {
		t.Fatalf("gossiped gRPC address %q", m.Self().GRPCAddr)
	}
	if _, err := NewMembership(MembershipConfig{Region: "us", GRPCAddr: "x:1", AdvertisePort: 70000}); err == nil {
		t.Fatal("AdvertisePort 70000 accepted")
	}
	m2, err := NewMembership(MembershipConfig{Region: "eu", GRPCAddr: "x:1", BindPort: freePort(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if _, p, _ := net.SplitHostPort(m2.Addr()); p == "" || p == "0" || p == strconv.Itoa(17946) {
		t.Fatalf("default advertise port %q, want the bind port", p)
	}
}
