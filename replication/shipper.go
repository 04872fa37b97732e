package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
)

// Transport carries batches and digests to a peer. GRPCTransport is the
// production implementation; tests use fakes that drop, duplicate or fail.
// Implementations must be safe for concurrent use (one call per peer at a time).
type Transport interface {
	// Push delivers b and returns the peer's cursor for the sender afterwards.
	Push(ctx context.Context, peer Peer, b Batch) (Cursor, error)
	// Digest asks the peer which anti-entropy buckets differ.
	Digest(ctx context.Context, peer Peer, req DigestRequest) (DigestResponse, error)
}

// PeerSource tells the shipper whom to ship to; Membership implements it.
type PeerSource interface {
	// Peers is the current set of other regions.
	Peers() []Peer
	// Changes receives a value (coalesced) whenever Peers may have changed.
	Changes() <-chan struct{}
}

// Optional Transport extensions the shipper uses when present.
type (
	byteCounter interface{ BytesSent(addr string) uint64 }
	forgetter   interface{ Forget(addr string) }
)

// ShipperConfig configures a Shipper. Zero fields take the documented default;
// negative durations and sizes are errors (except AntiEntropy, where negative
// disables it).
type ShipperConfig struct {
	// Region is this region's name: the From of every batch, and the region
	// whose cells anti-entropy digests. Required.
	Region string
	// Source reads this region's own log, cells and watermark. Required.
	Source Source
	// Transport carries batches to peers. Required. The shipper does not close it.
	Transport Transport
	// Peers, if set, is followed for the peer set (SetPeers is then called on
	// every change). Without it, call SetPeers.
	Peers PeerSource
	// Clock drives polling, backoff and anti-entropy timers. Default clock.Real{}.
	Clock clock.Clock
	// Logger receives state changes (peer failing, peer recovered). Default: discard.
	Logger *slog.Logger

	// MaxEvents bounds the log events in one batch, over all partitions
	// (default 4096).
	MaxEvents int
	// MaxCells bounds the cell states in one batch (default 4096).
	MaxCells int
	// PushTimeout bounds one Push or Digest call (default 5s).
	PushTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failure (defaults 100ms
	// and 5s): it doubles from RetryMin per consecutive failure up to RetryMax,
	// with jitter in [d/2, d). Non-retryable errors wait RetryMax at once.
	RetryMin, RetryMax time.Duration
	// PollInterval is how often a caught-up peer loop looks for new data
	// (default 100ms). Kick wakes loops sooner.
	PollInterval time.Duration
	// AntiEntropy is the digest interval per peer (default 30s; negative disables).
	AntiEntropy time.Duration
}

func (c ShipperConfig) withDefaults() (ShipperConfig, error) {
	switch {
	case c.Region == "":
		return c, errors.New("replication: ShipperConfig.Region is required")
	case c.Source == nil:
		return c, errors.New("replication: ShipperConfig.Source is required")
	case c.Transport == nil:
		return c, errors.New("replication: ShipperConfig.Transport is required")
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	defInt := func(v *int, d int, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("replication: ShipperConfig.%s must be > 0, got %d", name, *v)
		}
		return nil
	}
	defDur := func(v *time.Duration, d time.Duration, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("replication: ShipperConfig.%s must be > 0, got %v", name, *v)
		}
		return nil
	}
	if c.AntiEntropy == 0 {
		c.AntiEntropy = 30 * time.Second
	}
	err := errors.Join(
		defInt(&c.MaxEvents, 4096, "MaxEvents"),
		defInt(&c.MaxCells, 4096, "MaxCells"),
		defDur(&c.PushTimeout, 5*time.Second, "PushTimeout"),
		defDur(&c.RetryMin, 100*time.Millisecond, "RetryMin"),
		defDur(&c.RetryMax, 5*time.Second, "RetryMax"),
		defDur(&c.PollInterval, 100*time.Millisecond, "PollInterval"),
	)
	if err != nil {
		return c, err
	}
	if c.RetryMin > c.RetryMax {
		return c, fmt.Errorf("replication: ShipperConfig.RetryMin %v > RetryMax %v", c.RetryMin, c.RetryMax)
	}
	return c, nil
}

