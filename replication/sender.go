package replication

import (
	"context"
	"fmt"
)

// Sender is the shipping protocol towards one peer, without goroutines,
// timers or locks: what to push next, and what a peer's answer means. The
// Shipper's peer loop drives one per peer (as raft's Node drives a RawNode);
// the simulation drives it directly, one step at a time, with its pushes and
// answers in flight on a simulated network. A Sender is not safe for
// concurrent use.
//
// The protocol: until the peer has told its cursor for this region (the
// handshake, an empty batch), Next returns the handshake. Then each Next reads
// the source in the order that keeps the watermark honest (see build) from
// the peer's cursor as last acknowledged, and Acked adopts the cursor the peer
// answers as the truth, even when it went back (the peer restored an older
// state; resending is harmless, the receiver applies nothing twice).
type Sender struct {
	region               string
	maxEvents, maxCells  int // configured limits
	curEvents, curCells  int // current limits: halved when a push is too large, doubled back slowly
	okStreak             int
	cur                  Cursor // the peer's cursor as last acknowledged
	handshaken           bool
	heads                []uint64 // this region's log heads as last read
	start                int      // partition to read first (rotates, for fairness)
	lastWm               int64    // watermark the peer acknowledged
	cellsDone            bool     // the last batch carried every cell change
	behind               bool     // the peer's cursor is below the source's truncation point (snapshot.go)
	rebuildFor           string   // the peer rebuilds its lost data from this region: its name (snapshot.go)
	pushes, events, cell uint64
}

// NewSender starts the protocol towards one peer from an unknown cursor.
// maxEvents and maxCells bound one batch (over all partitions) and must be > 0.
func NewSender(region string, maxEvents, maxCells int) *Sender {
	return &Sender{
		region: region, maxEvents: maxEvents, maxCells: maxCells,
		curEvents: maxEvents, curCells: maxCells,
	}
}

// SetLimits changes the batch limits (both > 0) from the next batch on.
func (s *Sender) SetLimits(maxEvents, maxCells int) {
	s.maxEvents, s.maxCells = maxEvents, maxCells
	s.curEvents, s.curCells = maxEvents, maxCells
	s.okStreak = 0
}

// Handshaken reports whether the peer has told its cursor.
func (s *Sender) Handshaken() bool { return s.handshaken }

// Next returns the batch to push now. send is false when there is nothing new
// for the peer; more reports that the source holds more than the batch
// carries (push again at once once it is acknowledged).
func (s *Sender) Next(ctx context.Context, src Source) (b Batch, send, more bool, err error) {
	parts := src.Partitions()
	if !s.handshaken {
		return Batch{From: s.region, Partitions: parts}, true, true, nil
	}
	b, more, err = s.build(ctx, src, parts)
	if err != nil {
		return b, false, false, err
	}
	if len(b.Parts) == 0 && len(b.Cells) == 0 && b.CellsThrough == s.cur.Cells && b.Watermark <= s.lastWm {
		return b, false, false, nil
	}
	return b, true, more, nil
}

// build reads the source in the order that makes the watermark honest: the
// watermark first, then the log, then the cell changes. The watermark is
// attached only when the cell changes were read to the end, so every cell
// change it vouches for is in this batch or acknowledged before it.
func (s *Sender) build(ctx context.Context, src Source, parts int) (Batch, bool, error) {
	s.fit(parts)
	b := Batch{From: s.region, Partitions: parts, CellsAfter: s.cur.Cells}
	wm, err := src.OwnWatermark(ctx)
	if err != nil {
		return b, false, err
	}
	more := false
	budget := s.curEvents
	for i := 0; i < parts; i++ {
		if budget <= 0 {
			more = true
			break
		}
		p := (s.start + i) % parts
		after := s.cur.Log[p]
		evs, head, err := src.Read(ctx, uint32(p), after, budget)
		if err != nil {
			return b, false, s.readErr(err)
		}
		s.heads[p] = head.Pos
		if after > head.Pos {
			return b, false, peerAhead(p, after, head.Pos) // snapshot.go
		}
		if len(evs) == 0 {
			continue
		}
		if len(evs) > budget {
			return b, false, fmt.Errorf("source returned %d events of partition %d, asked for %d", len(evs), p, budget)
		}
		if len(evs) == budget {
			more = true
		}
		budget -= len(evs)
		last := evs[len(evs)-1].Pos
		s.heads[p] = max(s.heads[p], last)
		b.Parts = append(b.Parts, PartBatch{Partition: uint32(p), Events: evs, Through: last, After: after})
	}
	s.start = (s.start + 1) % parts
	cells, through, err := src.CellChanges(ctx, s.cur.Cells, s.curCells)
	if err != nil {
		return b, false, s.readErr(err)
	}
	b.Cells = cells
	b.CellsThrough = max(through, s.cur.Cells)
	s.cellsDone = len(cells) < s.curCells
	if s.cellsDone {
		b.Watermark = wm
	} else {
		more = true
	}
	return b, more, nil
}

