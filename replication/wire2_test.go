package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
)

// randomBatch is a batch as a shipper builds it: runs of increasing
// positions, event times around one instant, idempotency records, cells.
func randomBatch(r *rand.Rand) Batch {
	b := Batch{From: "eu", Partitions: 4, CellsAfter: r.Uint64N(100), Watermark: r.Int64N(1 << 40)}
	b.CellsThrough = b.CellsAfter + r.Uint64N(100)
	t0 := int64(1_800_000_000_000)
	for p := range uint32(r.IntN(4)) {
		pb := PartBatch{Partition: p, After: r.Uint64N(1000)}
		pos := pb.After
		for range r.IntN(5) {
			pos += 1 + r.Uint64N(3)
			user := fmt.Sprintf("user-%d", r.IntN(1e6))
			ev := edge.Event{Partition: p, Pos: pos, Item: fmt.Sprintf("item-%d", r.IntN(1e6)), User: user,
				Bucket: edge.BucketOf(user), Version: crdt.Version{Epoch: r.Uint64N(9) + 1, Op: r.Uint64N(1e6)},
				State: crdt.State(r.IntN(3)), Delta: int32(r.IntN(3) - 1), EventTime: t0 + r.Int64N(5000) - 2500,
				Kind: edge.Kind(1 + r.IntN(8))}
			if r.IntN(2) == 0 {
				fp := "f"
				if r.IntN(2) == 0 {
					fp = edge.Fingerprint("like", ev.Item, user)
				}
				ev.Idem = &edge.IdemRef{Key: "k" + user, Fingerprint: fp, ExpiresAt: t0 + 86_400_000, Liked: true, Changed: r.IntN(2) == 0}
			}
			pb.Events = append(pb.Events, ev)
		}
		pb.Through = pos
		b.Parts = append(b.Parts, pb)
	}
	for range r.IntN(4) {
		b.Cells = append(b.Cells, CellState{Key: crdt.CellKey{Item: "i", Region: "eu", Shard: r.Uint32N(8)},
			Cell: crdt.Cell{P: r.Uint64N(1e9), N: r.Uint64N(1e9), HWM: r.Uint64N(1e9), Watermark: r.Int64N(1 << 40)}})
	}
	return b
}

// TestBatchV2RoundTrip: every batch decodes from its version-2 encoding to
// exactly itself.
func TestBatchV2RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for i := range 2000 {
		b := randomBatch(r)
		raw, err := proto.Marshal(batchToPB(b))
		if err != nil {
			t.Fatal(err)
		}
		var m peerpb.Batch
		if err := proto.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		got, err := batchFromPB(&m)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !reflect.DeepEqual(normalizeBatch(got), normalizeBatch(b)) {
			t.Fatalf("batch %d changed on the wire:\n got %+v\nwant %+v", i, got, b)
		}
	}
}

// normalizeBatch makes nil and empty slices compare equal.
func normalizeBatch(b Batch) Batch {
	if len(b.Parts) == 0 {
		b.Parts = nil
	}
	if len(b.Cells) == 0 {
		b.Cells = nil
	}
	for i := range b.Parts {
		if len(b.Parts[i].Events) == 0 {
			b.Parts[i].Events = nil
		}
	}
	return b
}

// TestBatchV2RefusesOverflow: positions and times that overflow are refused
// at decoding, not wrapped into plausible values.
func TestBatchV2RefusesOverflow(t *testing.T) {
	for name, m := range map[string]*peerpb.Batch{
		"position": {Parts: []*peerpb.Part{{After: ^uint64(0) - 1, Events: []*peerpb.Event{{PosDelta: 5}}}}},
		"kind":     {Parts: []*peerpb.Part{{Events: []*peerpb.Event{{PosDelta: 1, Kind: 300}}}}},
		"nil":      nil,
	} {
		if _, err := batchFromPB(m); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// TestMixedProtocolVersions: a region limited to version 1 (the previous
// release during a rolling upgrade) and one at version 2 replicate both ways;
// a region that requires 2 refuses a caller limited to 1 with an error naming
// both ranges, and counts it; announced ranges that do not meet fail before
// any call.
func TestMixedProtocolVersions(t *testing.T) {
	ctx := context.Background()
	push := func(srvCfg ServerConfig, trCfg TransportConfig, peer Peer) (*Server, Cursor, error) {
		t.Helper()
		srvCfg.Region, srvCfg.Partitions = "us", 2
		if srvCfg.Sink == nil {
			srvCfg.Sink = newFakeSink(2)
		}
		s, err := NewServer(srvCfg)
		if err != nil {
			t.Fatal(err)
		}
		r := startReceiver(t, "", s)
		t.Cleanup(r.stop)
		tr, err := NewGRPCTransport(trCfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		peer.Region, peer.GRPCAddr = "us", r.addr
		b := Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 1)}, Through: 1}}}
		cur, err := tr.Push(ctx, peer, b)
		if err == nil {
			// The same transport keeps talking what it learned.
			_, err = tr.Digest(ctx, peer, DigestRequest{From: "eu", Partitions: 2, Buckets: make([]uint64, DigestBuckets)})
		}
		return s, cur, err
	}
	for name, c := range map[string]struct {
		srv ServerConfig
		tr  TransportConfig
	}{
		"v2 to v2":               {},
		"v2 caller to v1 region": {srv: ServerConfig{MaxProtocol: 1}},
		"v1 caller to v2 region": {tr: TransportConfig{MaxProtocol: 1}},
	} {
		if _, cur, err := push(c.srv, c.tr, Peer{}); err != nil || len(cur.Log) != 2 || cur.Log[0] != 1 {
			t.Errorf("%s: cursor %+v, err %v", name, cur, err)
		}
	}
	s, _, err := push(ServerConfig{MinProtocol: 2}, TransportConfig{MaxProtocol: 1}, Peer{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "speaks protocols 2..2") || s.RefusedProtocol() != 1 {
		t.Errorf("v1 caller to a v2-only region: %v (refused %d)", err, s.RefusedProtocol())
	}
	_, _, err = push(ServerConfig{}, TransportConfig{MaxProtocol: 1}, Peer{ProtoMin: 2, ProtoMax: 3})
	if !errors.Is(err, ErrNoCommonProtocol) && !strings.Contains(fmt.Sprint(err), ErrNoCommonProtocol.Error()) {
		t.Errorf("announced ranges 2..3 and 1..1: %v", err)
	}
}

// TestVersionFromHostileAnnouncements: whatever range a gossip member
// announces, the caller talks a version it speaks itself or refuses.
func TestVersionFromHostileAnnouncements(t *testing.T) {
	tr := newTransport(t)
	for _, c := range []struct {
		min, max int
		want     int // 0: refused
	}{
		{0, 0, 2}, {1, 2, 2}, {1, 1, 1}, {1, 1000, 2}, {-5, -1, 0}, {3, 9, 0}, {2, 1, 0}, {-1 << 62, 1 << 62, 2},
	} {
		v, err := tr.version(Peer{Region: "x", GRPCAddr: "x:1", ProtoMin: c.min, ProtoMax: c.max})
		switch {
		case c.want == 0 && (err == nil || status.Code(err) != codes.FailedPrecondition):
			t.Errorf("announced %d..%d: version %d, %v; want refused", c.min, c.max, v, err)
		case c.want != 0 && (err != nil || v != c.want):
			t.Errorf("announced %d..%d: version %d, %v; want %d", c.min, c.max, v, err, c.want)
		}
	}
}