// PeerStats is what the shipper knows about one peer, for metrics and
// `likectl regions`.
type PeerStats struct {
	Region string
	Addr   string
	// Active is true while a loop ships to the peer (false after it left the
	// peer set; the counters are kept).
	Active bool
	// Handshaken is true once the peer has told its cursor in this loop.
	Handshaken bool
	// Acked is the peer's cursor for this region as last acknowledged.
	Acked Cursor
	// Heads are this region's log heads as last read for the peer.
	Heads []uint64
	// LagEvents is Σ over partitions of head − acked position.
	LagEvents uint64
	// CellsCaughtUp is true when the last batch carried every cell change.
	CellsCaughtUp bool
	// Watermark is the region watermark the peer last acknowledged.
	Watermark int64

	Pushes        uint64 // successful pushes
	EventsShipped uint64 // events in successful pushes (resends included)
	CellsShipped  uint64 // cell states in successful pushes, repairs included
	BytesShipped  uint64 // encoded bytes sent, when the transport counts them
	DigestRounds  uint64
	CellsRepaired uint64 // cell states pushed by anti-entropy
	Snapshots     uint64 // snapshot catch-ups of a peer behind the retention horizon
	LastDigest    time.Time

	Failures    uint64 // failed calls (push, digest or local read)
	Consecutive int    // failures since the last success
	LastError   string
	LastErrorAt time.Time
	LastSuccess time.Time
}

// Shipper ships this region's own log events and own cells to every peer:
// one goroutine loop per peer, each with its own context. See the package
// documentation for the protocol.
type Shipper struct {
	cfg    ShipperConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the peer-following goroutine

	mu      sync.Mutex
	closed  bool
	loops   map[string]*peerLoop // by region
	retired map[string]PeerStats // stats of peers no longer shipped to

	closeOnce sync.Once
}

// NewShipper validates cfg and starts the shipper. With cfg.Peers set it
// follows that source at once; otherwise it ships to nobody until SetPeers.
func NewShipper(cfg ShipperConfig) (*Shipper, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Shipper{
		cfg: cfg, ctx: ctx, cancel: cancel,
		loops: make(map[string]*peerLoop), retired: make(map[string]PeerStats),
	}
	if cfg.Peers != nil {
		s.wg.Add(1)
		go s.follow(cfg.Peers)
	}
	return s, nil
}

func (s *Shipper) follow(ps PeerSource) {
	defer s.wg.Done()
	ch := ps.Changes()
	for {
		s.SetPeers(ps.Peers())
		select {
		case <-s.ctx.Done():
			return
		case <-ch:
		}
	}
}

// SetPeers makes peers the set shipped to: loops start for new regions, stop
// for regions no longer present, and restart for a region whose address
// changed. Entries for this region, without a region or without an address
// are ignored; for a region listed twice the first entry wins.
func (s *Shipper) SetPeers(peers []Peer) {
	want := make(map[string]Peer, len(peers))
	for _, p := range peers {
		if p.Region == "" || p.Region == s.cfg.Region || p.GRPCAddr == "" {
			continue
		}
		if _, dup := want[p.Region]; !dup {
			want[p.Region] = p
		}
	}
	var stopped []*peerLoop
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	for region, l := range s.loops {
		if p, ok := want[region]; ok && p == l.peer {
			continue
		}
		l.cancel()
		stopped = append(stopped, l)
		delete(s.loops, region)
	}
	for region, p := range want {
		if _, ok := s.loops[region]; ok {
			continue
		}
		prev := s.retired[region]
		delete(s.retired, region)
		l := s.newLoop(p, prev)
		s.loops[region] = l
		go l.run()
	}
	s.mu.Unlock()
	s.retire(stopped)
}

// retire waits for stopped loops and keeps their stats. A loop whose region
// was restarted meanwhile (address change) keeps the new loop's stats.
func (s *Shipper) retire(stopped []*peerLoop) {
	for _, l := range stopped {
		<-l.done
		if f, ok := s.cfg.Transport.(forgetter); ok {
			f.Forget(l.peer.GRPCAddr)
		}
		st := l.stats()
		st.Active = false
		st.Handshaken = false
		s.mu.Lock()
		if _, running := s.loops[l.peer.Region]; !running {
			s.retired[l.peer.Region] = st
		}
		s.mu.Unlock()
	}
}