// Acked adopts the peer's answer cur to a push of b. It reports whether the
// peer's cursor moved forward (a receiver that keeps refusing — a gap it
// reports, a stuck store — should be retried at poll pace, not at once).
func (s *Sender) Acked(b Batch, cur Cursor) bool {
	before := s.cur
	if !s.handshaken {
		// The handshake's answer (or the first answer of any kind): the
		// peer's cursor is known from now on.
		s.adopt(cur, b.Partitions)
		return true
	}
	if s.okStreak++; s.okStreak >= 16 {
		s.okStreak = 0
		s.curEvents = min(s.maxEvents, s.curEvents*2)
		s.curCells = min(s.maxCells, s.curCells*2)
	}
	// The watermark counts as acknowledged only when the peer took the
	// batch's cells: its cell cursor did not lag behind CellsAfter and now
	// covers CellsThrough.
	if b.Watermark != 0 && b.CellsAfter <= cur.Cells && cur.Cells >= b.CellsThrough {
		s.lastWm = max(s.lastWm, b.Watermark)
	}
	s.pushes++
	for _, pb := range b.Parts {
		s.events += uint64(len(pb.Events))
	}
	s.cell += uint64(len(b.Cells))
	s.adopt(cur, b.Partitions)
	return progressed(before, s.cur)
}

// adopt takes the peer's cursor as the truth.
func (s *Sender) adopt(cur Cursor, parts int) {
	s.handshaken = true
	s.fit(parts)
	s.cur = normalize(cur, parts)
}

// fit sizes the per-partition state for parts partitions.
func (s *Sender) fit(parts int) {
	if len(s.heads) != parts {
		h := make([]uint64, parts)
		copy(h, s.heads)
		s.heads = h
	}
	if len(s.cur.Log) != parts {
		s.cur = normalize(s.cur, parts)
	}
	if parts > 0 {
		s.start %= parts
	}
}

// Refused records that a push failed with err: a batch too large for the
// peer halves the limits (they double back after 16 successes in a row).
func (s *Sender) Refused(err error) {
	if isTooLarge(err) {
		s.curEvents = max(1, s.curEvents/2)
		s.curCells = max(1, s.curCells/2)
		s.okStreak = 0
	}
}

func progressed(before, after Cursor) bool {
	if after.Cells > before.Cells {
		return true
	}
	for i := range after.Log {
		if i < len(before.Log) && after.Log[i] > before.Log[i] {
			return true
		}
	}
	return false
}

// SenderState is what a Sender knows about its peer (for stats).
type SenderState struct {
	Handshaken bool
	Acked      Cursor   // the peer's cursor for this region as last acknowledged
	Heads      []uint64 // this region's log heads as last read
	LagEvents  uint64   // Σ over partitions of head − acked position
	// CellsCaughtUp is true when the last batch carried every cell change.
	CellsCaughtUp bool
	Watermark     int64 // the watermark the peer last acknowledged
	// Pushes, EventsShipped and CellsShipped count acknowledged pushes and
	// what they carried (resends included).
	Pushes, EventsShipped, CellsShipped uint64
}

