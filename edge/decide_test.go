package edge_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// Identifiers in this file carry a "dt" prefix so they cannot collide with
// other test files of package edge_test.

const (
	dtItem = "item-1"
	dtUser = "user-1"
	dtTTL  = int64(24 * 3600 * 1000)
)

// dtFingerprint memoizes edge.Fingerprint (sha256 is slow under -race and the
// property tests use a handful of distinct requests).
var dtFingerprints = map[[3]string]string{}

func dtFingerprint(op, item, user string) string {
	k := [3]string{op, item, user}
	fp, ok := dtFingerprints[k]
	if !ok {
		fp = edge.Fingerprint(op, item, user)
		dtFingerprints[k] = fp
	}
	return fp
}

func dtOp(target crdt.State) string {
	if target == crdt.Liked {
		return "like"
	}
	return "unlike"
}

// dtReq builds a user flip request the way edge.Service.Set does.
func dtReq(target crdt.State, key string, epoch uint64, now int64) edge.Request {
	return edge.Request{
		Item: dtItem, User: dtUser, Target: target, Kind: edge.KindFlip,
		IdemKey: key, Fingerprint: dtFingerprint(dtOp(target), dtItem, dtUser),
		Epoch: epoch, Now: now, IdemTTLms: dtTTL,
	}
}

func dtEdge(state crdt.State, epoch, op uint64) edge.Edge {
	return edge.Edge{Item: dtItem, User: dtUser, State: state, Version: crdt.Version{Epoch: epoch, Op: op}, UpdatedAt: 1}
}

