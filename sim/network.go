package sim

import (
	"context"
	"fmt"

	"github.com/likes-dev/likes/replication"
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
	batch    replication.Batch  // the push (a reply carries the push it answers)
	cursor   replication.Cursor // reply
	inc      int                // incarnation of the pushing region
}

func (s *sim) enqueue(m *message) {
	s.nextMsg++
	m.id = s.nextMsg
	l := s.links[m.from][m.to]
	l.q = append(l.q, m)
}

// sendRandom puts what the sender's real replication.Sender says is next on a
// random link (a handshake while it does not know the peer's cursor).
func (s *sim) sendRandom() {
	a, b := s.pick(len(s.regions)), s.pick(len(s.regions))
	if a == b {
		return
	}
	ra := s.regions[a]
	if ra.down() {
		return
	}
	bt, send, _, err := ra.out[b].Next(s.ctx, ra.st)
	s.must(err, "build batch")
	if !send {
		return
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
		dst.out[m.from].Acked(m.batch, m.cursor)
		s.tracef("reply %d %s→%s: cursor %v cells %d", m.id, s.names[m.from], dst.name, m.cursor.Log, m.cursor.Cells)
		return
	}
	cur, err := dst.srv.Push(s.ctx, m.batch)
	s.must(err, fmt.Sprintf("push %s→%s", s.names[m.from], dst.name))
	s.stats.Pushes++
	s.tracef("push %d %s→%s applied: %s → cursor %v cells %d", m.id, s.names[m.from], dst.name, describe(m.batch), cur.Log, cur.Cells)
	s.enqueue(&message{from: m.to, to: m.from, reply: true, cursor: cur, inc: m.inc, batch: m.batch})
}

// shipDirect performs one synchronous push a→b (handshake first if needed),
// bypassing the queues; it reports whether anything was pushed.
func (s *sim) shipDirect(a, b *region) bool {
	snd := a.out[b.idx]
	for {
		handshake := !snd.Handshaken()
		bt, send, _, err := snd.Next(s.ctx, a.st)
		s.must(err, "build batch")
		if !send {
			return false
		}
		cur, err := b.srv.Push(s.ctx, bt)
		s.must(err, fmt.Sprintf("push %s→%s", a.name, b.name))
		snd.Acked(bt, cur)
		if !handshake {
			s.stats.Pushes++
			return true
		}
	}
}

// antiEntropy runs one digest round a→b over a live link through the real
// replication.Sender, synchronously.
func (s *sim) antiEntropy() {
	a, b := s.regions[s.pick(len(s.regions))], s.regions[s.pick(len(s.regions))]
	if a == b || a.down() || b.down() || s.links[a.idx][b.idx].cut || s.links[b.idx][a.idx].cut {
		return
	}
	res, err := a.out[b.idx].AntiEntropy(s.ctx, a.st,
		func(ctx context.Context, req replication.DigestRequest) (replication.DigestResponse, error) {
			return b.srv.Digest(ctx, req)
		},
		func(ctx context.Context, bt replication.Batch) (replication.Cursor, error) {
			return b.srv.Push(ctx, bt)
		})
	s.must(err, "anti-entropy")
	s.stats.AntiEntropy++
	s.tracef("anti-entropy %s→%s: %d buckets differ, %d cells repaired", a.name, b.name, res.Mismatched, res.Repaired)
}
