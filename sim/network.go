package sim

import (
	"fmt"

	"likes/replication"
)

// link is one direction between two regions: a queue of messages in flight.
type link struct {
	q   []*message
	cut bool // partitioned: deliveries are lost
}

// message is a push (sender → receiver) or its reply (receiver → sender).
type message struct {
	id       uint64
	from, to int
	reply    bool
	batch    replication.Batch  // push
	cursor   replication.Cursor // reply
	inc      int                // incarnation of the pushing region
	pushedWm int64              // reply: the push's watermark,
	after    uint64             // CellsAfter
	through  uint64             // and CellsThrough
}

// peerView is what a region's shipper knows about one peer (as the real
// shipper's peerLoop): the peer's cursor as last told, whether the handshake
// happened, and the watermark the peer acknowledged.
type peerView struct {
	handshaken bool
	cur        replication.Cursor
	lastWm     int64
}

func (s *sim) enqueue(m *message) {
	s.nextMsg++
	m.id = s.nextMsg
	l := s.links[m.from][m.to]
	l.q = append(l.q, m)
}

// sendRandom builds one push on a random link from the sender's store (or a
// handshake when the sender does not know the peer's cursor).
func (s *sim) sendRandom() {
	a, b := s.pick(len(s.regions)), s.pick(len(s.regions))
	if a == b {
		return
	}
	ra := s.regions[a]
	if ra.down() {
		return
	}
	pv := ra.out[b]
	bt := replication.Batch{From: ra.name, Partitions: s.k.Partitions}
	if pv.handshaken {
		var empty bool
		bt, empty = s.build(ra, pv)
		if empty {
			return
		}
	}
	s.enqueue(&message{from: a, to: b, batch: bt, inc: ra.inc})
	s.tracef("send %s→%s: %s", ra.name, s.names[b], describe(bt))
}

func describe(b replication.Batch) string {
	s := ""
	for _, pb := range b.Parts {
		s += fmt.Sprintf("p%d(%d..%d] ", pb.Partition, pb.After, pb.Through)
	}
	return s + fmt.Sprintf("cells %d (%d..%d] wm %d", len(b.Cells), b.CellsAfter, b.CellsThrough, b.Watermark)
}

// build reads the sender's store as the real shipper does: the watermark
// first, then the log after the peer's cursor, then the cell changes; the
// watermark rides along only when the cell changes were read to the end.
func (s *sim) build(r *region, pv *peerView) (replication.Batch, bool) {
	parts := s.k.Partitions
	b := replication.Batch{From: r.name, Partitions: parts, CellsAfter: pv.cur.Cells}
	wm, err := r.st.OwnWatermark(s.ctx)
	s.must(err, "own watermark")
	budget := s.k.MaxEvents
	start := s.pick(parts)
	for i := 0; i < parts && budget > 0; i++ {
		p := (start + i) % parts
		after := pv.cur.Log[p]
		evs, _, err := r.st.Read(s.ctx, uint32(p), after, budget)
		s.must(err, "read log")
		if len(evs) == 0 {
			continue
		}
		budget -= len(evs)
		b.Parts = append(b.Parts, replication.PartBatch{
			Partition: uint32(p), Events: evs, Through: evs[len(evs)-1].Pos, After: after,
		})
	}
	cells, through, err := r.st.CellChanges(s.ctx, pv.cur.Cells, s.k.MaxCells)
	s.must(err, "cell changes")
	b.Cells = cells
	b.CellsThrough = max(through, pv.cur.Cells)
	if len(cells) < s.k.MaxCells {
		b.Watermark = wm
	}
	empty := len(b.Parts) == 0 && len(b.Cells) == 0 && b.CellsThrough == pv.cur.Cells && b.Watermark <= pv.lastWm
	return b, empty
}

// deliverRandom delivers (or loses, duplicates, reorders) one message.
func (s *sim) deliverRandom() {
	var ls [][2]int
	for a := range s.links {
		for b, l := range s.links[a] {
			if l != nil && len(l.q) > 0 {
				ls = append(ls, [2]int{a, b})
			}
		}
	}
	if len(ls) == 0 {
		return
	}
	ab := ls[s.pick(len(ls))]
	l := s.links[ab[0]][ab[1]]
	i := 0
	if len(l.q) > 1 && s.rng.Float64() < s.k.PReorder {
		i = s.pick(len(l.q))
		if i > 0 {
			s.stats.Reordered++
		}
	}
	m := l.q[i]
	dup := s.rng.Float64() < s.k.PDup
	if dup {
		s.stats.Duplicated++
	} else {
		l.q = append(l.q[:i:i], l.q[i+1:]...)
	}
	if l.cut || s.rng.Float64() < s.k.PDrop {
		s.stats.Dropped++
		s.tracef("drop msg %d %s→%s (cut=%v)", m.id, s.names[m.from], s.names[m.to], l.cut)
		return
	}
	s.handle(m)
}

