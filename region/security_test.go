package region_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/internal/peertls"
	"github.com/likes-dev/likes/internal/rpcjson"
	"github.com/likes-dev/likes/replication"
)

// TestHostilePeers attacks us's region-to-region plane as someone on the
// network would, with the project's own exported client types: without
// credentials, with credentials of another CA, and as a real region lying
// about what it is or what it sends. Every attempt is refused, and nothing is
// stored: the item's count, the user's edge and us's cursors are unchanged.
func TestHostilePeers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions and etcd")
	}
	c := startTri(t)
	us := c.byName["us"]
	addr := us.r.GRPCAddr()
	ps := c.mustPins(t)
	var victim string
	for _, u := range triUsers(1) {
		if triOwner(ps, u).Region == "us" {
			victim = u
			break
		}
	}
	if r := c.set(us, victim, "target", "k-victim", true); r.code != http.StatusOK {
		t.Fatalf("victim's like: %v", r)
	}
	c.waitCounts(t, map[string]int64{"target": 1}, 20*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	usPeer := replication.Peer{Region: "us", GRPCAddr: addr}
	forged := forgedBatch("ap")
	push := func(creds func(string) credentials.TransportCredentials, b replication.Batch) error {
		tr, err := replication.NewGRPCTransport(replication.TransportConfig{Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		_, err = tr.Push(cctx, usPeer, b)
		return err
	}
	otherIDs, err := peertls.EnsureDev(filepath.Join(t.TempDir(), "other-ca"), []string{"ap"})
	if err != nil {
		t.Fatal(err)
	}
	noCert := func(string) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	}
	// Another CA's certificate, from a client that trusts any server: the
	// refusal must be us's own.
	otherCA := func(string) credentials.TransportCredentials {
		cfg := otherIDs["ap"].ClientConfig("us")
		cfg.VerifyConnection = nil
		return credentials.NewTLS(cfg)
	}
	eu := c.ids["eu"]
	attacks := []struct {
		name  string
		err   error
		codes []codes.Code
	}{
		{"plaintext client", push(nil, forged), []codes.Code{codes.Unavailable}},
		{"TLS client without a certificate", push(noCert, forged), []codes.Code{codes.Unavailable}},
		{"certificate of another CA", push(otherCA, forged), []codes.Code{codes.Unavailable}},
		{"server of another CA", push(otherIDs["ap"].ClientCredentials, forged), []codes.Code{codes.Unavailable}},
		{"eu's certificate pushing as ap", push(eu.ClientCredentials, forged), []codes.Code{codes.PermissionDenied}},
		{"eu pushing a cell of ap", push(eu.ClientCredentials, withFrom(forged, "eu", true)), []codes.Code{codes.InvalidArgument}},
		{"eu pushing a cursor past its events", push(eu.ClientCredentials, pastThrough("eu")), []codes.Code{codes.InvalidArgument}},
		{"eu pushing an edge at epoch 2^63", push(eu.ClientCredentials, farEpoch("eu", victim)), []codes.Code{codes.Unavailable}},
		// Raw protocol-2 forwarding messages no Forwarder would build.
		{"eu forwarding kind 300 over protocol 2", forwardV2(t, ctx, addr, eu.ClientCredentials("us"),
			&peerpb.ForwardRequest{Protocol: 2, From: "eu", Item: "target", User: victim, Target: 1, Kind: 300, IdemKey: "k"}), []codes.Code{codes.InvalidArgument}},
		{"eu forwarding protocol 7 on the v2 service", forwardV2(t, ctx, addr, eu.ClientCredentials("us"),
			&peerpb.ForwardRequest{Protocol: 7, From: "eu", Item: "target", User: victim, Target: 2, Kind: 1, IdemKey: "k"}), []codes.Code{codes.FailedPrecondition}},
		{"eu forwarding as ap over protocol 2", forwardV2(t, ctx, addr, eu.ClientCredentials("us"),
			&peerpb.ForwardRequest{Protocol: 2, From: "ap", Item: "target", User: victim, Target: 2, Kind: 1, IdemKey: "k"}), []codes.Code{codes.PermissionDenied}},
	}
	for _, a := range attacks {
		if a.err == nil {
			t.Errorf("%s: accepted", a.name)
			continue
		}
		if code := status.Code(a.err); !containsCode(a.codes, code) {
			t.Errorf("%s: refused with %v (%v), want %v", a.name, code, a.err, a.codes)
		}
	}

	// A real region forwarding what no ingress region sends: an erasure write
	// of a user whose erasure never started, and a like under another kind.
	// Both protocol versions of the forwarding service check the same.
	fw := api.NewForwarder("eu", func(string) (string, bool) { return addr, true }, eu.ClientCredentials)
	defer fw.Close()
	fw1 := api.NewForwarder("eu", func(string) (string, bool) { return addr, true }, eu.ClientCredentials)
	fw1.MaxProtocol = 1
	defer fw1.Close()
	for name, req := range map[string]edge.Request{
		"erasure of a user not being erased": {Item: "target", User: victim, Target: crdt.Erased, Kind: edge.KindErasure},
		"a correction":                       {Item: "target", User: victim, Target: crdt.Unliked, Kind: edge.KindCorrection, IdemKey: "x"},
		"a like with a control character":    {Item: "tar\x01get", User: victim, Target: crdt.Liked, Kind: edge.KindFlip, IdemKey: "y"},
	} {
		for v, f := range map[int]*api.Forwarder{2: fw, 1: fw1} {
			if _, err := f.Forward(ctx, "us", req); err == nil || !errors.Is(err, edge.ErrFailClosed) || !strings.Contains(err.Error(), "InvalidArgument") {
				t.Errorf("forwarded %s over protocol %d: %v, want refused as invalid", name, v, err)
			}
		}
	}
	// An impostor claiming to be ap from outside the CA cannot forward either.
	imp := api.NewForwarder("ap", func(string) (string, bool) { return addr, true }, otherIDs["ap"].ClientCredentials)
	defer imp.Close()
	if _, err := imp.Forward(ctx, "us", edge.Request{Item: "target", User: victim, Target: crdt.Unliked, Kind: edge.KindFlip, IdemKey: "z"}); err == nil {
		t.Error("an unlike forwarded with a certificate of another CA was applied")
	}

	// Nor relay an erasure of the victim (the relay is on the same
	// authenticated plane, no longer plain HTTP with the caller's token).
	if _, _, err := imp.Erasure(ctx, "us", victim, true); err == nil {
		t.Error("an erasure relayed with a certificate of another CA was started")
	}
	if _, found, err := fw.Erasure(ctx, "us", victim, false); err != nil || found {
		t.Errorf("erasure status of the victim through eu = found %v, %v; want none", found, err)
	}

	// A gossip member without the key never becomes a peer.
	m, err := replication.NewMembership(replication.MembershipConfig{Region: "eu", GRPCAddr: "127.0.0.1:1", BindAddr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n, err := m.Join([]string{us.r.GossipAddr()}); err == nil && n > 0 {
		t.Errorf("a member without the gossip key joined %d nodes", n)
	}

	// Nothing was stored.
	for _, n := range c.nodes {
		if cnt, err := c.count(n, "target"); err != nil || cnt.Count != 1 {
			t.Errorf("count at %s after the attacks = %+v, %v; want 1", n.name, cnt, err)
		}
	}
	if liked, err := c.button(us, victim, "target"); err != nil || !liked {
		t.Errorf("victim's like after the attacks = %v, %v", liked, err)
	}
	// eu's replication to us still flows: the forged cursor moved nothing.
	var euUser string
	for _, u := range triUsers(1) {
		if triOwner(ps, u).Region == "eu" {
			euUser = u
			break
		}
	}
	if r := c.set(c.byName["eu"], euUser, "after-attack", "k-after", true); r.code != http.StatusOK {
		t.Fatalf("like at eu after the attacks: %v", r)
	}
	c.waitCounts(t, map[string]int64{"target": 1, "after-attack": 1}, 20*time.Second)
}

// forwardV2 sends one raw protocol-2 forward to addr and returns the error
// (nil: the owner applied it, or refused it by name in the answer).
func forwardV2(t *testing.T, ctx context.Context, addr string, creds credentials.TransportCredentials, in *peerpb.ForwardRequest) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rpcjson.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out peerpb.ForwardResponse
	if err := cc.Invoke(cctx, "/likes.peer.v2.Forward/Set", in, &out); err != nil {
		return err
	}
	if out.GetRefusal() != "" {
		return fmt.Errorf("refused: %s", out.GetRefusal())
	}
	return nil
}

func containsCode(cs []codes.Code, c codes.Code) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// forgedBatch is the audit's attack: a cell of region from with a million
// likes and the highest hwm, so anti-entropy could never undo it.
func forgedBatch(from string) replication.Batch {
	return replication.Batch{From: from, Partitions: 4, CellsThrough: 1, Cells: []replication.CellState{{
		Key:  crdt.CellKey{Item: "target", Region: "ap", Shard: 0},
		Cell: crdt.Cell{P: 1_000_000, HWM: ^uint64(0) >> 1},
	}}}
}

func withFrom(b replication.Batch, from string, keepCells bool) replication.Batch {
	b.From = from
	if !keepCells {
		b.Cells = nil
	}
	return b
}

// farEpoch is a well-formed unlike of user's target edge at epoch 2^63: it
// would outrank every real write of the user forever.
func farEpoch(from, user string) replication.Batch {
	b := edge.BucketOf(user)
	p := edge.PartitionOf("target", b, 4)
	ev := edge.Event{Partition: p, Pos: 1, Item: "target", User: user, Bucket: b, Kind: edge.KindFlip,
		State: crdt.Unliked, Delta: -1, Version: crdt.Version{Epoch: 1 << 63, Op: 1}}
	return replication.Batch{From: from, Partitions: 4, Parts: []replication.PartBatch{{Partition: p, Events: []edge.Event{ev}, Through: 1}}}
}

func pastThrough(from string) replication.Batch {
	return replication.Batch{From: from, Partitions: 4, Parts: []replication.PartBatch{{Partition: 0, Through: ^uint64(0)}}}
}

// TestGRPCHealth: the gRPC port serves grpc.health.v1 (to callers with a
// region certificate): SERVING while the region runs, NOT_SERVING once it
// drains.
func TestGRPCHealth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions and etcd")
	}
	c := startTri(t)
	us := c.byName["us"]
	cc, err := grpc.NewClient(us.r.GRPCAddr(), grpc.WithTransportCredentials(c.ids["eu"].ClientCredentials("us")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of a running region: %v, %v", res, err)
	}
	us.r.Drain()
	res, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || res.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health of a draining region: %v, %v", res, err)
	}
}
