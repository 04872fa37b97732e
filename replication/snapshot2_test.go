package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/replica"
)

func randomSnapshot(r *rand.Rand) SnapshotBatch {
	b := SnapshotBatch{From: "eu", Partitions: 1 + r.IntN(16)}
	if r.IntN(4) == 0 {
		m := &replica.SnapshotMark{Cells: r.Uint64(), YourCells: r.Uint64()}
		for range b.Partitions {
			m.Log = append(m.Log, r.Uint64())
			if r.IntN(2) == 0 {
				m.YourLog = append(m.YourLog, r.Uint64())
			}
		}
		b.Done = m
		return b
	}
	for i := range r.IntN(5) {
		b.Chunk.Edges = append(b.Chunk.Edges, edge.Edge{Item: fmt.Sprintf("i%d", i), User: fmt.Sprintf("u%d", r.IntN(9)),
			State: crdt.State(r.IntN(3)), Version: crdt.Version{Epoch: r.Uint64(), Op: r.Uint64()}, UpdatedAt: r.Int64() - r.Int64()})
	}
	for i := range r.IntN(5) {
		fp := fmt.Sprintf("%032x", r.Uint64()) // edge.Fingerprint's form: travels raw
		if r.IntN(2) == 0 {
			fp = fmt.Sprintf("client-fp-%d", i)
		}
		b.Chunk.Records = append(b.Chunk.Records, replica.SnapRecord{User: "u1", Key: fmt.Sprintf("k%d", i), Fingerprint: fp,
			ExpiresAt: r.Int64(), Liked: r.IntN(2) == 0, Changed: r.IntN(2) == 0})
	}
	for i := range r.IntN(3) {
		b.Chunk.Erasures = append(b.Chunk.Erasures, replica.SnapErasure{User: fmt.Sprintf("e%d", i), Done: r.IntN(2) == 0, At: r.Int64()})
	}
	for i := range r.IntN(4) {
		region := []string{"eu", "us"}[r.IntN(2)]
		c := CellState{Key: crdt.CellKey{Item: fmt.Sprintf("c%d", i), Region: region, Shard: uint32(r.IntN(4))},
			Cell: crdt.Cell{P: r.Uint64(), N: r.Uint64(), HWM: r.Uint64(), Watermark: r.Int64()}}
		if region == "eu" {
			b.Chunk.Cells = append(b.Chunk.Cells, c)
		} else {
			b.Chunk.YourCells = append(b.Chunk.YourCells, c)
		}
	}
	return b
}

// TestSnapshotV2RoundTrip: every snapshot batch decodes to what was encoded.
func TestSnapshotV2RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for i := range 2000 {
		b := randomSnapshot(r)
		raw, err := proto.Marshal(snapshotToPB(b))
		if err != nil {
			t.Fatal(err)
		}
		var m peerpb.SnapshotRequest
		if err := proto.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		got, err := snapshotFromPB(&m)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !reflect.DeepEqual(normalizeSnapshot(got), normalizeSnapshot(b)) {
			t.Fatalf("batch %d changed on the wire:\n got %+v\nwant %+v", i, got, b)
		}
	}
}

func normalizeSnapshot(b SnapshotBatch) SnapshotBatch {
	c := &b.Chunk
	if len(c.Edges) == 0 {
		c.Edges = nil
	}
	if len(c.Records) == 0 {
		c.Records = nil
	}
	if len(c.Erasures) == 0 {
		c.Erasures = nil
	}
	if len(c.Cells) == 0 {
		c.Cells = nil
	}
	if len(c.YourCells) == 0 {
		c.YourCells = nil
	}
	if d := b.Done; d != nil && len(d.YourLog) == 0 {
		d.YourLog = nil
	}
	return b
}

// TestSnapshotV2RefusesMalformed: what does not fit the Go types is refused
// at decoding with InvalidArgument (the rest is Server.Snapshot's to judge,
// as for version 1: TestSnapshotRefusesHostileBatches).
func TestSnapshotV2RefusesMalformed(t *testing.T) {
	for name, m := range map[string]*peerpb.SnapshotRequest{
		"chunk and mark":        {Chunk: &peerpb.SnapshotChunk{}, Done: &peerpb.SnapshotMark{}},
		"neither":               {},
		"state out of range":    {Chunk: &peerpb.SnapshotChunk{Edges: []*peerpb.SnapEdge{{Item: "i", User: "u", State: 256}}}},
		"fingerprint twice":     {Chunk: &peerpb.SnapshotChunk{Records: []*peerpb.SnapRecord{{User: "u", Key: "k", Fingerprint: "f", FingerprintRaw: make([]byte, 16)}}}},
		"short raw fingerprint": {Chunk: &peerpb.SnapshotChunk{Records: []*peerpb.SnapRecord{{User: "u", Key: "k", FingerprintRaw: make([]byte, 3)}}}},
	} {
		m.Protocol, m.From, m.Partitions = 2, "us", 2
		if _, err := snapshotFromPB(m); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
		srv := newServer(t, "eu", 2, newFakeSink(2))
		if _, err := handleSnapshotV2(srv, context.Background(), m); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s through the handler: %v, want InvalidArgument", name, err)
		}
	}
	// A caller outside the region's range is refused before decoding.
	srv, err := NewServer(ServerConfig{Region: "eu", Partitions: 2, Sink: newFakeSink(2), MinProtocol: 1, MaxProtocol: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handleSnapshotV2(srv, context.Background(), &peerpb.SnapshotRequest{Protocol: 2}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("v2 to a v1-only region: %v", err)
	}
}

// TestSnapshotV2Bytes reports a typical chunk's size in both versions (an
// edge with its record, as a snapshot carries them).
func TestSnapshotV2Bytes(t *testing.T) {
	var b SnapshotBatch
	b.From, b.Partitions = "eu", 16
	for i := range 4096 {
		user := fmt.Sprintf("user%07d", i)
		b.Chunk.Edges = append(b.Chunk.Edges, edge.Edge{Item: fmt.Sprintf("item%05d", i%500), User: user, State: crdt.Liked,
			Version: crdt.Version{Epoch: 3, Op: uint64(i)}, UpdatedAt: 1_800_000_000_000 + int64(i)})
		b.Chunk.Records = append(b.Chunk.Records, replica.SnapRecord{User: user, Key: fmt.Sprintf("key-%d", i),
			Fingerprint: fmt.Sprintf("%032x", i), ExpiresAt: 1_800_086_400_000, Liked: true, Changed: true})
	}
	v1, err := json.Marshal(snapshotRequest{V: ProtocolVersion, SnapshotBatch: b})
	if err != nil {
		t.Fatal(err)
	}
	v2 := proto.Size(snapshotToPB(b))
	t.Logf("4096 edges + 4096 records: v1 %d bytes (%.1f per entry), v2 %d bytes (%.1f per entry), v2 ÷ v1 %.2f",
		len(v1), float64(len(v1))/8192, v2, float64(v2)/8192, float64(v2)/float64(len(v1)))
	if v2 >= len(v1) {
		t.Fatalf("v2 (%d bytes) is not smaller than v1 (%d)", v2, len(v1))
	}
}

// TestSnapshotV2FallsBackPerCall: a peer of an older release serves
// protocol 2 without its Snapshot method (Unimplemented): the snapshot goes
// over version 1 for that call, and the pushes stay on protocol 2.
func TestSnapshotV2FallsBackPerCall(t *testing.T) {
	srv := newServer(t, "us", 2, newFakeSink(2))
	old := serviceDescV2
	old.Methods = nil
	for _, m := range serviceDescV2.Methods {
		if m.MethodName != "Snapshot" {
			old.Methods = append(old.Methods, m)
		}
	}
	lis := listenLoopback(t)
	gs := grpc.NewServer(ServerOptions()...)
	gs.RegisterService(&serviceDesc, srv)
	gs.RegisterService(&old, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	tr, err := NewGRPCTransport(TransportConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	peer := Peer{Region: "us", GRPCAddr: lis.Addr().String()}
	ok := edge.Edge{Item: "i1", User: "u1", State: crdt.Liked, Version: crdt.Version{Epoch: 1, Op: 1}}
	_, err = tr.Snapshot(context.Background(), peer, SnapshotBatch{From: "eu", Partitions: 2, Chunk: replica.SnapshotChunk{Edges: []edge.Edge{ok}}})
	// The fake sink cannot apply snapshots: the answer is version 1's
	// handler's, which proves the call reached it.
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "cannot apply snapshots") {
		t.Fatalf("snapshot to an older v2 peer: %v", err)
	}
	if v, err := tr.version(peer); err != nil || v != 2 {
		t.Fatalf("after the fallback the peer's protocol is %d (%v), want 2", v, err)
	}
}
