package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/internal/rpcjson"
)

const parts = 4

// fill commits n events spread over the partitions and bumps a few cells.
func fill(src *fakeSource, n int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < n; i++ {
		item := fmt.Sprintf("item-%d", r.IntN(20))
		src.appendEvent(uint32(r.IntN(parts)), item, fmt.Sprintf("user-%d", i))
		if i%3 == 0 {
			src.bumpCell(item, uint32(r.IntN(parts)), int64(1000+i))
		}
	}
}

// caughtUp reports that the shipper has processed the peer's acknowledgement
// of everything src holds (the receiver may converge before the answer to the
// last push is back at the shipper).
func caughtUp(sh *Shipper, peer string, src *fakeSource) func() bool {
	return func() bool {
		for _, s := range sh.Stats() {
			if s.Region == peer {
				return s.Active && s.CellsCaughtUp && equalU64(s.Acked.Log, src.heads()) && s.LagEvents == 0
			}
		}
		return false
	}
}

func converged(src *fakeSource, sink *fakeSink) func() bool {
	return func() bool {
		return equalU64(sink.logCursor(src.region), src.heads()) &&
			cellSetsEqual(sink.cellsOf(src.region), src.cellSet()) &&
			sink.watermark(src.region) == src.watermark()
	}
}

// Shipping over a real gRPC server on loopback, while the source keeps
// committing, delivers every event exactly once and in order per partition,
// every cell's latest state, and the final watermark.
func TestShipOverGRPCExactlyOnceInOrder(t *testing.T) {
	src := newFakeSource("eu", parts)
	sink := newFakeSink(parts)
	rcv := startReceiver(t, "", newServer(t, "us", parts, sink))
	tr := newTransport(t)
	sh := newShipper(t, ShipperConfig{
		Region: "eu", Source: src, Transport: tr,
		MaxEvents: 7, MaxCells: 5, PollInterval: 2 * time.Millisecond,
	})
	sh.SetPeers([]Peer{{Region: "us", GRPCAddr: rcv.addr}, {Region: "eu", GRPCAddr: "ignored:1"}})

	for i := 0; i < 10; i++ { // keep committing while shipping
		fill(src, 30, uint64(i))
		sh.Kick()
	}
	eventually(t, "receiver converged", 20*time.Second, nil, converged(src, sink))
	sink.checkExactlyOnce(t, "eu", src)

	st := sh.Stats()
	if len(st) != 1 || st[0].Region != "us" || !st[0].Active {
		t.Fatalf("stats = %+v", st)
	}
	eventually(t, "stats caught up", 5*time.Second, nil, caughtUp(sh, "us", src))
	s := sh.Stats()[0]
	if s.EventsShipped != 300 || s.BytesShipped == 0 || s.Pushes == 0 || s.LastSuccess.IsZero() || s.Watermark != src.watermark() {
		t.Fatalf("stats = %+v", s)
	}
}

// countingTransport counts the events it carries.
type countingTransport struct {
	Transport
	events atomic.Int64
}

func (c *countingTransport) Push(ctx context.Context, p Peer, b Batch) (Cursor, error) {
	for _, pb := range b.Parts {
		c.events.Add(int64(len(pb.Events)))
	}
	return c.Transport.Push(ctx, p, b)
}

// A new shipper (no memory of its own) resumes from the cursor a restarted
// receiver persisted, and resends nothing already applied.
func TestResumeAfterReceiverRestart(t *testing.T) {
	src := newFakeSource("eu", parts)
	sink := newFakeSink(parts) // the receiver's persisted store
	rcv := startReceiver(t, "", newServer(t, "us", parts, sink))
	ct := &countingTransport{Transport: newTransport(t)}
	cfg := ShipperConfig{Region: "eu", Source: src, Transport: ct, MaxEvents: 16,
		PollInterval: 2 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond}
	peers := []Peer{{Region: "us", GRPCAddr: rcv.addr}}

	fill(src, 100, 1)
	sh1 := newShipper(t, cfg)
	sh1.SetPeers(peers)
	eventually(t, "first phase converged", 20*time.Second, nil, converged(src, sink))
	eventually(t, "first phase acknowledged", 20*time.Second, nil, caughtUp(sh1, "us", src))
	if err := sh1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sh1.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	rcv.stop()
	first := ct.events.Load()
	if first != 100 {
		t.Fatalf("first phase carried %d events, want 100", first)
	}

	fill(src, 50, 2) // committed while the receiver is down
	startReceiver(t, rcv.addr, newServer(t, "us", parts, sink))
	sh2 := newShipper(t, cfg)
	sh2.SetPeers(peers)
	eventually(t, "second phase converged", 20*time.Second, nil, converged(src, sink))
	sink.checkExactlyOnce(t, "eu", src)
	if got := ct.events.Load() - first; got != 50 {
		t.Fatalf("after restart the shipper carried %d events, want exactly the 50 new ones", got)
	}
}