// handle delivers one message to its destination.
func (s *sim) handle(m *message) {
	dst := s.regions[m.to]
	if dst.down() {
		s.tracef("msg %d to %s: region down", m.id, dst.name)
		return
	}
	if m.reply {
		if dst.inc != m.inc {
			return // the connection died with the process that pushed
		}
		s.adopt(dst.out[m.from], m.cursor, m.pushedWm, m.after, m.through)
		s.tracef("reply %d %s→%s: cursor %v cells %d", m.id, s.names[m.from], dst.name, m.cursor.Log, m.cursor.Cells)
		return
	}
	cur, err := dst.srv.Push(s.ctx, m.batch)
	s.must(err, fmt.Sprintf("push %s→%s", s.names[m.from], dst.name))
	s.stats.Pushes++
	s.tracef("push %d %s→%s applied: %s → cursor %v cells %d", m.id, s.names[m.from], dst.name, describe(m.batch), cur.Log, cur.Cells)
	s.enqueue(&message{from: m.to, to: m.from, reply: true, cursor: cur, inc: m.inc,
		pushedWm: m.batch.Watermark, after: m.batch.CellsAfter, through: m.batch.CellsThrough})
}

// adopt takes the peer's cursor as the truth, as the real shipper does.
func (s *sim) adopt(pv *peerView, cur replication.Cursor, wm int64, after, through uint64) {
	pv.handshaken = true
	if wm != 0 && after <= cur.Cells && cur.Cells >= through {
		pv.lastWm = max(pv.lastWm, wm)
	}
	log := make([]uint64, s.k.Partitions)
	copy(log, cur.Log)
	pv.cur = replication.Cursor{Log: log, Cells: cur.Cells}
}

// shipDirect performs one synchronous push a→b (handshake first if needed),
// bypassing the queues; it reports whether anything was pushed.
func (s *sim) shipDirect(a, b *region) bool {
	pv := a.out[b.idx]
	if !pv.handshaken {
		cur, err := b.srv.Push(s.ctx, replication.Batch{From: a.name, Partitions: s.k.Partitions})
		s.must(err, "handshake")
		s.adopt(pv, cur, 0, 0, 0)
	}
	bt, empty := s.build(a, pv)
	if empty {
		return false
	}
	cur, err := b.srv.Push(s.ctx, bt)
	s.must(err, fmt.Sprintf("push %s→%s", a.name, b.name))
	s.stats.Pushes++
	s.adopt(pv, cur, bt.Watermark, bt.CellsAfter, bt.CellsThrough)
	return true
}

// barrier ships a's whole log to b (a planned move's catch-up).
func (s *sim) barrier(a, b *region) {
	for i := 0; ; i++ {
		if i > 100000 {
			s.failf("barrier %s→%s never caught up", a.name, b.name)
		}
		s.shipDirect(a, b)
		cur, err := b.st.Cursor(s.ctx, a.name)
		s.must(err, "cursor")
		done := true
		for p := 0; p < s.k.Partitions; p++ {
			_, h, err := a.st.Read(s.ctx, uint32(p), ^uint64(0), 1)
			s.must(err, "head")
			if cur.Log[p] < h.Pos {
				done = false
			}
		}
		if done {
			return
		}
	}
}

// antiEntropy runs one digest round a→b over a live link, as the real
// shipper does: digest a's own cells, ask b which buckets differ, and push the
// latest state of those buckets' cells without moving the cell cursor and
// without a watermark.
func (s *sim) antiEntropy() {
	a, b := s.regions[s.pick(len(s.regions))], s.regions[s.pick(len(s.regions))]
	if a == b || a.down() || b.down() || s.links[a.idx][b.idx].cut || s.links[b.idx][a.idx].cut {
		return
	}
	var d replication.Digest
	var cells []replication.CellState
	err := a.st.ScanCells(s.ctx, a.name, func(c replication.CellState) error {
		d.Add(c)
		cells = append(cells, c)
		return nil
	})
	s.must(err, "scan cells")
	resp, err := b.srv.Digest(s.ctx, replication.DigestRequest{From: a.name, Partitions: s.k.Partitions, Buckets: d[:]})
	s.must(err, "digest")
	pv := a.out[b.idx]
	s.adopt(pv, resp.Cursor, 0, 0, 0)
	bad := map[uint32]bool{}
	for _, bk := range resp.Mismatched {
		bad[bk] = true
	}
	var repair []replication.CellState
	for _, c := range cells {
		if bad[replication.BucketOf(c.Key.Item)] {
			repair = append(repair, c)
		}
	}
	for len(repair) > 0 {
		n := min(len(repair), s.k.MaxCells)
		cur, err := b.srv.Push(s.ctx, replication.Batch{From: a.name, Partitions: s.k.Partitions, Cells: repair[:n],
			CellsAfter: pv.cur.Cells, CellsThrough: pv.cur.Cells})
		s.must(err, "anti-entropy push")
		s.adopt(pv, cur, 0, 0, 0)
		repair = repair[n:]
	}
	s.stats.AntiEntropy++
	s.tracef("anti-entropy %s→%s: %d buckets differ", a.name, b.name, len(resp.Mismatched))
}
