package edge_test

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// Identifiers in this file carry an "ar" prefix (apply remote).

var arItems = []string{"i1", "i2"}

const arUser = "u1"

func arVersion(t *rapid.T, label string) crdt.Version {
	return crdt.Version{Epoch: rapid.Uint64Range(0, 4).Draw(t, label+".epoch"), Op: rapid.Uint64Range(0, 4).Draw(t, label+".op")}
}

func arState(t *rapid.T, label string) crdt.State {
	return crdt.State(rapid.IntRange(0, 2).Draw(t, label))
}

func arJob(t *rapid.T) *edge.ErasureJob {
	switch rapid.IntRange(0, 4).Draw(t, "job") {
	case 0:
		return &edge.ErasureJob{User: arUser, State: edge.ErasureRunning, StartedAt: 5}
	case 1:
		return &edge.ErasureJob{User: arUser, State: edge.ErasureDone, StartedAt: 5, FinishedAt: 9}
	case 2:
		return &edge.ErasureJob{User: arUser, State: edge.ErasureRunning, StartedAt: 5, Remote: true}
	case 3:
		return &edge.ErasureJob{User: arUser, State: edge.ErasureDone, StartedAt: 5, FinishedAt: 9, Remote: true}
	}
	return nil
}

func arLocal(t *rapid.T) edge.RemoteLocal {
	l := edge.RemoteLocal{
		Edge:        edge.Edge{Item: "i1", User: arUser, State: arState(t, "state"), Version: arVersion(t, "v"), UpdatedAt: 1},
		Corrections: rapid.Uint64Range(0, 3).Draw(t, "corrections"),
		Job:         arJob(t),
		HasRecord:   rapid.Bool().Draw(t, "hasRecord"),
	}
	for i := range rapid.IntRange(0, 3).Draw(t, "branches") {
		l.Branches = l.Branches.Open(rapid.Uint64Range(1, 5).Draw(t, fmt.Sprint("b", i)),
			crdt.Register{Version: arVersion(t, fmt.Sprint("base", i)), State: arState(t, fmt.Sprint("bstate", i))})
	}
	return l
}

func arEvent(t *rapid.T) edge.Event {
	ev := edge.Event{
		Item: "i1", User: arUser, Bucket: edge.BucketOf(arUser), Version: arVersion(t, "ev"),
		State: arState(t, "ev.state"), EventTime: 7,
		Kind: edge.Kind(rapid.IntRange(int(edge.KindFlip), int(edge.LastKind)).Draw(t, "kind")),
	}
	if rapid.Bool().Draw(t, "idem") {
		ev.Idem = &edge.IdemRef{Key: "k", Fingerprint: "f", ExpiresAt: 100, Liked: ev.State == crdt.Liked}
	}
	return ev
}

// TestApplyRemoteEventIdempotent: the state the writes of an event leave,
// given the same event again, yields no writes but a purge's (which purges
// nothing more).
func TestApplyRemoteEventIdempotent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l, ev := arLocal(t), arEvent(t)
		w1 := edge.ApplyRemoteEvent(l, ev)
		l1 := l.After(w1)
		w2 := edge.ApplyRemoteEvent(l1, ev)
		w2.Purge = false
		if !w2.Empty() {
			t.Fatalf("second application of %+v writes %+v (first wrote %+v)", ev, w2, w1)
		}
		if w1.Correction != nil && (w1.Correction.Version != crdt.Version{Op: l.Corrections + 1} || w1.Corrections != l.Corrections+1) {
			t.Fatalf("correction numbered %v, sequence %d after %d", w1.Correction.Version, w1.Corrections, l.Corrections)
		}
		if w1.Edge != nil && !l.Edge.Register().Less(w1.Edge.Register()) {
			t.Fatalf("edge %v replaced by an older or equal %v", l.Edge.Register(), w1.Edge.Register())
		}
		if w1.Index && w1.Unindex {
			t.Fatalf("index entry both set and dropped: %+v", w1)
		}
		if w1.Index && (w1.Edge == nil || w1.Edge.State == crdt.Erased) {
			t.Fatalf("index entry without a new live edge: %+v", w1)
		}
		if w1.Record != nil && (l.HasRecord || l.Job != nil) {
			t.Fatalf("record written over an existing one, or for an erased user: %+v", l)
		}
	})
}