// flakyTransport delivers through the wire codec (so JSON round-trips are
// exercised) to an in-process Server, and misbehaves at random: it fails
// before delivery, delivers and then reports failure, delivers twice, and
// replays stale batches delivered earlier.
type flakyTransport struct {
	srv *Server

	mu     sync.Mutex
	r      *rand.Rand
	stale  []Batch
	faults map[string]int
}

func (f *flakyTransport) roll() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r.Float64()
}

func (f *flakyTransport) fault(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[kind]++
}

// wire copies v through the codec, as the network would.
func wire[T any](t T) T {
	var c rpcjson.Codec
	bs, err := c.Marshal(t)
	if err != nil {
		panic(err)
	}
	var out T
	if err := c.Unmarshal(bs, &out); err != nil {
		panic(err)
	}
	return out
}

func (f *flakyTransport) Push(ctx context.Context, _ Peer, b Batch) (Cursor, error) {
	x := f.roll()
	switch {
	case x < 0.15:
		f.fault("drop")
		return Cursor{}, status.Error(codes.Unavailable, "flaky: dropped before delivery")
	case x < 0.25:
		f.fault("ack lost")
		if _, err := f.srv.Push(ctx, wire(b)); err != nil {
			return Cursor{}, err
		}
		return Cursor{}, status.Error(codes.DeadlineExceeded, "flaky: answer lost")
	case x < 0.35:
		f.fault("duplicate")
		if _, err := f.srv.Push(ctx, wire(b)); err != nil {
			return Cursor{}, err
		}
	case x < 0.45:
		f.mu.Lock()
		var old *Batch
		if len(f.stale) > 0 {
			o := f.stale[f.r.IntN(len(f.stale))]
			old = &o
		}
		f.mu.Unlock()
		if old != nil {
			f.fault("stale replay")
			if _, err := f.srv.Push(ctx, wire(*old)); err != nil {
				return Cursor{}, err
			}
		}
	case x < 0.5:
		f.fault("error")
		return Cursor{}, status.Error(codes.Internal, "flaky: internal error")
	}
	f.mu.Lock()
	if len(f.stale) < 64 {
		f.stale = append(f.stale, wire(b))
	}
	f.mu.Unlock()
	cur, err := f.srv.Push(ctx, wire(b))
	return wire(cur), err
}

func (f *flakyTransport) Digest(ctx context.Context, _ Peer, req DigestRequest) (DigestResponse, error) {
	if f.roll() < 0.2 {
		return DigestResponse{}, status.Error(codes.Unavailable, "flaky: digest dropped")
	}
	resp, err := f.srv.Digest(ctx, wire(req))
	return wire(resp), err
}

