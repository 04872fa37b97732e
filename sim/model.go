package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/pebblestore"
)

// request is one client request (retries reuse it).
type request struct {
	id         int
	item, user int
	target     crdt.State
	key        string
	acked      bool
	conflict   bool // reuses an earlier request's key for another request
}

// edgeModel is what the simulation knows an edge must converge to.
type edgeModel struct {
	// last is the target of the most recent write or no-op any region accepted
	// (epochs never overlap in time, so this is the real-time order).
	last crdt.State
	// max is the newest version any region wrote.
	max     crdt.Register
	written bool
}

type keyID struct{ user, key string }

// keyModel tracks where idempotency records of one key were written.
type keyModel struct {
	origins []origin
}

// origin is one record: written by region at (partition, pos) of its log.
type origin struct {
	region int
	part   uint32
	pos    uint64
	fp     string
	answer edge.Answer
}

// applied is one Store.Apply as the recording store saw it.
type applied struct {
	region string
	req    edge.Request
	d      edge.Decision
}

// recStore is the region's store as its edge.Service sees it: every Apply is
// checked against the model as it happens.
type recStore struct {
	*pebblestore.Store
	s *sim
	r *region
}

func (rs *recStore) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	d, err := rs.Store.Apply(ctx, req)
	rs.s.onApply(rs.r, req, d, err)
	return d, err
}

// known lists the origins of key whose record region r holds.
func (s *sim) known(r *region, km *keyModel) []origin {
	var out []origin
	for _, o := range km.origins {
		if o.region == r.idx {
			out = append(out, o)
			continue
		}
		cur, err := r.st.Cursor(s.ctx, s.names[o.region])
		s.must(err, "cursor")
		if int(o.part) < len(cur.Log) && cur.Log[o.part] >= o.pos {
			out = append(out, o)
		}
	}
	return out
}

func (s *sim) onApply(r *region, req edge.Request, d edge.Decision, err error) {
	if err != nil {
		s.failf("store apply at %s: %v", r.name, err)
	}
	s.lastApply = &applied{region: r.name, req: req, d: d}
	ii, uu := s.itemIdx(req.Item), s.userIdx(req.User)
	em := &s.edges[ii][uu]
	var km *keyModel
	var known []origin
	if req.IdemKey != "" {
		id := keyID{req.User, req.IdemKey}
		if km = s.keys[id]; km == nil {
			km = &keyModel{}
			s.keys[id] = km
		}
		known = s.known(r, km)
	}
	sameFP, otherFP := 0, 0
	for _, o := range known {
		if o.fp == req.Fingerprint {
			sameFP++
		} else {
			otherFP++
		}
	}
	if req.Kind == edge.KindErasure && !s.erasure[uu].started {
		s.failf("erasure: %s erased %s/%s, but no region ever started erasing %s", r.name, req.Item, req.User, req.User)
	}
	switch d.Action {
	case edge.ActErased:
		s.stats.ErasedRefusals++
		if !s.erasure[uu].started {
			s.failf("erasure: %s refused %s's write to %s as erased, but no region ever started erasing %s", r.name,
				req.User, req.Item, req.User)
		}
	case edge.ActWrite, edge.ActNoop:
		s.stats.Accepted++
		s.checkEpoch(r, req)
		if len(known) > 0 {
			s.failf("idempotency: %s performed %s key %q afresh (action %d) although it holds its record", r.name,
				req.User, req.IdemKey, d.Action)
		}
		if km != nil && len(km.origins) > 0 {
			s.stats.Overtaken++ // the key's record exists elsewhere but has not reached the owner
		}
		em.last = req.Target
		if d.Action == edge.ActWrite {
			s.stats.Writes++
			if req.Kind == edge.KindErasure {
				s.stats.EraseWrites++
				s.erasure[uu].writes++
			}
			reg := d.Edge.Register()
			if reg.Version.Epoch != req.Epoch {
				s.failf("write at %s has version %v under epoch %d", r.name, reg.Version, req.Epoch)
			}
			if !em.written || em.max.Less(reg) {
				em.max, em.written = reg, true
			}
			if w := &r.written[ii][uu]; w.Less(reg) {
				*w = reg
			}
			s.checkFresh(r, d.Event)
		}
		if km != nil {
			part := edge.PartitionOf(req.Item, edge.BucketOf(req.User), s.k.Partitions)
			var pos uint64
			if d.Event != nil {
				pos = d.Event.Pos
			} else {
				_, h, err := r.st.Read(s.ctx, part, ^uint64(0), 1)
				s.must(err, "head")
				pos = h.Pos
			}
			km.origins = append(km.origins, origin{region: r.idx, part: part, pos: pos, fp: req.Fingerprint, answer: d.Answer})
		}
	case edge.ActReplay:
		s.stats.Accepted++
		s.stats.Replays++
		if sameFP == 0 {
			s.failf("idempotency: %s replayed %s key %q without holding a record of that request", r.name, req.User, req.IdemKey)
		}
		ok := false
		for _, o := range known {
			if o.fp == req.Fingerprint && o.answer == d.Answer {
				ok = true
			}
		}
		if !ok {
			s.failf("idempotency: %s replayed %+v for key %q, never answered so", r.name, d.Answer, req.IdemKey)
		}
	case edge.ActConflict:
		if otherFP == 0 {
			s.failf("idempotency: %s refused key %q as conflicting without holding a record of another request", r.name, req.IdemKey)
		}
	case edge.ActStale:
		s.failf("epoch safety: %s authorized epoch %d for %s/%s but the edge is already at %v (a newer epoch wrote first)",
			r.name, req.Epoch, req.Item, req.User, d.Edge.Version)
	default:
		s.failf("unexpected decision %d at %s", d.Action, r.name)
	}
	if d.Action == edge.ActWrite || d.Action == edge.ActNoop {
		if len(known) == 0 && sameFP+otherFP > 0 {
			s.failf("model: inconsistent idempotency bookkeeping")
		}
	} else if d.Action == edge.ActReplay && otherFP == 0 && sameFP == 0 {
		s.failf("model: replay without a record")
	}
}