func TestDecideTable(t *testing.T) {
	const now = int64(1_000_000)
	like := dtReq(crdt.Liked, "k", 1, now)
	unlike := dtReq(crdt.Unliked, "k", 1, now)
	stored := edge.Answer{Item: dtItem, User: dtUser, Liked: true, Changed: true}
	recLike := &edge.IdemRecord{Fingerprint: like.Fingerprint, Answer: stored, ExpiresAt: now + 1}
	recExpired := &edge.IdemRecord{Fingerprint: unlike.Fingerprint, Answer: edge.Answer{Item: dtItem, User: dtUser}, ExpiresAt: now}
	withKind := func(r edge.Request, k edge.Kind, target crdt.State) edge.Request {
		r.Kind, r.Target, r.IdemKey, r.Fingerprint = k, target, "", ""
		return r
	}
	atEpoch := func(r edge.Request, e uint64) edge.Request { r.Epoch = e; return r }

	type want struct {
		action  edge.Action
		err     error
		answer  edge.Answer
		version crdt.Version // of the resulting edge (ActWrite)
		state   crdt.State   // of the resulting edge (ActWrite)
		delta   int32        // of the event (ActWrite)
		branch  *crdt.Branch // ActWrite: expected Branch, nil when none
		record  bool         // Record(req) != nil
	}
	ans := func(liked, changed bool) edge.Answer {
		return edge.Answer{Item: dtItem, User: dtUser, Liked: liked, Changed: changed}
	}
	cases := []struct {
		name   string
		cur    edge.Edge
		rec    *edge.IdemRecord
		erased bool
		req    edge.Request
		want   want
	}{
		{
			name: "new edge like writes 1.1 LIKED, +1, branch from 0.0 UNLIKED",
			cur:  edge.Edge{}, req: like,
			want: want{action: edge.ActWrite, answer: ans(true, true), version: crdt.Version{Epoch: 1, Op: 1}, state: crdt.Liked,
				delta: +1, branch: &crdt.Branch{Epoch: 1, Base: crdt.Register{}}, record: true},
		},
		{
			name: "like of a liked edge in the same epoch is a noop that still answers and records",
			cur:  dtEdge(crdt.Liked, 1, 1), req: like,
			want: want{action: edge.ActNoop, answer: ans(true, false), record: true},
		},
		{
			name: "unlike of a liked edge: -1, op+1, no branch",
			cur:  dtEdge(crdt.Liked, 1, 4), req: unlike,
			want: want{action: edge.ActWrite, answer: ans(false, true), version: crdt.Version{Epoch: 1, Op: 5}, state: crdt.Unliked,
				delta: -1, record: true},
		},
		{
			name: "unlike of a missing edge in its epoch 0 is a noop",
			cur:  edge.Edge{}, req: atEpoch(unlike, 0),
			want: want{action: edge.ActNoop, answer: ans(false, false), record: true},
		},
		{
			name: "first touch in a new epoch with equal state still writes a version, delta 0",
			cur:  dtEdge(crdt.Liked, 1, 3), req: atEpoch(like, 2),
			want: want{action: edge.ActWrite, answer: ans(true, false), version: crdt.Version{Epoch: 2, Op: 4}, state: crdt.Liked,
				delta: 0, branch: &crdt.Branch{Epoch: 2, Base: crdt.Register{Version: crdt.Version{Epoch: 1, Op: 3}, State: crdt.Liked}}, record: true},
		},
		{
			name: "first touch in a new epoch that flips: delta and branch",
			cur:  dtEdge(crdt.Liked, 1, 3), req: atEpoch(unlike, 3),
			want: want{action: edge.ActWrite, answer: ans(false, true), version: crdt.Version{Epoch: 3, Op: 4}, state: crdt.Unliked,
				delta: -1, branch: &crdt.Branch{Epoch: 3, Base: crdt.Register{Version: crdt.Version{Epoch: 1, Op: 3}, State: crdt.Liked}}, record: true},
		},
		{
			name: "same key, same request replays the stored answer (even though state now differs)",
			cur:  dtEdge(crdt.Unliked, 1, 2), rec: recLike, req: like,
			want: want{action: edge.ActReplay, answer: stored},
		},
		{
			name: "same key, different request is a conflict",
			cur:  dtEdge(crdt.Liked, 1, 1), rec: recLike, req: unlike,
			want: want{action: edge.ActConflict, err: edge.ErrKeyConflict},
		},
		{
			name: "same key for another item is a conflict",
			cur:  dtEdge(crdt.Liked, 1, 1), rec: recLike,
			req: func() edge.Request {
				r := like
				r.Item, r.Fingerprint = "item-2", edge.Fingerprint("like", "item-2", dtUser)
				return r
			}(),
			want: want{action: edge.ActConflict, err: edge.ErrKeyConflict},
		},
		{
			name: "expired record (ExpiresAt == Now) is ignored: the request runs",
			cur:  dtEdge(crdt.Unliked, 1, 2), rec: recExpired, req: like,
			want: want{action: edge.ActWrite, answer: ans(true, true), version: crdt.Version{Epoch: 1, Op: 3}, state: crdt.Liked,
				delta: +1, record: true},
		},
		{
			name: "erased user: a like is refused",
			cur:  dtEdge(crdt.Liked, 1, 1), erased: true, req: like,
			want: want{action: edge.ActErased, err: edge.ErrErased},
		},
		{
			name: "erased user: refused before the idempotency record is consulted",
			cur:  dtEdge(crdt.Liked, 1, 1), erased: true, rec: recLike, req: like,
			want: want{action: edge.ActErased, err: edge.ErrErased},
		},
		{
			name: "erased user: a retraction is refused too",
			cur:  dtEdge(crdt.Liked, 1, 1), erased: true, req: withKind(like, edge.KindRetraction, crdt.Unliked),
			want: want{action: edge.ActErased, err: edge.ErrErased},
		},
		{
			name: "erased user: erasure tombstones a liked edge, -1",
			cur:  dtEdge(crdt.Liked, 1, 1), erased: true, req: withKind(like, edge.KindErasure, crdt.Erased),
			want: want{action: edge.ActWrite, answer: ans(false, true), version: crdt.Version{Epoch: 1, Op: 2}, state: crdt.Erased, delta: -1},
		},
		{
			name: "erasure of a tombstone is a noop",
			cur:  dtEdge(crdt.Erased, 1, 2), erased: true, req: withKind(like, edge.KindErasure, crdt.Erased),
			want: want{action: edge.ActNoop, answer: edge.Answer{Item: dtItem, User: dtUser}},
		},
		{
			name: "tombstoned edge (erasure flag not here yet) cannot be resurrected",
			cur:  dtEdge(crdt.Erased, 1, 2), req: atEpoch(like, 2),
			want: want{action: edge.ActErased, err: edge.ErrErased},
		},
		{
			name: "edge at a higher epoch than the writer's: stale, fail closed",
			cur:  dtEdge(crdt.Unliked, 3, 7), req: atEpoch(like, 2),
			want: want{action: edge.ActStale, err: edge.ErrStaleEpoch},
		},
		{
			name: "stale writer still replays a key it answered",
			cur:  dtEdge(crdt.Unliked, 3, 7), rec: recLike, req: atEpoch(like, 2),
			want: want{action: edge.ActReplay, answer: stored},
		},
		{
			name: "retraction without a key: write, no record",
			cur:  dtEdge(crdt.Liked, 1, 1), req: withKind(like, edge.KindRetraction, crdt.Unliked),
			want: want{action: edge.ActWrite, answer: ans(false, true), version: crdt.Version{Epoch: 1, Op: 2}, state: crdt.Unliked, delta: -1},
		},
		{
			name: "noop without a key: no record",
			cur:  dtEdge(crdt.Unliked, 1, 1), req: withKind(like, edge.KindRetraction, crdt.Unliked),
			want: want{action: edge.ActNoop, answer: ans(false, false)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := edge.Decide(c.cur, c.rec, c.erased, c.req)
			if d.Action != c.want.action {
				t.Fatalf("action %d, want %d", d.Action, c.want.action)
			}
			if err := d.Err(); !errors.Is(err, c.want.err) || (c.want.err == nil && err != nil) {
				t.Fatalf("Err() = %v, want %v", err, c.want.err)
			}
			if d.Answer != c.want.answer {
				t.Fatalf("answer %+v, want %+v", d.Answer, c.want.answer)
			}
			rec := d.Record(c.req)
			if (rec != nil) != c.want.record {
				t.Fatalf("Record() = %+v, want record %v", rec, c.want.record)
			}
			if rec != nil && (rec.Fingerprint != c.req.Fingerprint || rec.Answer != d.Answer || rec.ExpiresAt != c.req.Now+c.req.IdemTTLms) {
				t.Fatalf("Record() = %+v", rec)
			}
			if d.Action != edge.ActWrite {
				if d.Event != nil || d.Branch != nil {
					t.Fatalf("%d decision carries event %+v / branch %+v", d.Action, d.Event, d.Branch)
				}
				if d.Edge != c.cur {
					t.Fatalf("non-write decision edge %+v, want the current %+v", d.Edge, c.cur)
				}
				return
			}
			dtCheckWrite(t, c.cur, c.req, d)
			if d.Edge.Version != c.want.version || d.Edge.State != c.want.state || d.Event.Delta != c.want.delta {
				t.Fatalf("wrote %v %v delta %+d, want %v %v delta %+d",
					d.Edge.Version, d.Edge.State, d.Event.Delta, c.want.version, c.want.state, c.want.delta)
			}
			switch {
			case c.want.branch == nil && d.Branch != nil:
				t.Fatalf("unexpected branch %+v", *d.Branch)
			case c.want.branch != nil && (d.Branch == nil || *d.Branch != *c.want.branch):
				t.Fatalf("branch %+v, want %+v", d.Branch, *c.want.branch)
			}
		})
	}
}