// State returns a copy of what the Sender knows.
func (s *Sender) State() SenderState {
	var lag uint64
	for p, h := range s.heads {
		if p < len(s.cur.Log) && h > s.cur.Log[p] {
			lag += h - s.cur.Log[p]
		}
	}
	return SenderState{
		Handshaken: s.handshaken, Acked: normalize(s.cur, len(s.cur.Log)),
		Heads: append([]uint64(nil), s.heads...), LagEvents: lag,
		CellsCaughtUp: s.cellsDone, Watermark: s.lastWm,
		Pushes: s.pushes, EventsShipped: s.events, CellsShipped: s.cell,
	}
}

// CellsCaughtUp reports whether the last batch carried every cell change (an
// anti-entropy round is due only then: it compares settled states).
func (s *Sender) CellsCaughtUp() bool { return s.cellsDone }

// PushFunc pushes one batch to the peer and returns its cursor.
type PushFunc func(ctx context.Context, b Batch) (Cursor, error)

// DigestFunc asks the peer which digest buckets differ.
type DigestFunc func(ctx context.Context, req DigestRequest) (DigestResponse, error)

// AntiEntropyResult is what one digest round did.
type AntiEntropyResult struct {
	Mismatched int // buckets the peer reported different
	Repaired   int // cell states pushed
}

// aeGroupFactor × MaxCells bounds the cells one repair scan collects.
const aeGroupFactor = 16

// AntiEntropy runs one digest round with the peer, synchronously through
// digest and push: hash this region's own cells into DigestBuckets buckets,
// ask the peer which buckets differ in its copy, and push the full latest
// state of every cell in those buckets, in chunks of at most the current
// cell limit. Repair batches leave the cell cursor where it is (CellsAfter =
// CellsThrough = acknowledged) and carry no watermark: they add states, they
// vouch for nothing. A failure of the local source is a *localError.
func (s *Sender) AntiEntropy(ctx context.Context, src Source, digest DigestFunc, push PushFunc) (AntiEntropyResult, error) {
	var res AntiEntropyResult
	parts := src.Partitions()
	var (
		d      Digest
		counts [DigestBuckets]int
	)
	err := src.ScanCells(ctx, s.region, func(c CellState) error {
		if c.Key.Region == s.region {
			d.Add(c)
			counts[BucketOf(c.Key.Item)]++
		}
		return nil
	})
	if err != nil {
		return res, &localError{fmt.Errorf("anti-entropy: scan own cells: %w", err)}
	}
	resp, err := digest(ctx, DigestRequest{From: s.region, Partitions: parts, Buckets: d[:]})
	if err != nil {
		return res, fmt.Errorf("anti-entropy digest: %w", err)
	}
	s.adopt(resp.Cursor, parts)
	res.Mismatched = len(resp.Mismatched)
	// Repair the mismatched buckets in groups of at most aeGroupFactor×MaxCells
	// cells (a single larger bucket forms its own group), one scan per group:
	// memory stays bounded however much the receiver lost.
	limit := aeGroupFactor * s.maxCells
	pending := resp.Mismatched
	for len(pending) > 0 {
		group := map[uint32]bool{}
		total := 0
		for len(pending) > 0 {
			b := pending[0]
			if b >= DigestBuckets {
				pending = pending[1:]
				continue // a confused peer; ignore
			}
			if len(group) > 0 && total+counts[b] > limit {
				break
			}
			group[b] = true
			total += counts[b]
			pending = pending[1:]
		}
		// Collect first: a store iterator is not held open across network calls.
		cells := make([]CellState, 0, total)
		err := src.ScanCells(ctx, s.region, func(c CellState) error {
			if c.Key.Region == s.region && group[BucketOf(c.Key.Item)] {
				cells = append(cells, c)
			}
			return nil
		})
		if err != nil {
			return res, &localError{fmt.Errorf("anti-entropy: scan own cells: %w", err)}
		}
		for len(cells) > 0 {
			n := min(len(cells), s.curCells)
			b := Batch{
				From: s.region, Partitions: parts, Cells: cells[:n],
				CellsAfter: s.cur.Cells, CellsThrough: s.cur.Cells,
			}
			cur, err := push(ctx, b)
			if err != nil {
				s.Refused(err)
				return res, fmt.Errorf("anti-entropy repair: %w", err)
			}
			cells = cells[n:]
			res.Repaired += n
			s.Acked(b, cur)
		}
	}
	return res, nil
}