// A transport that drops, duplicates, replays stale batches and errors still
// converges to exactly-once delivery.
func TestUnreliableTransportConverges(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			src := newFakeSource("eu", parts)
			sink := newFakeSink(parts)
			ft := &flakyTransport{srv: newServer(t, "us", parts, sink), r: rand.New(rand.NewPCG(seed, 7)), faults: map[string]int{}}
			sh := newShipper(t, ShipperConfig{
				Region: "eu", Source: src, Transport: ft, MaxEvents: 9, MaxCells: 4,
				PollInterval: time.Millisecond, RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond,
				AntiEntropy: 5 * time.Millisecond,
			})
			sh.SetPeers([]Peer{{Region: "us", GRPCAddr: "inproc"}})
			for i := 0; i < 5; i++ {
				fill(src, 40, seed*100+uint64(i))
				sh.Kick()
			}
			eventually(t, "converged despite faults", 30*time.Second, nil, converged(src, sink))
			sink.checkExactlyOnce(t, "eu", src)
			ft.mu.Lock()
			defer ft.mu.Unlock()
			for _, k := range []string{"drop", "ack lost", "duplicate", "stale replay"} {
				if ft.faults[k] == 0 {
					t.Errorf("fault %q never injected (%v)", k, ft.faults)
				}
			}
			if s := sh.Stats()[0]; s.Failures == 0 || s.LastError == "" {
				t.Errorf("failures not recorded: %+v", s)
			}
		})
	}
}

// Anti-entropy repairs a cell the receiver lost, on the default 30s interval
// driven by a fake clock, and repairs nothing while the copies agree.
func TestAntiEntropyRepairsLostCell(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := newFakeSource("eu", parts)
	sink := newFakeSink(parts)
	rcv := startReceiver(t, "", newServer(t, "us", parts, sink))
	sh := newShipper(t, ShipperConfig{Region: "eu", Source: src, Transport: newTransport(t), Clock: clk})
	sh.SetPeers([]Peer{{Region: "us", GRPCAddr: rcv.addr}})
	fill(src, 200, 3)
	step := func() { clk.Advance(100 * time.Millisecond) }
	eventually(t, "converged", 20*time.Second, step, converged(src, sink))

	clk.Advance(31 * time.Second)
	eventually(t, "first digest round", 20*time.Second, step, func() bool { return sh.Stats()[0].DigestRounds >= 1 })
	if s := sh.Stats()[0]; s.CellsRepaired != 0 {
		t.Fatalf("repaired %d cells while the copies agreed", s.CellsRepaired)
	}

	var lost crdt.CellKey
	for k := range src.cellSet() {
		lost = k
		break
	}
	sink.deleteCell(lost)
	if _, ok := sink.cellsOf("eu")[lost]; ok {
		t.Fatal("cell not deleted")
	}
	clk.Advance(31 * time.Second)
	eventually(t, "lost cell repaired", 20*time.Second, step, func() bool {
		return sink.cellsOf("eu")[lost] == src.cellSet()[lost]
	})
	eventually(t, "copies agree", 5*time.Second, step, converged(src, sink))
	eventually(t, "repair counted", 5*time.Second, step, func() bool {
		s := sh.Stats()[0]
		return s.CellsRepaired >= 1 && s.DigestRounds >= 2
	})
}

// A receiver with another partition count refuses pushes and digests with
// FailedPrecondition and a clear message; the shipper reports it and keeps
// waiting at RetryMax pace.
func TestPartitionMismatchRejected(t *testing.T) {
	sink := newFakeSink(8)
	rcv := startReceiver(t, "", newServer(t, "us", 8, sink))
	tr := newTransport(t)
	peer := Peer{Region: "us", GRPCAddr: rcv.addr}
	ctx := context.Background()

	_, err := tr.Push(ctx, peer, Batch{From: "eu", Partitions: parts})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "partition count mismatch") {
		t.Fatalf("push: err = %v", err)
	}
	if IsRetryable(err) {
		t.Fatal("a partition mismatch must not be retryable")
	}
	_, err = tr.Digest(ctx, peer, DigestRequest{From: "eu", Partitions: parts, Buckets: make([]uint64, DigestBuckets)})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("digest: err = %v", err)
	}

	src := newFakeSource("eu", parts)
	fill(src, 10, 1)
	sh := newShipper(t, ShipperConfig{Region: "eu", Source: src, Transport: tr, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond})
	sh.SetPeers([]Peer{peer})
	eventually(t, "mismatch reported", 10*time.Second, nil, func() bool {
		s := sh.Stats()[0]
		return s.Consecutive >= 2 && strings.Contains(s.LastError, "partition count mismatch") && !s.Handshaken
	})
	if c, _ := sink.Cursor(ctx, "eu"); c.Cells != 0 || len(sink.applied["eu"][0]) != 0 {
		t.Fatal("a refused sender changed the receiver")
	}
}