// dtCheckWrite checks the invariants of every ActWrite decision.
func dtCheckWrite(t testing.TB, cur edge.Edge, req edge.Request, d edge.Decision) {
	t.Helper()
	e, ev := d.Edge, d.Event
	if ev == nil {
		t.Fatalf("ActWrite without an event")
	}
	if e.Item != req.Item || e.User != req.User || e.State != req.Target || e.UpdatedAt != req.Now {
		t.Fatalf("edge %+v for request %+v", e, req)
	}
	if e.Version != (crdt.Version{Epoch: req.Epoch, Op: cur.Version.Op + 1}) || !cur.Version.Less(e.Version) {
		t.Fatalf("version %v after %v in epoch %d", e.Version, cur.Version, req.Epoch)
	}
	if ev.Item != req.Item || ev.User != req.User || ev.Version != e.Version || ev.State != e.State || ev.Kind != req.Kind {
		t.Fatalf("event %+v does not describe edge %+v", ev, e)
	}
	if ev.Bucket != edge.BucketOf(req.User) || ev.Pos != 0 {
		t.Fatalf("event bucket %d pos %d", ev.Bucket, ev.Pos)
	}
	if int(ev.Delta) != e.State.Counts()-cur.State.Counts() {
		t.Fatalf("delta %+d from %v to %v", ev.Delta, cur.State, e.State)
	}
	first := cur.Version.Epoch < req.Epoch
	if first != (d.Branch != nil) {
		t.Fatalf("first touch %v but branch %+v", first, d.Branch)
	}
	if first && *d.Branch != (crdt.Branch{Epoch: req.Epoch, Base: cur.Register()}) {
		t.Fatalf("branch %+v, want base %v", *d.Branch, cur.Register())
	}
	if d.Answer.Changed != (cur.State != e.State) || d.Answer.Liked != (e.State == crdt.Liked) {
		t.Fatalf("answer %+v for %v -> %v", d.Answer, cur.State, e.State)
	}
}

