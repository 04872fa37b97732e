package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

var (
	_ Source = (*fakeSource)(nil)
	_ Sink   = (*fakeSink)(nil)
)

// fakeSource models a region's own side: a log with dense positions per
// partition, own cells with a change sequence, and a watermark.
type fakeSource struct {
	region string
	parts  int

	mu      sync.Mutex
	log     [][]edge.Event // log[p][i].Pos == i+1
	cells   map[crdt.CellKey]crdt.Cell
	changed map[crdt.CellKey]uint64 // key → sequence of its last change
	seq     uint64
	wm      int64
	reads   int // calls to Read, for tests that check idleness
}

func newFakeSource(region string, parts int) *fakeSource {
	return &fakeSource{region: region, parts: parts, log: make([][]edge.Event, parts),
		cells: map[crdt.CellKey]crdt.Cell{}, changed: map[crdt.CellKey]uint64{}}
}

// appendEvent commits one event to partition p and returns its position.
func (s *fakeSource) appendEvent(p uint32, item, user string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos := uint64(len(s.log[p]) + 1)
	// The receiver checks that item and bucket place the event in p.
	for n, base := 0, item; edge.PartitionOf(item, edge.BucketOf(user), s.parts) != p; n++ {
		item = fmt.Sprintf("%s~%d", base, n)
	}
	s.log[p] = append(s.log[p], edge.Event{
		Partition: p, Pos: pos, Item: item, User: user, Bucket: edge.BucketOf(user),
		Version: crdt.Version{Epoch: 1, Op: pos}, State: crdt.Liked, Delta: 1,
		EventTime: int64(pos), Kind: edge.KindFlip,
		Idem: &edge.IdemRef{Key: fmt.Sprintf("k%d", pos), Fingerprint: "f", ExpiresAt: 99, Liked: true, Changed: true},
	})
	return pos
}

// bumpCell adds one like to an own cell (as the aggregator would) and
// advances the watermark with it.
func (s *fakeSource) bumpCell(item string, shard uint32, wm int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := crdt.CellKey{Item: item, Region: s.region, Shard: shard}
	c := s.cells[k]
	c, err := c.Apply(crdt.Delta{P: 1}, c.HWM+1, wm)
	if err != nil {
		panic(err)
	}
	s.cells[k] = c
	s.seq++
	s.changed[k] = s.seq
	if wm > s.wm {
		s.wm = wm
	}
}

func (s *fakeSource) heads() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, s.parts)
	for p := range s.log {
		out[p] = uint64(len(s.log[p]))
	}
	return out
}

func (s *fakeSource) cellSet() crdt.CellSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := crdt.CellSet{}
	for k, c := range s.cells {
		out[k] = c
	}
	return out
}

func (s *fakeSource) watermark() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wm
}

func (s *fakeSource) Partitions() int { return s.parts }

func (s *fakeSource) Read(_ context.Context, p uint32, after uint64, max int) ([]edge.Event, pipeline.Head, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	l := s.log[p]
	head := pipeline.Head{Pos: uint64(len(l))}
	if after >= uint64(len(l)) {
		return nil, head, nil
	}
	evs := l[after:]
	if len(evs) > max {
		evs = evs[:max]
	}
	return append([]edge.Event(nil), evs...), head, nil
}

func (s *fakeSource) CellChanges(_ context.Context, after uint64, max int) ([]CellState, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type ch struct {
		k   crdt.CellKey
		seq uint64
	}
	var chs []ch
	for k, q := range s.changed {
		if q > after {
			chs = append(chs, ch{k, q})
		}
	}
	sort.Slice(chs, func(i, j int) bool { return chs[i].seq < chs[j].seq })
	through := s.seq
	if len(chs) > max {
		chs = chs[:max]
		through = chs[len(chs)-1].seq
	}
	out := make([]CellState, len(chs))
	for i, c := range chs {
		out[i] = CellState{Key: c.k, Cell: s.cells[c.k]}
	}
	return out, through, nil
}

func (s *fakeSource) OwnWatermark(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wm, nil
}