// Kick wakes every caught-up peer loop to look for new data now (call it
// after a commit to ship sooner than PollInterval). It never blocks.
func (s *Shipper) Kick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.loops {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Stats returns a snapshot per peer, active or not, sorted by region.
func (s *Shipper) Stats() []PeerStats {
	s.mu.Lock()
	out := make([]PeerStats, 0, len(s.loops)+len(s.retired))
	for _, l := range s.loops {
		out = append(out, l.stats())
	}
	for _, st := range s.retired {
		out = append(out, st)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// Close stops every loop and waits for them. It is idempotent and safe to
// call concurrently; every call returns after the shipper has stopped.
func (s *Shipper) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.cancel()
		var stopped []*peerLoop
		for region, l := range s.loops {
			stopped = append(stopped, l)
			delete(s.loops, region)
		}
		s.mu.Unlock()
		s.wg.Wait()
		s.retire(stopped)
	})
	return nil
}

// peerLoop ships to one peer: it drives a Sender with the transport, the
// clock and backoff. Fields below mu are shared with Stats; the rest belong to
// the loop goroutine.
type peerLoop struct {
	s      *Shipper
	peer   Peer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}
	snd    *Sender
	// base is the stats of earlier loops to the same region: the Sender's
	// counters start at zero in every loop.
	base PeerStats

	mu sync.Mutex
	st PeerStats
}

func (s *Shipper) newLoop(p Peer, prev PeerStats) *peerLoop {
	ctx, cancel := context.WithCancel(s.ctx)
	st := prev
	st.Region, st.Addr, st.Active, st.Handshaken = p.Region, p.GRPCAddr, true, false
	return &peerLoop{
		s: s, peer: p, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), kick: make(chan struct{}, 1),
		st: st, base: prev,
		snd: NewSender(s.cfg.Region, s.cfg.MaxEvents, s.cfg.MaxCells),
	}
}

func (l *peerLoop) stats() PeerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	st.Acked = normalize(st.Acked, len(st.Acked.Log))
	st.Heads = append([]uint64(nil), st.Heads...)
	if bc, ok := l.s.cfg.Transport.(byteCounter); ok {
		st.BytesShipped = bc.BytesSent(l.peer.GRPCAddr)
	}
	return st
}

func (l *peerLoop) run() {
	defer close(l.done)
	cfg := &l.s.cfg
	poll := cfg.Clock.NewTicker(cfg.PollInterval)
	defer poll.Stop()
	var aeC <-chan time.Time
	if cfg.AntiEntropy > 0 {
		ae := cfg.Clock.NewTicker(cfg.AntiEntropy)
		defer ae.Stop()
		aeC = ae.C()
	}
	aeDue := false
	for l.ctx.Err() == nil {
		more, err := l.step()
		if err == nil {
			select {
			case <-aeC:
				aeDue = true
			default:
			}
			if aeDue && l.snd.CellsCaughtUp() {
				err = l.antiEntropy()
				if err == nil {
					aeDue = false
				}
			}
		}
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			l.failed(err)
			if !l.backoff(err) {
				return
			}
			continue
		}
		if more {
			continue
		}
		select {
		case <-l.ctx.Done():
			return
		case <-poll.C():
		case <-l.kick:
		case <-aeC:
			aeDue = true
		}
	}
}

// step pushes what the Sender says is next. more reports that the source had
// more than one batch could carry and the peer made progress.
func (l *peerLoop) step() (more bool, err error) {
	if l.snd.Behind() {
		return true, l.catchUpSnapshot() // snapshot.go
	}
	b, send, more, err := l.snd.Next(l.ctx, l.s.cfg.Source)
	if err != nil && l.snd.Behind() {
		return true, l.catchUpSnapshot()
	}
	if err != nil {
		return false, &localError{fmt.Errorf("read local source: %w", err)}
	}
	if !send {
		l.note(false, nil)
		return false, nil // nothing new
	}
	cur, err := l.push(l.ctx, b)
	if err != nil && IsRebuildWanted(err) {
		l.snd.RebuildWanted(l.peer.Region)
		return true, l.catchUpSnapshot()
	}
	if err != nil {
		l.snd.Refused(err)
		return false, err
	}
	progressed := l.snd.Acked(b, cur)
	l.note(true, nil)
	// Loop again at once only while the peer makes progress: a receiver that
	// keeps refusing (a gap it reports, a stuck store) is retried at poll pace.
	return more && progressed, nil
}