// dtRegion is a map-backed store for one region: edges, idempotency records,
// branch records and the committed log, applied the way a Store must (one
// Decide, then everything it says, atomically).
type dtRegion struct {
	edges    map[string]edge.Edge
	recs     map[string]edge.IdemRecord // (user, key)
	branches map[string]crdt.Branches
	erased   map[string]bool
	log      []edge.Event
	sums     map[string]int // item → Σ log deltas, kept as the log grows
}

func dtNewRegion() *dtRegion {
	return &dtRegion{
		edges:    map[string]edge.Edge{},
		recs:     map[string]edge.IdemRecord{},
		branches: map[string]crdt.Branches{},
		erased:   map[string]bool{},
		sums:     map[string]int{},
	}
}

func dtEdgeKey(item, user string) string { return item + "\x00" + user }

func (r *dtRegion) apply(t testing.TB, req edge.Request) edge.Decision {
	t.Helper()
	ek := dtEdgeKey(req.Item, req.User)
	cur := r.edges[ek]
	var rec *edge.IdemRecord
	if req.IdemKey != "" {
		if x, ok := r.recs[req.User+"\x00"+req.IdemKey]; ok {
			rec = &x
		}
	}
	d := edge.Decide(cur, rec, r.erased[req.User], req)
	if nr := d.Record(req); nr != nil {
		r.recs[req.User+"\x00"+req.IdemKey] = *nr
	}
	if d.Action == edge.ActWrite {
		dtCheckWrite(t, cur, req, d)
		if d.Branch != nil {
			r.branches[ek] = r.branches[ek].Open(d.Branch.Epoch, d.Branch.Base)
		}
		r.edges[ek] = d.Edge
		r.appendLog(*d.Event)
	}
	return d
}

// receive applies a replicated edge version: LWW on the edge, and a correction
// event when Observe says the region's earlier branches assumed an older base.
func (r *dtRegion) receive(e edge.Edge) {
	ek := dtEdgeKey(e.Item, e.User)
	if cur := r.edges[ek]; cur.Register().Less(e.Register()) {
		r.edges[ek] = e
	}
	delta, bs, changed := r.branches[ek].Observe(e.Register())
	if changed {
		r.branches[ek] = bs
		r.appendLog(edge.Event{
			Item: e.Item, User: e.User, Bucket: edge.BucketOf(e.User),
			Version: e.Version, State: e.State, Delta: int32(delta), Kind: edge.KindCorrection,
		})
	}
}

func (r *dtRegion) appendLog(ev edge.Event) {
	r.log = append(r.log, ev)
	r.sums[ev.Item] += int(ev.Delta)
}