// Peers come and go through SetPeers (and a PeerSource); a retired peer's
// stats stay visible as inactive; Close stops everything and is idempotent
// under concurrent calls.
func TestSetPeersAndClose(t *testing.T) {
	src := newFakeSource("eu", parts)
	sinkUS, sinkAP := newFakeSink(parts), newFakeSink(parts)
	us := startReceiver(t, "", newServer(t, "us", parts, sinkUS))
	ap := startReceiver(t, "", newServer(t, "ap", parts, sinkAP))
	ps := &staticPeers{ch: make(chan struct{}, 1)}
	ps.set([]Peer{{Region: "us", GRPCAddr: us.addr}, {Region: "ap", GRPCAddr: ap.addr}})
	sh, err := NewShipper(ShipperConfig{Region: "eu", Source: src, Transport: newTransport(t), Peers: ps, PollInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fill(src, 50, 9)
	eventually(t, "both converged", 20*time.Second, nil, func() bool {
		return converged(src, sinkUS)() && converged(src, sinkAP)() && caughtUp(sh, "us", src)() && caughtUp(sh, "ap", src)()
	})
	ps.set([]Peer{{Region: "us", GRPCAddr: us.addr}})
	eventually(t, "ap retired", 10*time.Second, nil, func() bool {
		st := sh.Stats()
		return len(st) == 2 && st[0].Region == "ap" && !st[0].Active && st[0].Pushes > 0 && st[1].Active
	})
	fill(src, 10, 10)
	eventually(t, "us still shipped", 20*time.Second, nil, converged(src, sinkUS))
	if equalU64(sinkAP.logCursor("eu"), src.heads()) {
		t.Fatal("retired peer still receives")
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = sh.Close() }()
	}
	wg.Wait()
	for _, s := range sh.Stats() {
		if s.Active {
			t.Fatalf("active after Close: %+v", s)
		}
	}
	sh.SetPeers([]Peer{{Region: "ap", GRPCAddr: ap.addr}}) // no-op after Close
	if st := sh.Stats(); len(st) != 2 || st[0].Active {
		t.Fatalf("SetPeers after Close started a loop: %+v", st)
	}
}

type staticPeers struct {
	mu    sync.Mutex
	peers []Peer
	ch    chan struct{}
}

func (s *staticPeers) set(p []Peer) {
	s.mu.Lock()
	s.peers = p
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *staticPeers) Peers() []Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Peer(nil), s.peers...)
}

func (s *staticPeers) Changes() <-chan struct{} { return s.ch }

// A caught-up loop with nothing new does not push (the watermark has not
// moved), and the watermark alone moving is shipped.
func TestIdleAndWatermarkOnly(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := newFakeSource("eu", parts)
	sink := newFakeSink(parts)
	ct := &countingPushes{Transport: &directTransport{srv: newServer(t, "us", parts, sink)}}
	sh := newShipper(t, ShipperConfig{Region: "eu", Source: src, Transport: ct, Clock: clk, AntiEntropy: -1})
	sh.SetPeers([]Peer{{Region: "us", GRPCAddr: "inproc"}})
	fill(src, 20, 4)
	step := func() { clk.Advance(100 * time.Millisecond) }
	eventually(t, "converged", 10*time.Second, step, converged(src, sink))
	reads := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.reads
	}
	n, r0 := ct.n.Load(), reads()
	// Let the loop poll a few times: reads prove it looked, pushes must not move.
	eventually(t, "loop polled", 10*time.Second, step, func() bool { return reads() > r0+3*parts })
	if got := ct.n.Load(); got != n {
		t.Fatalf("idle loop pushed %d times", got-n)
	}
	src.mu.Lock()
	src.wm += 500
	src.mu.Unlock()
	eventually(t, "watermark shipped alone", 10*time.Second, step, func() bool { return sink.watermark("eu") == src.watermark() })
}

type countingPushes struct {
	Transport
	n atomic.Int64
}

func (c *countingPushes) Push(ctx context.Context, p Peer, b Batch) (Cursor, error) {
	c.n.Add(1)
	return c.Transport.Push(ctx, p, b)
}

