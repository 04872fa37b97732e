package replication

import (
	"fmt"
	"testing"
	"time"
)

func newMember(t *testing.T, region string) *Membership {
	t.Helper()
	m, err := NewMembership(MembershipConfig{
		Region:   region,
		GRPCAddr: "127.0.0.1:" + fmt.Sprint(7000+len(region)),
		HTTPAddr: "127.0.0.1:8080",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func regionsOf(ps []Peer) string {
	s := ""
	for _, p := range ps {
		s += p.Region + ","
	}
	return s
}

// Three members on loopback find each other through one seed, see each
// other's metadata, are told of changes, and see a member leave.
func TestMembershipLoopback(t *testing.T) {
	eu, us, ap := newMember(t, "eu"), newMember(t, "us"), newMember(t, "apac")
	for _, m := range []*Membership{us, ap} {
		if n, err := m.Join([]string{eu.Addr()}); err != nil || n != 1 {
			t.Fatalf("join: n=%d err=%v", n, err)
		}
	}
	want := map[*Membership]string{eu: "apac,us,", us: "apac,eu,", ap: "eu,us,"}
	eventually(t, "all members see each other", 20*time.Second, nil, func() bool {
		for m, w := range want {
			if regionsOf(m.Peers()) != w {
				return false
			}
		}
		return true
	})
	for _, p := range eu.Peers() {
		if p.Region == "us" && (p.GRPCAddr != us.Self().GRPCAddr || p.HTTPAddr != "127.0.0.1:8080") {
			t.Fatalf("meta not carried: %+v", p)
		}
	}
	if n := len(eu.Members()); n != 3 {
		t.Fatalf("members = %d", n)
	}
	select {
	case <-eu.Changes():
	default:
		t.Fatal("no change notification after joins")
	}

	if err := ap.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ap.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	eventually(t, "leave seen", 20*time.Second, nil, func() bool {
		return regionsOf(eu.Peers()) == "us," && regionsOf(us.Peers()) == "eu,"
	})
}

// A Shipper follows a Membership as its PeerSource.
func TestShipperFollowsMembership(t *testing.T) {
	sink := newFakeSink(parts)
	rcv := startReceiver(t, "", newServer(t, "us", parts, sink))
	euM, err := NewMembership(MembershipConfig{Region: "eu", GRPCAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = euM.Close() })
	usM, err := NewMembership(MembershipConfig{Region: "us", GRPCAddr: rcv.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = usM.Close() })

	src := newFakeSource("eu", parts)
	fill(src, 30, 5)
	newShipper(t, ShipperConfig{Region: "eu", Source: src, Transport: newTransport(t), Peers: euM, PollInterval: 2 * time.Millisecond})
	if _, err := usM.Join([]string{euM.Addr()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "shipped to the discovered peer", 20*time.Second, nil, converged(src, sink))
}

func TestMembershipConfigErrors(t *testing.T) {
	for _, c := range []MembershipConfig{
		{GRPCAddr: "x:1"},
		{Region: "eu"},
		{Region: "eu", GRPCAddr: "x:1", BindPort: 70000},
		{Region: "eu", GRPCAddr: string(make([]byte, 600))},
	} {
		if m, err := NewMembership(c); err == nil {
			_ = m.Close()
			t.Errorf("NewMembership(%+v) accepted", c)
		}
	}
}

// A gossip key rotation: a node that sends with the new key and still accepts
// the old one talks with a node at the previous step (old key first, new key
// accepted); a node with only the new key and one with only the old key do not.
func TestGossipKeyRotation(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	member := func(region string, key []byte, old ...[]byte) *Membership {
		m, err := NewMembership(MembershipConfig{Region: region, GRPCAddr: "127.0.0.1:1", BindAddr: "127.0.0.1", SecretKey: key, OldKeys: old})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	step1, step2 := member("us", k1, k2), member("eu", k2, k1)
	if n, err := step2.Join([]string{step1.Addr()}); err != nil || n != 1 {
		t.Fatalf("join across a rotation: n=%d err=%v", n, err)
	}
	eventually(t, "both see each other", 20*time.Second, nil, func() bool {
		return regionsOf(step1.Peers()) == "eu," && regionsOf(step2.Peers()) == "us,"
	})
	onlyNew, onlyOld := member("ap", k2), member("sa", k1)
	if n, err := onlyOld.Join([]string{onlyNew.Addr()}); err == nil && n > 0 {
		t.Fatalf("a node with only the old key joined one with only the new key")
	}
	if _, err := NewMembership(MembershipConfig{Region: "x", GRPCAddr: "127.0.0.1:1", OldKeys: [][]byte{k1}}); err == nil {
		t.Fatal("old keys without a key were accepted")
	}
}