// sum is the item's count as the region's own log contributes it.
func (r *dtRegion) sum(item string) int { return r.sums[item] }

// TestDeepDive1LostAnswerRetry is seed 000's deep dive 1: the like's 200 is
// lost, the user unlikes, then the client retries the OLD like. The retry must
// replay the first answer and must not like again.
func TestDeepDive1LostAnswerRetry(t *testing.T) {
	r := dtNewRegion()
	now := int64(1_000_000)

	first := r.apply(t, dtReq(crdt.Liked, "k1", 1, now)) // answer lost on the way back
	if first.Action != edge.ActWrite || !first.Answer.Liked || !first.Answer.Changed {
		t.Fatalf("first like: %+v", first)
	}
	now += 500
	unlike := r.apply(t, dtReq(crdt.Unliked, "k2", 1, now))
	if unlike.Action != edge.ActWrite || unlike.Answer.Liked || !unlike.Answer.Changed {
		t.Fatalf("unlike: %+v", unlike)
	}
	now += 5_000
	retry := r.apply(t, dtReq(crdt.Liked, "k1", 1, now))
	if retry.Action != edge.ActReplay || retry.Answer != first.Answer {
		t.Fatalf("retried like: action %d answer %+v, want replay of %+v", retry.Action, retry.Answer, first.Answer)
	}
	if retry.Event != nil || retry.Record(dtReq(crdt.Liked, "k1", 1, now)) != nil {
		t.Fatalf("replay writes something: %+v", retry)
	}
	e := r.edges[dtEdgeKey(dtItem, dtUser)]
	if e.State != crdt.Unliked || e.Version != (crdt.Version{Epoch: 1, Op: 2}) {
		t.Fatalf("edge after retry %+v, want UNLIKED at 1.2", e)
	}
	if got := r.sum(dtItem); got != 0 {
		t.Fatalf("count after retry %d, want 0", got)
	}
	// The record of k1 still holds the first answer; k2 the unlike's.
	if rec := r.recs[dtUser+"\x00k1"]; rec.Answer != first.Answer {
		t.Fatalf("k1 record %+v", rec)
	}

	// A new like with a new key does like again (the user meant it).
	again := r.apply(t, dtReq(crdt.Liked, "k3", 1, now+1))
	if again.Action != edge.ActWrite || r.sum(dtItem) != 1 {
		t.Fatalf("new like: %+v, count %d", again, r.sum(dtItem))
	}
	// Once the record of k1 has expired, the same retry is a fresh request: the
	// edge is liked already, so it is a noop and the count stays 1.
	late := r.apply(t, dtReq(crdt.Liked, "k1", 1, now+dtTTL+1))
	if late.Action != edge.ActNoop || r.sum(dtItem) != 1 {
		t.Fatalf("late retry: %+v, count %d", late, r.sum(dtItem))
	}
}