// directTransport calls a Server in process through the wire codec.
type directTransport struct{ srv *Server }

func (d *directTransport) Push(ctx context.Context, _ Peer, b Batch) (Cursor, error) {
	cur, err := d.srv.Push(ctx, wire(b))
	return wire(cur), err
}

func (d *directTransport) Digest(ctx context.Context, _ Peer, req DigestRequest) (DigestResponse, error) {
	resp, err := d.srv.Digest(ctx, wire(req))
	return wire(resp), err
}

func TestShipperConfigDefaults(t *testing.T) {
	src := newFakeSource("eu", parts)
	tr := &directTransport{}
	c, err := ShipperConfig{Region: "eu", Source: src, Transport: tr}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxEvents != 4096 || c.MaxCells != 4096 || c.PushTimeout != 5*time.Second ||
		c.RetryMin != 100*time.Millisecond || c.RetryMax != 5*time.Second ||
		c.AntiEntropy != 30*time.Second || c.PollInterval != 100*time.Millisecond || c.Clock == nil {
		t.Fatalf("defaults = %+v", c)
	}
	for _, bad := range []ShipperConfig{
		{Source: src, Transport: tr},
		{Region: "eu", Transport: tr},
		{Region: "eu", Source: src},
		{Region: "eu", Source: src, Transport: tr, MaxEvents: -1},
		{Region: "eu", Source: src, Transport: tr, RetryMin: time.Second, RetryMax: time.Millisecond},
		{Region: "eu", Source: src, Transport: tr, PushTimeout: -time.Second},
	} {
		if _, err := NewShipper(bad); err == nil {
			t.Errorf("NewShipper(%+v) accepted", bad)
		}
	}
}

// Anti-entropy repairs a receiver that lost every cell, in bounded groups.
func TestAntiEntropyRepairsEverythingInGroups(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := newFakeSource("eu", parts)
	for i := 0; i < 300; i++ {
		src.bumpCell(fmt.Sprintf("item-%d", i), uint32(i%parts), int64(i))
	}
	sink := newFakeSink(parts)
	sh := newShipper(t, ShipperConfig{Region: "eu", Source: src, Transport: &directTransport{srv: newServer(t, "us", parts, sink)},
		Clock: clk, MaxCells: 2}) // groups of at most 32 cells
	sh.SetPeers([]Peer{{Region: "us", GRPCAddr: "inproc"}})
	step := func() { clk.Advance(100 * time.Millisecond) }
	eventually(t, "converged", 20*time.Second, step, converged(src, sink))
	eventually(t, "acknowledged", 20*time.Second, step, caughtUp(sh, "us", src))
	for k := range sink.cellsOf("eu") {
		sink.deleteCell(k)
	}
	clk.Advance(31 * time.Second)
	eventually(t, "all cells repaired", 20*time.Second, step, converged(src, sink))
	eventually(t, "repairs counted", 5*time.Second, step, func() bool { return sh.Stats()[0].CellsRepaired >= 300 })
}

// Close stops every goroutine the shipper started.
func TestCloseStopsGoroutines(t *testing.T) {
	src := newFakeSource("eu", parts)
	fill(src, 20, 1)
	ps := &staticPeers{ch: make(chan struct{}, 1)}
	ps.set([]Peer{{Region: "us", GRPCAddr: "inproc"}, {Region: "ap", GRPCAddr: "inproc2"}})
	tr := &flakyTransport{srv: newServer(t, "us", parts, newFakeSink(parts)), r: rand.New(rand.NewPCG(1, 2)), faults: map[string]int{}}
	sh, err := NewShipper(ShipperConfig{Region: "eu", Source: src, Transport: tr, Peers: ps,
		PollInterval: time.Millisecond, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "loops running", 10*time.Second, nil, func() bool { return len(sh.Stats()) == 2 && sh.Stats()[0].Pushes > 0 })
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	// A loop signals done just before it returns, so allow it a moment to exit.
	buf := make([]byte, 1<<20)
	eventually(t, "shipper goroutines gone", 5*time.Second, nil, func() bool {
		stacks := string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "(*peerLoop).run") && !strings.Contains(stacks, "(*Shipper).follow")
	})
}