// checkFresh: an event just committed is in no cell yet, so no region may
// already hold a watermark of its region at or past its event time.
func (s *sim) checkFresh(r *region, ev *edge.Event) {
	if ev == nil || !ev.Kind.Counted() {
		return
	}
	for _, x := range s.regions {
		if x.down() {
			continue
		}
		wms, err := x.st.Watermarks(s.ctx)
		s.must(err, "watermarks")
		if t, ok := wms[r.name]; ok && t >= ev.EventTime {
			s.failf("watermark honesty: %s committed %s/%s at t=%d (pos %d/%d), but %s already holds %s's watermark %d",
				r.name, ev.Item, ev.User, ev.EventTime, ev.Partition, ev.Pos, x.name, r.name, t)
		}
	}
}

// checkEpoch: the writer is the pin's region for its epoch, no newer epoch has
// started, and per range epochs never go back.
func (s *sim) checkEpoch(r *region, req edge.Request) {
	g := int(edge.RangeOf(req.User, s.k.Ranges))
	e := req.Epoch
	if e == 0 || int(e) > len(s.pins[g]) {
		s.failf("epoch safety: %s wrote range %d under unknown epoch %d", r.name, g, e)
	}
	if p := s.pins[g][e-1].pin; p.Region != r.name {
		s.failf("epoch safety: %s wrote range %d under epoch %d, which belongs to %s", r.name, g, e, p.Region)
	}
	if int(e) < len(s.pins[g]) {
		next := s.pins[g][e].pin
		if !s.clk.Now().Before(next.NotBefore) {
			s.failf("epoch safety: %s wrote range %d under epoch %d after epoch %d started (notBefore %v, now %v)",
				r.name, g, e, next.Epoch, next.NotBefore, s.clk.Now())
		}
	}
	if e < s.maxEpoch[g] {
		s.failf("epoch safety: %s wrote range %d under epoch %d after a write under epoch %d", r.name, g, e, s.maxEpoch[g])
	}
	s.maxEpoch[g] = e
	s.pins[g][e-1].writes++
}

// countChains counts ranges that went A→B→C through three distinct regions by
// two unplanned failovers in a row, with writes accepted in all three epochs.
func (s *sim) countChains() int {
	n := 0
	for _, ps := range s.pins {
		for e := 0; e+2 < len(ps); e++ {
			a, b, c := ps[e], ps[e+1], ps[e+2]
			if !b.planned && !c.planned && a.writes > 0 && b.writes > 0 && c.writes > 0 &&
				a.pin.Region != b.pin.Region && b.pin.Region != c.pin.Region && a.pin.Region != c.pin.Region {
				n++
			}
		}
	}
	return n
}