// TestDecideRetriesNeverDoubleCount drives one region through random likes,
// unlikes, retractions, retries of old requests (same key), key reuse for a
// different request, epoch changes, record expiry and erasure, and checks
// against a model: replays give the first answer, conflicts are refused, the
// edge is what the last executed request asked for, and the log's deltas sum
// to the edge's count.
func TestDecideRetriesNeverDoubleCount(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	items := []string{"a", "b"}
	for seed := range uint64(seeds) {
		rnd := rand.New(rand.NewPCG(seed, 0xdec1de))
		r := dtNewRegion()
		now, epoch := int64(1_000), uint64(1)
		const ttl = 10_000
		type live struct {
			fp      string
			ans     edge.Answer
			expires int64
		}
		model := map[string]live{} // key → unexpired record, as the model sees it
		var sent []edge.Request
		erased := false
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: %s", seed, fmt.Sprintf(format, args...))
		}
		for step := range 60 {
			now += int64(rnd.IntN(3000))
			var req edge.Request
			switch x := rnd.IntN(100); {
			case x < 45 || len(sent) == 0: // a fresh user request
				item := items[rnd.IntN(len(items))]
				target := crdt.State(rnd.IntN(2))
				req = edge.Request{
					Item: item, User: dtUser, Target: target, Kind: edge.KindFlip,
					IdemKey: "k" + strconv.Itoa(step), Fingerprint: dtFingerprint(dtOp(target), item, dtUser),
				}
			case x < 75: // retry an old request, same key
				req = sent[rnd.IntN(len(sent))]
			case x < 82: // reuse an old key for a different request
				req = sent[rnd.IntN(len(sent))]
				req.Target = 1 - req.Target
				req.Fingerprint = dtFingerprint(dtOp(req.Target), req.Item, req.User)
			case x < 90: // retraction (no key)
				req = edge.Request{Item: items[rnd.IntN(len(items))], User: dtUser, Target: crdt.Unliked, Kind: edge.KindRetraction}
			case x < 97: // this region gets the range again in a later epoch
				epoch++
				continue
			default: // erase the user: flag first, then tombstone every edge
				if !erased {
					erased = true
					r.erased[dtUser] = true
					for _, it := range items {
						d := r.apply(t, edge.Request{Item: it, User: dtUser, Target: crdt.Erased, Kind: edge.KindErasure, Epoch: epoch, Now: now})
						if d.Action != edge.ActWrite && d.Action != edge.ActNoop {
							fail("erasure of %s: action %d", it, d.Action)
						}
					}
				}
				continue
			}
			req.Epoch, req.Now, req.IdemTTLms = epoch, now, ttl
			before := r.edges[dtEdgeKey(req.Item, req.User)]
			d := r.apply(t, req)

			m, hasRec := model[req.IdemKey]
			hasRec = hasRec && req.IdemKey != "" && m.expires > now
			switch {
			case erased:
				if d.Action != edge.ActErased || !errors.Is(d.Err(), edge.ErrErased) {
					fail("request after erasure: action %d", d.Action)
				}
			case hasRec && m.fp == req.Fingerprint:
				if d.Action != edge.ActReplay || d.Answer != m.ans {
					fail("retry of %s: action %d answer %+v, want replay of %+v", req.IdemKey, d.Action, d.Answer, m.ans)
				}
			case hasRec:
				if d.Action != edge.ActConflict || !errors.Is(d.Err(), edge.ErrKeyConflict) {
					fail("key %s reused: action %d, want conflict", req.IdemKey, d.Action)
				}
			default:
				if d.Action != edge.ActWrite && d.Action != edge.ActNoop {
					fail("fresh request %+v: action %d", req, d.Action)
				}
				if after := r.edges[dtEdgeKey(req.Item, req.User)]; after.State != req.Target {
					fail("edge %v after asking for %v", after.State, req.Target)
				}
				if d.Answer.Changed != (before.State != req.Target) {
					fail("changed %v from %v to %v", d.Answer.Changed, before.State, req.Target)
				}
				if req.IdemKey != "" {
					model[req.IdemKey] = live{fp: req.Fingerprint, ans: d.Answer, expires: now + ttl}
				}
				if req.Kind == edge.KindFlip && rnd.IntN(2) == 0 {
					sent = append(sent, req)
				}
			}
			if d.Action != edge.ActWrite && d.Action != edge.ActNoop && d.Record(req) != nil {
				fail("action %d leaves a record", d.Action)
			}
			for _, it := range items {
				e := r.edges[dtEdgeKey(it, dtUser)]
				if got := r.sum(it); got != e.State.Counts() {
					fail("item %s: log sums to %d, edge %v", it, got, e.State)
				}
			}
		}
	}
}

// TestDecideBranchCorrectionRegions is crdt's branch-correction property driven
// through Decide: regions take successive epochs, every write is a Decide at the
// owner (a Branch from Decide is persisted with Branches.Open), replication is
// delayed, reordered and duplicated, and a replicated version yields a
// correction event when Observe says so. After full delivery every region holds
// the same edge, the sum of all regions' log deltas equals its count, and the
// edge is in the state the last acknowledged request asked for.
func TestDecideBranchCorrectionRegions(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	for seed := range uint64(seeds) {
		if msg := dtRegionsRun(t, seed, false); msg != "" {
			t.Fatalf("seed %d: %s\ntrace:\n%s", seed, msg, dtRegionsRun(t, seed, true))
		}
	}
}