func (s *fakeSource) ScanCells(_ context.Context, region string, fn func(CellState) error) error {
	s.mu.Lock()
	var cs []CellState
	for k, c := range s.cells {
		if k.Region == region {
			cs = append(cs, CellState{Key: k, Cell: c})
		}
	}
	s.mu.Unlock()
	for _, c := range cs {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// fakeSink models a receiving region: it records every event it applies (to
// check exactly-once and order), merges cells with crdt.MergeCell, and keeps
// cursors and watermarks per sender atomically with each apply. It survives a
// "restart" of the Server in front of it (its state is the persisted store).
type fakeSink struct {
	parts int

	mu      sync.Mutex
	applied map[string][][]edge.Event // from → partition → events in apply order
	cursors map[string]Cursor
	cells   crdt.CellSet
	wms     map[string]int64
	failing error // when set, every call fails with it
}

func newFakeSink(parts int) *fakeSink {
	return &fakeSink{parts: parts, applied: map[string][][]edge.Event{}, cursors: map[string]Cursor{},
		cells: crdt.CellSet{}, wms: map[string]int64{}}
}

func (s *fakeSink) cursorLocked(from string) Cursor {
	c, ok := s.cursors[from]
	if !ok {
		c = Cursor{Log: make([]uint64, s.parts)}
		s.cursors[from] = c
		s.applied[from] = make([][]edge.Event, s.parts)
	}
	return c
}

func (s *fakeSink) ApplyRemote(_ context.Context, from string, p uint32, evs []edge.Event, through uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing != nil {
		return s.failing
	}
	c := s.cursorLocked(from)
	for _, ev := range evs {
		if ev.Pos > c.Log[p] {
			s.applied[from][p] = append(s.applied[from][p], ev)
		}
	}
	if through > c.Log[p] {
		log := append([]uint64(nil), c.Log...)
		log[p] = through
		s.cursors[from] = Cursor{Log: log, Cells: c.Cells}
	}
	return nil
}

func (s *fakeSink) MergeCells(_ context.Context, from string, cells []CellState, through uint64, wm int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing != nil {
		return s.failing
	}
	c := s.cursorLocked(from)
	for _, cs := range cells {
		if cs.Key.Region != from {
			return errors.New("fakeSink: foreign cell")
		}
		s.cells.Merge(crdt.CellSet{cs.Key: cs.Cell})
	}
	if through > c.Cells {
		s.cursors[from] = Cursor{Log: c.Log, Cells: through}
	}
	if wm > s.wms[from] {
		s.wms[from] = wm
	}
	return nil
}

func (s *fakeSink) Cursor(_ context.Context, from string) (Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing != nil {
		return Cursor{}, s.failing
	}
	c := s.cursorLocked(from)
	return Cursor{Log: append([]uint64(nil), c.Log...), Cells: c.Cells}, nil
}

func (s *fakeSink) ScanCells(_ context.Context, region string, fn func(CellState) error) error {
	s.mu.Lock()
	var cs []CellState
	for k, c := range s.cells {
		if k.Region == region {
			cs = append(cs, CellState{Key: k, Cell: c})
		}
	}
	s.mu.Unlock()
	for _, c := range cs {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeSink) cellsOf(region string) crdt.CellSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := crdt.CellSet{}
	for k, c := range s.cells {
		if k.Region == region {
			out[k] = c
		}
	}
	return out
}

func (s *fakeSink) deleteCell(k crdt.CellKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cells, k)
}

func (s *fakeSink) watermark(from string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wms[from]
}

func (s *fakeSink) logCursor(from string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.cursorLocked(from).Log...)
}

// checkExactlyOnce fails unless the sink applied, for every partition of
// from, exactly the events at positions 1..heads[p], once each, in order.
func (s *fakeSink) checkExactlyOnce(t *testing.T, from string, src *fakeSource) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	src.mu.Lock()
	defer src.mu.Unlock()
	for p := range src.log {
		got := s.applied[from][p]
		if len(got) != len(src.log[p]) {
			t.Fatalf("partition %d: applied %d events, log has %d", p, len(got), len(src.log[p]))
		}
		for i, ev := range got {
			want := src.log[p][i]
			if ev.Pos != uint64(i+1) || ev.Item != want.Item || ev.User != want.User ||
				ev.Version != want.Version || ev.Idem == nil || *ev.Idem != *want.Idem {
				t.Fatalf("partition %d index %d: applied %+v, want %+v", p, i, ev, want)
			}
		}
	}
}

// eventually polls cond (calling tick first, e.g. to advance a fake clock)
// every millisecond until it holds or the deadline passes.
func eventually(t *testing.T, what string, d time.Duration, tick func(), cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for {
		if tick != nil {
			tick()
		}
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tk.C
	}
}

// receiver is a real gRPC server on loopback in front of a Server.
type receiver struct {
	addr string
	gs   *grpc.Server
	done chan struct{}
}

func startReceiver(t *testing.T, addr string, srv *Server) *receiver {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	gs := grpc.NewServer(ServerOptions()...)
	srv.Register(gs)
	r := &receiver{addr: lis.Addr().String(), gs: gs, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(r.stop)
	return r
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func (r *receiver) stop() {
	r.gs.Stop()
	<-r.done
}

func newServer(t *testing.T, region string, parts int, sink Sink) *Server {
	t.Helper()
	s, err := NewServer(ServerConfig{Region: region, Partitions: parts, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newShipper(t *testing.T, cfg ShipperConfig) *Shipper {
	t.Helper()
	s, err := NewShipper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newTransport(t *testing.T) *GRPCTransport {
	t.Helper()
	tr, err := NewGRPCTransport(TransportConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func cellSetsEqual(a, b crdt.CellSet) bool {
	if len(a) != len(b) {
		return false
	}
	for k, c := range a {
		if b[k] != c {
			return false
		}
	}
	return true
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