func (s *sim) itemIdx(item string) int {
	for i, it := range s.items {
		if it == item {
			return i
		}
	}
	s.failf("unknown item %q", item)
	return -1
}

func (s *sim) userIdx(user string) int {
	for i, u := range s.users {
		if u == user {
			return i
		}
	}
	s.failf("unknown user %q", user)
	return -1
}

// checkHonestyAll checks watermark honesty at every live region.
func (s *sim) checkHonestyAll() {
	logs := s.readLogs()
	for _, x := range s.regions {
		if !x.down() {
			s.checkHonesty(x, logs)
		}
	}
	s.stats.HonestyChecks++
}

// readLogs reads every live region's whole log (per partition).
func (s *sim) readLogs() [][][]edge.Event {
	logs := make([][][]edge.Event, len(s.regions))
	for i, r := range s.regions {
		if r.down() {
			continue
		}
		logs[i] = make([][]edge.Event, s.k.Partitions)
		for p := range logs[i] {
			evs, _, err := r.st.Read(s.ctx, uint32(p), 0, 1<<30)
			s.must(err, "read log")
			logs[i][p] = evs
		}
	}
	return logs
}

// checkHonesty: at x, for every region r with watermark T known at x, every
// counted event of r's log with event time <= T lies inside x's copy of r's
// cell of that item and partition (cell HWM >= event position).
func (s *sim) checkHonesty(x *region, logs [][][]edge.Event) {
	wms, err := x.st.Watermarks(s.ctx)
	s.must(err, "watermarks")
	for ri, r := range s.regions {
		if logs[ri] == nil {
			continue
		}
		t, ok := wms[r.name]
		if !ok {
			continue
		}
		for p, evs := range logs[ri] {
			for _, ev := range evs {
				if !ev.Kind.Counted() || ev.EventTime > t {
					continue
				}
				key := crdt.CellKey{Item: ev.Item, Region: r.name, Shard: uint32(p)}
				cells, err := x.st.Cells(s.ctx, []crdt.CellKey{key})
				s.must(err, "cells")
				if c := cells[key]; c.HWM < ev.Pos {
					s.failf("watermark honesty: %s says %s is complete through t=%d, but its cell %v has hwm %d < event %s/%d@%d (t=%d, %s %s/%s %+d)",
						x.name, r.name, t, key, c.HWM, r.name, p, ev.Pos, ev.EventTime, ev.Kind, ev.Item, ev.User, ev.Delta)
				}
			}
		}
	}
}

// checkFinal runs after healing.
func (s *sim) checkFinal() {
	// Edges: identical everywhere, equal to the model.
	liked := make([]int64, len(s.items))
	for i, item := range s.items {
		for u, user := range s.users {
			var first crdt.Register
			for ri, r := range s.regions {
				e, _, err := r.st.Edge(s.ctx, item, user)
				s.must(err, "edge")
				if ri == 0 {
					first = e.Register()
				} else if e.Register() != first {
					s.failf("convergence: edge %s/%s is %v/%v at %s but %v/%v at %s", item, user,
						first.Version, first.State, s.regions[0].name, e.Version, e.State, r.name)
				}
			}
			em := s.edges[i][u]
			if em.written && first != em.max {
				s.failf("model: edge %s/%s converged to %v/%v, newest write was %v/%v", item, user,
					first.Version, first.State, em.max.Version, em.max.State)
			}
			// An erased user's edges are checked by checkErasures: the erasure
			// wins over every write, before or after it.
			if first.State != em.last && !s.erasure[u].started {
				s.failf("model: edge %s/%s converged to %v, last accepted request wanted %v", item, user, first.State, em.last)
			}
			if first.State == crdt.Liked {
				liked[i]++
			}
		}
	}
	s.checkErasures()
	// Counts: every region, every item; and per source region, the cells sum alike.
	for i, item := range s.items {
		for _, r := range s.regions {
			n, err := r.st.Count(s.ctx, item)
			s.must(err, "count")
			if n != liked[i] {
				s.failf("count: %s counts %d for %s, %d edges are LIKED (%s)%s", r.name, n, item, liked[i], s.cellReport(item), s.edgeReport(item))
			}
		}
	}
	for _, src := range s.regions {
		sums := s.cellSums(src.name)
		for _, r := range s.regions {
			if r == src {
				continue
			}
			other := s.cellSumsAt(r, src.name)
			for i := range s.items {
				if sums[i] != other[i] {
					s.failf("cells: %s's cells of %s sum to %d at %s, %d at home", src.name, s.items[i], other[i], r.name, sums[i])
				}
			}
		}
	}
	s.stats.Chains = s.countChains()
	// Watermarks: honest, and live after healing.
	logs := s.readLogs()
	var last int64
	for ri := range logs {
		for _, evs := range logs[ri] {
			for _, ev := range evs {
				last = max(last, ev.EventTime)
				if ev.Kind == edge.KindCorrection {
					s.stats.Corrections++
				}
			}
		}
	}
	for _, x := range s.regions {
		s.checkHonesty(x, logs)
		wms, err := x.st.Watermarks(s.ctx)
		s.must(err, "watermarks")
		if asOf := wms.AsOf(s.names); asOf < last {
			s.failf("watermark liveness: after healing %s's asOf is %d, before the last event at %d (%v)", x.name, asOf, last, wms)
		}
	}
}