// dtRegionsRun runs one seed of TestDecideBranchCorrectionRegions. It returns
// "" when the invariants hold, else the violation; with tracing, it returns the
// trace instead.
func dtRegionsRun(t *testing.T, seed uint64, tracing bool) string {
	type msg struct {
		to int
		e  edge.Edge
	}
	rnd := rand.New(rand.NewPCG(seed, 0xb4a9c4))
	n := 2 + rnd.IntN(3)
	regions := make([]*dtRegion, n)
	for i := range regions {
		regions[i] = dtNewRegion()
	}
	var inflight []msg
	var trace []string
	epoch, owner := uint64(1), rnd.IntN(n)
	now := int64(1_000)
	var keys []edge.Request
	lastAcked := crdt.State(255) // target of the last request acknowledged by a write or noop
	logf := func(format string, args ...any) {
		if tracing {
			trace = append(trace, fmt.Sprintf(format, args...))
		}
	}
	var failure string
	fail := func(format string, args ...any) {
		if failure == "" {
			failure = fmt.Sprintf("(n=%d) ", n) + fmt.Sprintf(format, args...)
		}
	}
	deliver := func() {
		i := rnd.IntN(len(inflight)) // any order
		m := inflight[i]
		if rnd.IntN(5) != 0 { // else: duplicated, stays in flight
			inflight = append(inflight[:i], inflight[i+1:]...)
		}
		regions[m.to].receive(m.e)
		logf("  r%d gets %v %v", m.to, m.e.Version, m.e.State)
	}
	for range 20 + rnd.IntN(60) {
		now += 10
		switch x := rnd.IntN(100); {
		case x < 50:
			var req edge.Request
			if len(keys) > 0 && rnd.IntN(4) == 0 {
				req = keys[rnd.IntN(len(keys))] // a retry, possibly at another owner
			} else {
				tgt := crdt.State(rnd.IntN(2))
				req = dtReq(tgt, "k"+strconv.Itoa(len(keys)), 0, 0)
				keys = append(keys, req)
			}
			req.Epoch, req.Now, req.IdemTTLms = epoch, now, dtTTL
			d := regions[owner].apply(t, req)
			if d.Action == edge.ActStale {
				fail("owner of epoch %d found a newer edge", epoch)
			}
			if d.Action == edge.ActWrite || d.Action == edge.ActNoop {
				lastAcked = req.Target
			}
			if d.Action == edge.ActWrite {
				logf("r%d writes %v %v delta %+d branch %v", owner, d.Edge.Version, d.Edge.State, d.Event.Delta, d.Branch)
				for to := range n {
					if to != owner {
						inflight = append(inflight, msg{to, d.Edge})
					}
				}
			}
		case x < 65:
			epoch++
			owner = rnd.IntN(n)
			logf("failover: epoch %d to r%d", epoch, owner)
		default:
			if len(inflight) > 0 {
				deliver()
			}
		}
	}
	for len(inflight) > 0 {
		deliver()
	}
	ek := dtEdgeKey(dtItem, dtUser)
	final := regions[0].edges[ek]
	total := 0
	for i, r := range regions {
		if e := r.edges[ek]; e.Register() != final.Register() {
			fail("r%d holds %v %v, r0 %v %v", i, e.Version, e.State, final.Version, final.State)
		}
		total += r.sum(dtItem)
	}
	if total != final.State.Counts() {
		fail("Σ deltas over regions %d, final state %v", total, final.State)
	}
	// The last acknowledged request is what the edge converges to: an
	// acknowledged request is never overtaken by an older epoch's write that
	// arrives late (this is why a first touch in an epoch writes a version).
	if lastAcked != 255 && final.State != lastAcked {
		fail("last acknowledged request asked for %v, edge converged to %v", lastAcked, final.State)
	}
	if tracing {
		return strings.Join(trace, "\n")
	}
	return failure
}