func (l *peerLoop) push(ctx context.Context, b Batch) (Cursor, error) {
	ctx, cancel := context.WithTimeout(ctx, l.s.cfg.PushTimeout)
	defer cancel()
	return l.s.cfg.Transport.Push(ctx, l.peer, b)
}

func (l *peerLoop) digest(ctx context.Context, req DigestRequest) (DigestResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, l.s.cfg.PushTimeout)
	defer cancel()
	return l.s.cfg.Transport.Digest(ctx, l.peer, req)
}

// antiEntropy runs one digest round through the Sender (see
// Sender.AntiEntropy) and records it.
func (l *peerLoop) antiEntropy() error {
	res, err := l.snd.AntiEntropy(l.ctx, l.s.cfg.Source, l.digest, l.push)
	l.note(res.Repaired > 0, func(st *PeerStats) { st.CellsRepaired += uint64(res.Repaired) })
	if err != nil {
		return err
	}
	now := l.s.cfg.Clock.Now()
	l.note(true, func(st *PeerStats) {
		st.DigestRounds++
		st.LastDigest = now
	})
	if res.Repaired > 0 {
		l.s.cfg.Logger.Info("replication: anti-entropy repaired cells", "peer", l.peer.Region,
			"buckets", res.Mismatched, "cells", res.Repaired)
	}
	return nil
}

// note copies the Sender's state into the shared stats, records a success
// of the peer when ok, then applies f.
func (l *peerLoop) note(ok bool, f func(*PeerStats)) {
	ss := l.snd.State()
	now := l.s.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.st
	if ok {
		if st.Consecutive > 0 {
			l.s.cfg.Logger.Info("replication: peer recovered", "peer", l.peer.Region, "after_failures", st.Consecutive)
		}
		st.Consecutive = 0
		st.LastSuccess = now
	}
	st.Handshaken = ss.Handshaken
	st.Acked = ss.Acked
	st.Heads = ss.Heads
	st.LagEvents = ss.LagEvents
	st.CellsCaughtUp = ss.CellsCaughtUp
	st.Watermark = ss.Watermark
	st.Pushes = l.base.Pushes + ss.Pushes
	st.EventsShipped = l.base.EventsShipped + ss.EventsShipped
	st.CellsShipped = l.base.CellsShipped + ss.CellsShipped
	if f != nil {
		f(st)
	}
}

func (l *peerLoop) failed(err error) {
	now := l.s.cfg.Clock.Now()
	l.note(false, func(st *PeerStats) {
		if st.Consecutive == 0 {
			l.s.cfg.Logger.Warn("replication: peer failing", "peer", l.peer.Region, "addr", l.peer.GRPCAddr, "err", err)
		}
		st.Failures++
		st.Consecutive++
		st.LastError = err.Error()
		st.LastErrorAt = now
	})
}

// backoff waits before the next attempt: exponential from RetryMin with jitter
// for retryable (and local) errors, RetryMax at once for errors retrying will
// not fix. It uses the injected clock's ticker and returns false when the loop
// is stopping.
func (l *peerLoop) backoff(err error) bool {
	cfg := &l.s.cfg
	l.mu.Lock()
	n := l.st.Consecutive
	l.mu.Unlock()
	d := cfg.RetryMax
	if IsRetryable(err) || !isRemote(err) {
		d = cfg.RetryMin
		for i := 1; i < n && d < cfg.RetryMax; i++ {
			d *= 2
		}
		d = min(d, cfg.RetryMax)
	}
	d = d/2 + rand.N(d/2+1)
	if d <= 0 {
		d = 1
	}
	t := cfg.Clock.NewTicker(d)
	defer t.Stop()
	select {
	case <-l.ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// isRemote reports whether err came from the peer or the transport (a gRPC
// status or a transport error) rather than this region's own store.
func isRemote(err error) bool {
	var local *localError
	return !errors.As(err, &local)
}

// localError marks a failure of this region's own Source.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }
