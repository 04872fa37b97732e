package replication

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/rpcjson"
	"github.com/likes-dev/likes/replica"
)

// ev is a valid like event at position pos of partition p (of 2): its item
// is chosen so that the item and the user's bucket place it in p.
func ev(p uint32, pos uint64) edge.Event {
	b := edge.BucketOf("u")
	item := "i"
	for n := 0; edge.PartitionOf(item, b, 2) != p; n++ {
		item = fmt.Sprintf("i%d", n)
	}
	return edge.Event{Partition: p, Pos: pos, Item: item, User: "u", Bucket: b, Kind: edge.KindFlip,
		State: crdt.Liked, Delta: 1, Version: crdt.Version{Epoch: 1, Op: pos}}
}

func cell(item string, hwm uint64) CellState {
	return CellState{Key: crdt.CellKey{Item: item, Region: "eu", Shard: 0}, Cell: crdt.Cell{P: hwm, HWM: hwm, Watermark: int64(hwm)}}
}

// The receiver applies nothing across a gap (the sender's After is past its
// cursor), merges cells but keeps the cursor and drops the watermark when the
// cell run does not continue its cursor, and skips what it already has.
func TestServerGapsAndDuplicates(t *testing.T) {
	ctx := context.Background()
	sink := newFakeSink(2)
	srv := newServer(t, "us", 2, sink)

	cur, err := srv.Push(ctx, Batch{From: "eu", Partitions: 2,
		Parts:        []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 1), ev(0, 2)}, Through: 2}},
		Cells:        []CellState{cell("a", 1)},
		CellsThrough: 1, Watermark: 10})
	if err != nil || !equalU64(cur.Log, []uint64{2, 0}) || cur.Cells != 1 || sink.watermark("eu") != 10 {
		t.Fatalf("first push: cur=%+v err=%v wm=%d", cur, err, sink.watermark("eu"))
	}
	// Gap: After 5 > cursor 2 on partition 0; partition 1 is fine.
	cur, err = srv.Push(ctx, Batch{From: "eu", Partitions: 2, Parts: []PartBatch{
		{Partition: 0, Events: []edge.Event{ev(0, 6)}, Through: 6, After: 5},
		{Partition: 1, Events: []edge.Event{ev(1, 1)}, Through: 1},
	}, Cells: []CellState{cell("b", 7)}, CellsAfter: 5, CellsThrough: 9, Watermark: 20})
	if err != nil || !equalU64(cur.Log, []uint64{2, 1}) || cur.Cells != 1 {
		t.Fatalf("gap push: cur=%+v err=%v", cur, err)
	}
	if sink.watermark("eu") != 10 {
		t.Fatal("watermark recorded across a cell gap")
	}
	if _, ok := sink.cellsOf("eu")[cell("b", 7).Key]; !ok {
		t.Fatal("cells across a gap must still merge")
	}
	// Duplicate and overlap: events 1..3 where 1..2 are applied.
	cur, err = srv.Push(ctx, Batch{From: "eu", Partitions: 2, Parts: []PartBatch{
		{Partition: 0, Events: []edge.Event{ev(0, 1), ev(0, 2), ev(0, 3)}, Through: 3},
	}, CellsAfter: 1, CellsThrough: 1})
	if err != nil || !equalU64(cur.Log, []uint64{3, 1}) {
		t.Fatalf("overlap push: cur=%+v err=%v", cur, err)
	}
	if n := len(sink.applied["eu"][0]); n != 3 {
		t.Fatalf("applied %d events on partition 0, want 3", n)
	}
	// Handshake: empty push returns the cursor and changes nothing.
	cur, err = srv.Push(ctx, Batch{From: "eu", Partitions: 2})
	if err != nil || !equalU64(cur.Log, []uint64{3, 1}) || cur.Cells != 1 {
		t.Fatalf("handshake: cur=%+v err=%v", cur, err)
	}
}

// one is a batch of one valid event of partition 0, changed by f.
func one(f func(*edge.Event)) Batch {
	e := ev(0, 1)
	f(&e)
	return Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{e}, Through: 1}}}
}

func TestServerRejectsInvalid(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, "us", 2, newFakeSink(2))
	cases := map[string]struct {
		b    Batch
		code codes.Code
	}{
		"no sender":       {Batch{Partitions: 2}, codes.InvalidArgument},
		"from self":       {Batch{From: "us", Partitions: 2}, codes.InvalidArgument},
		"partitions":      {Batch{From: "eu", Partitions: 3}, codes.FailedPrecondition},
		"partition range": {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 2}}}, codes.InvalidArgument},
		"out of order":    {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 2), ev(0, 1)}, Through: 2}}}, codes.InvalidArgument},
		"past through":    {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 3)}, Through: 2}}}, codes.InvalidArgument},
		"wrong partition": {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(1, 1)}, Through: 1}}}, codes.InvalidArgument},
		"foreign cell":    {Batch{From: "eu", Partitions: 2, Cells: []CellState{{Key: crdt.CellKey{Item: "x", Region: "ap"}}}}, codes.InvalidArgument},
		"cell hwm":        {Batch{From: "eu", Partitions: 2, Cells: []CellState{{Key: crdt.CellKey{Item: "x", Region: "eu"}, Cell: crdt.Cell{HWM: replica.MaxHWM + 1}}}}, codes.InvalidArgument},
		"cell shard":      {Batch{From: "eu", Partitions: 2, Cells: []CellState{{Key: crdt.CellKey{Item: "x", Region: "eu", Shard: 2}}}}, codes.InvalidArgument},
		"cell item":       {Batch{From: "eu", Partitions: 2, Cells: []CellState{{Key: crdt.CellKey{Item: "bad\x00", Region: "eu"}}}}, codes.InvalidArgument},
		"cells backwards": {Batch{From: "eu", Partitions: 2, CellsAfter: 3, CellsThrough: 2}, codes.InvalidArgument},
		"duplicate part":  {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0}, {Partition: 0}}}, codes.InvalidArgument},
		"through < after": {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, After: 3, Through: 2}}}, codes.InvalidArgument},
		// An attacker's batches: a cursor pushed past what was sent, and
		// events no correct region writes.
		"through past the events": {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 1)}, Through: 1 << 63}}}, codes.InvalidArgument},
		"through with no events":  {Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Through: ^uint64(0)}}}, codes.InvalidArgument},
		"unknown kind":            {one(func(e *edge.Event) { e.Kind = 99 }), codes.InvalidArgument},
		"control char in user":    {one(func(e *edge.Event) { e.User = "u\x00v" }), codes.InvalidArgument},
		"bucket not the user's":   {one(func(e *edge.Event) { e.Bucket = (e.Bucket + 1) % edge.Buckets }), codes.InvalidArgument},
		"delta of a million":      {one(func(e *edge.Event) { e.Delta = 1_000_000 }), codes.InvalidArgument},
		"unknown state":           {one(func(e *edge.Event) { e.State = 7 }), codes.InvalidArgument},
		"epoch 0 flip":            {one(func(e *edge.Event) { e.Version.Epoch = 0 }), codes.InvalidArgument},
		"record on a correction":  {one(func(e *edge.Event) { e.Kind = edge.KindCorrection; e.Idem = &edge.IdemRef{Key: "k"} }), codes.InvalidArgument},
		"oversized item":          {one(func(e *edge.Event) { e.Item = strings.Repeat("x", 300) }), codes.InvalidArgument},
	}
	for name, c := range cases {
		if _, err := srv.Push(ctx, c.b); status.Code(err) != c.code {
			t.Errorf("%s: err = %v, want %v", name, err, c.code)
		}
	}
	sink := newFakeSink(2)
	sink.failing = context.DeadlineExceeded // any store error
	srv2 := newServer(t, "us", 2, sink)
	if _, err := srv2.Push(ctx, Batch{From: "eu", Partitions: 2}); status.Code(err) != codes.Unavailable || !IsRetryable(err) {
		t.Errorf("store failure: err = %v, want retryable Unavailable", err)
	}
}

// Protocol version mismatch is refused; the same forced-codec server also
// serves a generated protobuf service (health), so it can be shared.
func TestWireVersionAndSharedServer(t *testing.T) {
	srv := newServer(t, "us", 2, newFakeSink(2))
	lisAddr := startReceiver(t, "", srv)
	hs := health.NewServer()
	gs := grpc.NewServer(ServerOptions()...)
	srv.Register(gs)
	healthpb.RegisterHealthServer(gs, hs)
	r := &receiver{gs: gs, done: make(chan struct{})}
	lis := listenLoopback(t)
	r.addr = lis.Addr().String()
	go func() { defer close(r.done); _ = gs.Serve(lis) }()
	t.Cleanup(r.stop)

	cc, err := grpc.NewClient("passthrough:///"+lisAddr.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rpcjson.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var out pushResponse
	err = cc.Invoke(context.Background(), methodPush, &pushRequest{V: ProtocolVersion + 1, Batch: Batch{From: "eu", Partitions: 2}}, &out)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("version mismatch: err = %v", err)
	}

	hc, err := grpc.NewClient("passthrough:///"+r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	resp, err := healthpb.NewHealthClient(hc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health over the shared server: %v %v", resp, err)
	}
	tr := newTransport(t)
	if _, err := tr.Push(context.Background(), Peer{Region: "us", GRPCAddr: r.addr}, Batch{From: "eu", Partitions: 2}); err != nil {
		t.Fatalf("replication over the shared server: %v", err)
	}
}

func TestDigestOrderIndependent(t *testing.T) {
	cs := []CellState{cell("a", 1), cell("b", 2), cell("c", 3), cell("a2", 4)}
	var d1, d2 Digest
	for _, c := range cs {
		d1.Add(c)
	}
	for i := len(cs) - 1; i >= 0; i-- {
		d2.Add(cs[i])
	}
	if len(d1.Mismatched(&d2)) != 0 {
		t.Fatal("digest depends on order")
	}
	var d3 Digest
	for _, c := range cs[:3] {
		d3.Add(c)
	}
	changed := cs[3]
	changed.Cell.P++
	d3.Add(changed)
	if m := d1.Mismatched(&d3); len(m) != 1 || m[0] != BucketOf("a2") {
		t.Fatalf("mismatched = %v, want [%d]", m, BucketOf("a2"))
	}
}

func TestIsRetryable(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.Unavailable: true, codes.DeadlineExceeded: true, codes.ResourceExhausted: true,
		codes.FailedPrecondition: false, codes.InvalidArgument: false, codes.Internal: false, codes.Canceled: false,
	} {
		if got := IsRetryable(status.Error(code, "x")); got != want {
			t.Errorf("%v: %v, want %v", code, got, want)
		}
	}
	if !IsRetryable(context.DeadlineExceeded) || IsRetryable(context.Canceled) || IsRetryable(nil) {
		t.Error("context errors misclassified")
	}
}

type fakeFencer struct {
	seen  map[PinRef]bool
	heads []uint64
}

var _ Fencer = (*fakeFencer)(nil)

func (f *fakeFencer) Heads(_ context.Context, pins []PinRef) ([]uint64, error) {
	for _, p := range pins {
		if !f.seen[p] {
			return nil, fmt.Errorf("range %d epoch %d: %w", p.Range, p.Epoch, ErrPinNotSeen)
		}
	}
	return f.heads, nil
}

// Heads over gRPC: "not seen yet" is retryable, a region without a Fencer
// says Unimplemented, and the heads come back per partition.
func TestHeadsOverGRPC(t *testing.T) {
	ctx := context.Background()
	f := &fakeFencer{seen: map[PinRef]bool{{Range: 3, Epoch: 2}: true}, heads: []uint64{7, 9}}
	srv, err := NewServer(ServerConfig{Region: "us", Partitions: 2, Sink: newFakeSink(2), Fencer: f})
	if err != nil {
		t.Fatal(err)
	}
	peer := Peer{Region: "us", GRPCAddr: startReceiver(t, "", srv).addr}
	bare := Peer{Region: "us", GRPCAddr: startReceiver(t, "", newServer(t, "us", 2, newFakeSink(2))).addr}
	tr := newTransport(t)

	resp, err := tr.Heads(ctx, peer, HeadsRequest{From: "eu", Partitions: 2, Pins: []PinRef{{Range: 3, Epoch: 2}}})
	if err != nil || !equalU64(resp.Log, []uint64{7, 9}) {
		t.Fatalf("Heads = %+v, %v; want [7 9]", resp, err)
	}
	_, err = tr.Heads(ctx, peer, HeadsRequest{From: "eu", Partitions: 2, Pins: []PinRef{{Range: 3, Epoch: 3}}})
	if status.Code(err) != codes.Unavailable || !IsRetryable(err) {
		t.Fatalf("unseen pin: %v, want retryable Unavailable", err)
	}
	_, err = tr.Heads(ctx, peer, HeadsRequest{From: "eu", Partitions: 4})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("partition mismatch: %v, want FailedPrecondition", err)
	}
	_, err = tr.Heads(ctx, bare, HeadsRequest{From: "eu", Partitions: 2})
	if status.Code(err) != codes.Unimplemented || IsRetryable(err) {
		t.Fatalf("no fencer: %v, want Unimplemented", err)
	}
}

// An edge version past every pin of its range is refused (retryably) and
// nothing is applied: the audit's epoch-2^63 edge would outrank the user's
// real writes forever.
func TestServerRefusesEpochsPastThePins(t *testing.T) {
	sink := newFakeSink(2)
	srv, err := NewServer(ServerConfig{Region: "us", Partitions: 2, Sink: sink, MaxEpoch: func(string) uint64 { return 3 }})
	if err != nil {
		t.Fatal(err)
	}
	far := one(func(e *edge.Event) { e.Version.Epoch = 1 << 63 })
	if _, err := srv.Push(context.Background(), far); status.Code(err) != codes.Unavailable || !IsRetryable(err) {
		t.Fatalf("epoch 2^63: %v, want a retryable Unavailable", err)
	}
	if len(sink.applied) != 0 {
		t.Fatalf("applied %v", sink.applied)
	}
	if _, err := srv.Push(context.Background(), one(func(e *edge.Event) { e.Version.Epoch = 3 })); err != nil {
		t.Fatalf("epoch 3 (the current pin): %v", err)
	}
}