// TestApplyRemoteEventOrderInsensitive: edge versions delivered in any order,
// duplicated, leave the same edge (the greatest register) and the same
// branches, and corrections sum to the same total.
func TestApplyRemoteEventOrderInsensitive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := arLocal(t)
		l.Job = nil
		evs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) edge.Event {
			ev := arEvent(t)
			ev.Kind = edge.KindFlip
			return ev
		}), 1, 8).Draw(t, "events")
		run := func(order []edge.Event) (edge.RemoteLocal, int) {
			s, sum := l, 0
			for _, ev := range order {
				w := edge.ApplyRemoteEvent(s, ev)
				if w.Correction != nil {
					sum += int(w.Correction.Delta)
				}
				s = s.After(w)
			}
			return s, sum
		}
		a, sumA := run(evs)
		perm := rapid.Permutation(evs).Draw(t, "perm")
		perm = append(perm, rapid.SliceOfN(rapid.SampledFrom(evs), 0, 4).Draw(t, "dups")...)
		b, sumB := run(perm)
		if a.Edge.Register() != b.Edge.Register() {
			t.Fatalf("edge %v in one order, %v in another", a.Edge.Register(), b.Edge.Register())
		}
		if !reflect.DeepEqual(a.Branches, b.Branches) || sumA != sumB {
			t.Fatalf("branches %v (Σ corrections %d) vs %v (%d)", a.Branches, sumA, b.Branches, sumB)
		}
		best := l.Edge.Register()
		for _, ev := range evs {
			if r := (crdt.Register{Version: ev.Version, State: ev.State}); best.Less(r) {
				best = r
			}
		}
		if a.Edge.Register() != best {
			t.Fatalf("edge %v, greatest register %v", a.Edge.Register(), best)
		}
	})
}

// arRegion is a map-backed region that applies local writes with Decide and
// replicated events with ApplyRemoteEvent, each atomically.
type arRegion struct {
	name     int
	edges    map[string]edge.Edge
	branches map[string]edge.RemoteLocal // Branches and Corrections only
	records  map[string]edge.IdemRecord  // key → record (one user)
	index    map[string]bool             // item → entry (one user)
	job      *edge.ErasureJob
	log      []edge.Event
}

func arNewRegion(name int) *arRegion {
	return &arRegion{name: name, edges: map[string]edge.Edge{}, branches: map[string]edge.RemoteLocal{},
		records: map[string]edge.IdemRecord{}, index: map[string]bool{}}
}

func (r *arRegion) local(item string) edge.RemoteLocal {
	b := r.branches[item]
	return edge.RemoteLocal{Edge: r.edges[item], Branches: b.Branches, Corrections: b.Corrections, Job: r.job}
}

// write is a local write (Decide), and returns the event to ship, if any.
func (r *arRegion) write(req edge.Request) (edge.Decision, *edge.Event) {
	var rec *edge.IdemRecord
	if x, ok := r.records[req.IdemKey]; ok && req.IdemKey != "" {
		rec = &x
	}
	d := edge.Decide(r.edges[req.Item], rec, r.job != nil, req)
	if nr := d.Record(req); nr != nil {
		r.records[req.IdemKey] = *nr
	}
	ev := d.LogEvent(req)
	if d.Action == edge.ActWrite {
		if d.Branch != nil {
			b := r.branches[req.Item]
			b.Branches = b.Branches.Open(d.Branch.Epoch, d.Branch.Base)
			r.branches[req.Item] = b
		}
		r.edges[req.Item] = d.Edge
		if d.Edge.State != crdt.Erased {
			r.index[req.Item] = true
		}
	}
	if ev != nil {
		ev.EventTime = req.Now
		r.log = append(r.log, *ev)
	}
	return d, ev
}