func (s *sim) cellSums(region string) []int64 {
	return s.cellSumsAt(s.regions[s.idx(region)], region)
}

func (s *sim) cellSumsAt(x *region, region string) []int64 {
	out := make([]int64, len(s.items))
	err := x.st.ScanCells(s.ctx, region, func(cs replication.CellState) error {
		i := -1
		for j, it := range s.items {
			if it == cs.Key.Item {
				i = j
			}
		}
		if i < 0 {
			return errors.New("cell of unknown item " + cs.Key.Item)
		}
		out[i] += cs.Cell.Value()
		return nil
	})
	s.must(err, "scan cells")
	return out
}

func (s *sim) cellReport(item string) string {
	out := ""
	for _, r := range s.regions {
		out += r.name + ":"
		for _, src := range s.regions {
			sums := s.cellSumsAt(r, src.name)
			out += " " + src.name + "="
			for i, it := range s.items {
				if it == item {
					out += strconv.FormatInt(sums[i], 10)
				}
			}
		}
		out += "; "
	}
	return out
}

// edgeReport lists the edges of item whose logged deltas (over every
// region's log) do not telescope to their final state, with their events.
func (s *sim) edgeReport(item string) string {
	logs := s.readLogs()
	out := ""
	for _, user := range s.users {
		e, _, err := s.regions[0].st.Edge(s.ctx, item, user)
		s.must(err, "edge")
		var sum int64
		lines := ""
		for ri := range logs {
			for p, evs := range logs[ri] {
				for _, ev := range evs {
					if ev.Item != item || ev.User != user {
						continue
					}
					if ev.Kind.Counted() {
						sum += int64(ev.Delta)
					}
					lines += fmt.Sprintf("\n    %s/%d@%d t=%d %s v=%v %v delta=%+d", s.names[ri], p, ev.Pos, ev.EventTime,
						ev.Kind, ev.Version, ev.State, ev.Delta)
				}
			}
		}
		if sum != int64(e.State.Counts()) {
			out += fmt.Sprintf("\n  edge %s/%s final %v/%v, logged deltas sum to %d:%s", item, user, e.Version, e.State, sum, lines)
		}
	}
	if out != "" {
		return out
	}
	out = "\n  every edge's logged deltas telescope to its state: the aggregators lost or double-counted an event"
	for ri, r := range s.regions {
		for p, evs := range logs[ri] {
			key := crdt.CellKey{Item: item, Region: r.name, Shard: uint32(p)}
			cells, err := r.st.Cells(s.ctx, []crdt.CellKey{key})
			s.must(err, "cells")
			var sum int64
			lines := ""
			for _, ev := range evs {
				if ev.Item == item && ev.Kind.Counted() {
					sum += int64(ev.Delta)
					lines += fmt.Sprintf("\n    @%d t=%d %s %s v=%v %v delta=%+d", ev.Pos, ev.EventTime, ev.User, ev.Kind, ev.Version, ev.State, ev.Delta)
				}
			}
			if c := cells[key]; c.Value() != sum {
				out += fmt.Sprintf("\n  cell %v = %+v (value %d), its log events sum to %d:%s", key, c, c.Value(), sum, lines)
			}
		}
	}
	return out
}