// receive applies a replicated event.
func (r *arRegion) receive(ev edge.Event) {
	l := r.local(ev.Item)
	if ev.Idem != nil {
		_, l.HasRecord = r.records[ev.Idem.Key]
	}
	w := edge.ApplyRemoteEvent(l, ev)
	if w.Purge {
		r.purge()
	}
	if w.Record != nil {
		r.records[ev.Idem.Key] = *w.Record
	}
	if w.Edge != nil {
		r.edges[ev.Item] = *w.Edge
	}
	if w.Index {
		r.index[ev.Item] = true
	}
	if w.Unindex {
		delete(r.index, ev.Item)
	}
	if w.Job != nil {
		j := *w.Job
		r.job = &j
	}
	if w.Correction != nil {
		r.log = append(r.log, *w.Correction)
	}
	if w.BranchesChanged {
		r.branches[ev.Item] = edge.RemoteLocal{Branches: w.Branches, Corrections: w.Corrections}
	}
}

func (r *arRegion) purge() {
	r.records = map[string]edge.IdemRecord{}
	for item := range r.index {
		e, ok := r.edges[item]
		if edge.PurgeDrops(e, ok) {
			delete(r.index, item)
		}
	}
}

func (r *arRegion) sum(item string) int {
	n := 0
	for _, ev := range r.log {
		if ev.Item == item && ev.Kind.Counted() {
			n += int(ev.Delta)
		}
	}
	return n
}

// TestApplyRemoteRegions drives 2–4 regions through one user's likes and
// unlikes on two items at successive owners (failovers), retries, an account
// erasure started at some region, and replication that is delayed, reordered
// and duplicated, every replicated event applied through ApplyRemoteEvent.
// After full delivery (and the eraser's remaining steps): every region holds
// the same edges; Σ over regions of their logs' deltas == LIKED edges (the
// corrections telescope); after an erasure every edge is ERASED, every
// region's job is done, and no region keeps a record of the user.
func TestApplyRemoteRegions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 4).Draw(t, "regions")
		regions := make([]*arRegion, n)
		for i := range regions {
			regions[i] = arNewRegion(i)
		}
		type msg struct {
			to int
			ev edge.Event
		}
		var inflight []msg
		ship := func(from int, ev *edge.Event) {
			if ev == nil {
				return
			}
			for to := range n {
				if to != from {
					inflight = append(inflight, msg{to, *ev})
				}
			}
		}
		deliver := func(t *rapid.T) {
			i := rapid.IntRange(0, len(inflight)-1).Draw(t, "deliver")
			m := inflight[i]
			if !rapid.Bool().Draw(t, "duplicate") {
				inflight = append(inflight[:i], inflight[i+1:]...)
			}
			regions[m.to].receive(m.ev)
		}
		epoch, owner, now := uint64(1), rapid.IntRange(0, n-1).Draw(t, "owner"), int64(1000)
		eraser := -1 // region that runs the user's erasure
		// step is one eraser pass at the eraser's region: every item of its
		// index is erased at the range's owner (forwarded), then a purge.
		step := func() {
			r := regions[eraser]
			if r.job == nil || r.job.Remote || r.job.State != edge.ErasureRunning {
				return
			}
			items := make([]string, 0, len(r.index))
			for it := range r.index {
				items = append(items, it)
			}
			sort.Strings(items)
			for _, it := range items {
				_, ev := regions[owner].write(edge.Request{Item: it, User: arUser, Target: crdt.Erased, Kind: edge.KindErasure, Epoch: epoch, Now: now})
				ship(owner, ev)
			}
			r.purge()
			purge := edge.Event{User: arUser, Bucket: edge.BucketOf(arUser), Kind: edge.KindPurge, EventTime: now}
			r.log = append(r.log, purge)
			ship(eraser, &purge)
			if len(r.index) == 0 {
				j := *r.job
				j.State, j.FinishedAt = edge.ErasureDone, now
				r.job = &j
			}
		}
		var keys []edge.Request
		steps := rapid.IntRange(10, 80).Draw(t, "steps")
		for range steps {
			now += 10
			switch x := rapid.IntRange(0, 99).Draw(t, "action"); {
			case x < 45:
				var req edge.Request
				if len(keys) > 0 && rapid.IntRange(0, 3).Draw(t, "retry") == 0 {
					req = keys[rapid.IntRange(0, len(keys)-1).Draw(t, "which")]
				} else {
					tgt := crdt.State(rapid.IntRange(0, 1).Draw(t, "target"))
					item := rapid.SampledFrom(arItems).Draw(t, "item")
					req = edge.Request{Item: item, User: arUser, Target: tgt, Kind: edge.KindFlip,
						IdemKey: fmt.Sprint("k", len(keys)), Fingerprint: dtFingerprint(dtOp(tgt), item, arUser), IdemTTLms: dtTTL}
					keys = append(keys, req)
				}
				req.Epoch, req.Now = epoch, now
				d, ev := regions[owner].write(req)
				if d.Action == edge.ActStale {
					t.Fatalf("owner r%d of epoch %d found a newer edge", owner, epoch)
				}
				ship(owner, ev)
			case x < 58:
				epoch++
				owner = rapid.IntRange(0, n-1).Draw(t, "new owner")
			case x < 62 && eraser < 0:
				eraser = owner // the erasure starts at the owner of the user's range
				regions[eraser].job = &edge.ErasureJob{User: arUser, State: edge.ErasureRunning, StartedAt: now}
				mark := edge.Event{User: arUser, Bucket: edge.BucketOf(arUser), Kind: edge.KindErasing, EventTime: now}
				regions[eraser].log = append(regions[eraser].log, mark)
				ship(eraser, &mark)
				step()
			case x < 70 && eraser >= 0:
				step()
			default:
				if len(inflight) > 0 {
					deliver(t)
				}
			}
		}
		for round := 0; ; round++ {
			for len(inflight) > 0 {
				deliver(t)
			}
			if eraser < 0 || regions[eraser].job.State == edge.ErasureDone {
				break
			}
			if round > 10 {
				t.Fatalf("erasure at r%d not done after %d rounds: index %v", eraser, round, regions[eraser].index)
			}
			now += 10
			step()
		}
		liked := 0
		for _, item := range arItems {
			final := regions[0].edges[item]
			for i, r := range regions {
				if e := r.edges[item]; e.Register() != final.Register() {
					t.Fatalf("%s: r%d holds %v %v, r0 %v %v", item, i, e.Version, e.State, final.Version, final.State)
				}
			}
			total := 0
			for _, r := range regions {
				total += r.sum(item)
			}
			if total != final.State.Counts() {
				t.Fatalf("%s: Σ deltas over regions %d, final state %v", item, total, final.State)
			}
			liked += final.State.Counts()
			if eraser >= 0 && final.State != crdt.Erased && (final.Version != crdt.Version{}) {
				t.Fatalf("%s: user erased, edge converged to %v", item, final.State)
			}
		}
		if eraser >= 0 {
			if liked != 0 {
				t.Fatalf("erased user still likes %d items", liked)
			}
			for i, r := range regions {
				if r.job == nil || r.job.State != edge.ErasureDone {
					t.Fatalf("r%d: job %+v after the erasure finished at r%d", i, r.job, eraser)
				}
				if len(r.records) != 0 || len(r.index) != 0 {
					t.Fatalf("r%d keeps records %v or index entries %v of the erased user", i, r.records, r.index)
				}
			}
		}
	})
}
