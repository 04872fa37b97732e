package edgetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// DayMs is the idempotency TTL the suite uses unless a test says otherwise.
const DayMs = int64(24 * 60 * 60 * 1000)

// t0 is the suite's starting Request.Now (Unix ms).
const t0 = int64(1_700_000_000_000)

// Like builds the request edge.Service.Set sends for a like.
func Like(item, user, key string, epoch uint64, now int64) edge.Request {
	return edge.Request{
		Item: item, User: user, Target: crdt.Liked, Kind: edge.KindFlip,
		IdemKey: key, Fingerprint: edge.Fingerprint("like", item, user),
		Epoch: epoch, Now: now, IdemTTLms: DayMs,
	}
}

// Unlike builds the request edge.Service.Set sends for an unlike.
func Unlike(item, user, key string, epoch uint64, now int64) edge.Request {
	return edge.Request{
		Item: item, User: user, Target: crdt.Unliked, Kind: edge.KindFlip,
		IdemKey: key, Fingerprint: edge.Fingerprint("unlike", item, user),
		Epoch: epoch, Now: now, IdemTTLms: DayMs,
	}
}

// Erase builds the request edge.Service.Erase sends.
func Erase(item, user string, epoch uint64, now int64) edge.Request {
	return edge.Request{
		Item: item, User: user, Target: crdt.Erased, Kind: edge.KindErasure,
		Epoch: epoch, Now: now, IdemTTLms: DayMs,
	}
}

// AllLikers pages through Likers with the given page size until the end and
// fails t on an error, an oversized page or a runaway cursor.
func AllLikers(t testing.TB, s edge.Store, item string, limit int) []string {
	t.Helper()
	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatalf("Likers(%q): cursor never ends", item)
		}
		users, next, err := s.Likers(context.Background(), item, cursor, limit)
		if err != nil {
			t.Fatalf("Likers(%q, %q, %d): %v", item, cursor, limit, err)
		}
		if len(users) > limit {
			t.Fatalf("Likers(%q, limit %d) returned %d users", item, limit, len(users))
		}
		all = append(all, users...)
		if next == "" {
			return all
		}
		if next == cursor {
			t.Fatalf("Likers(%q): cursor %q does not advance", item, cursor)
		}
		cursor = next
	}
}

// AllUserItems pages through UserItems with the given page size.
func AllUserItems(t testing.TB, s edge.Store, user string, limit int) []string {
	t.Helper()
	var all []string
	after := ""
	for {
		items, err := s.UserItems(context.Background(), user, after, limit)
		if err != nil {
			t.Fatalf("UserItems(%q, %q, %d): %v", user, after, limit, err)
		}
		if len(items) > limit {
			t.Fatalf("UserItems(%q, limit %d) returned %d items", user, limit, len(items))
		}
		all = append(all, items...)
		if len(items) < limit {
			return all
		}
		after = items[len(items)-1]
	}
}

// likerOrder sorts users the way Likers must return them: (bucket, user).
func likerOrder(users []string) []string {
	out := slices.Clone(users)
	sort.Slice(out, func(i, j int) bool {
		bi, bj := edge.BucketOf(out[i]), edge.BucketOf(out[j])
		if bi != bj {
			return bi < bj
		}
		return out[i] < out[j]
	})
	return out
}

// RunStore runs the edge.Store contract suite. open must return a fresh, empty
// store each call and register its cleanup with t.Cleanup.
func RunStore(t *testing.T, open func(t *testing.T) edge.Store) {
	t.Run("WriteNoopReplayConflict", func(t *testing.T) { testWriteNoopReplayConflict(t, open(t)) })
	t.Run("OldKeyReplaysAfterUnlike", func(t *testing.T) { testOldKeyReplays(t, open(t)) })
	t.Run("IdempotencyExpires", func(t *testing.T) { testIdemExpires(t, open(t)) })
	t.Run("Erased", func(t *testing.T) { testErased(t, open(t)) })
	t.Run("StaleEpoch", func(t *testing.T) { testStaleEpoch(t, open(t)) })
	t.Run("FirstTouchInNewEpoch", func(t *testing.T) { testFirstTouch(t, open(t)) })
	t.Run("Model", func(t *testing.T) { testModel(t, open(t)) })
	t.Run("ConcurrentSameKey", func(t *testing.T) { testConcurrentSameKey(t, open(t)) })
	t.Run("ConcurrentSameEdge", func(t *testing.T) { testConcurrentSameEdge(t, open(t)) })
	t.Run("ConcurrentFlips", func(t *testing.T) { testConcurrentFlips(t, open(t)) })
	t.Run("LikersPagination", func(t *testing.T) { testLikersPagination(t, open(t)) })
	t.Run("LikersStableUnderWrites", func(t *testing.T) { testLikersStable(t, open(t)) })
	t.Run("LikersBadCursor", func(t *testing.T) { testLikersBadCursor(t, open(t)) })
	t.Run("UserItemsPaging", func(t *testing.T) { testUserItems(t, open(t)) })
	t.Run("PurgeUser", func(t *testing.T) { testPurgeUser(t, open(t)) })
	t.Run("PurgeErasedUser", func(t *testing.T) { testPurgeErased(t, open(t)) })
	t.Run("UnicodeIDs", func(t *testing.T) { testUnicode(t, open(t)) })
}

func apply(t testing.TB, s edge.Store, req edge.Request) edge.Decision {
	t.Helper()
	d, err := s.Apply(context.Background(), req)
	if err != nil {
		t.Fatalf("Apply(%+v): %v", req, err)
	}
	return d
}

func mustAction(t testing.TB, what string, d edge.Decision, want edge.Action) {
	t.Helper()
	if d.Action != want {
		t.Fatalf("%s: action %d, want %d (decision %+v)", what, d.Action, want, d)
	}
}

func getEdge(t testing.TB, s edge.Store, item, user string) (edge.Edge, bool) {
	t.Helper()
	e, ok, err := s.Edge(context.Background(), item, user)
	if err != nil {
		t.Fatalf("Edge(%q, %q): %v", item, user, err)
	}
	if ok && (e.Item != item || e.User != user) {
		t.Fatalf("Edge(%q, %q) returned ids (%q, %q)", item, user, e.Item, e.User)
	}
	return e, ok
}

func mustEdge(t testing.TB, s edge.Store, item, user string, state crdt.State, v crdt.Version) {
	t.Helper()
	e, ok := getEdge(t, s, item, user)
	if !ok {
		t.Fatalf("edge (%q, %q) missing, want %v at %v", item, user, state, v)
	}
	if e.State != state || e.Version != v {
		t.Fatalf("edge (%q, %q) = %v at %v, want %v at %v", item, user, e.State, e.Version, state, v)
	}
}

func testWriteNoopReplayConflict(t *testing.T, s edge.Store) {
	d := apply(t, s, Like("i1", "u1", "k1", 1, t0))
	mustAction(t, "first like", d, edge.ActWrite)
	if want := (edge.Answer{Item: "i1", User: "u1", Liked: true, Changed: true}); d.Answer != want {
		t.Fatalf("first like answer %+v, want %+v", d.Answer, want)
	}
	if d.Edge.State != crdt.Liked || d.Edge.Version != (crdt.Version{Epoch: 1, Op: 1}) || d.Edge.UpdatedAt != t0 {
		t.Fatalf("first like edge %+v", d.Edge)
	}
	if d.Event == nil || d.Event.Delta != 1 || d.Event.Kind != edge.KindFlip || d.Event.State != crdt.Liked ||
		d.Event.Version != d.Edge.Version || d.Event.Item != "i1" || d.Event.User != "u1" ||
		d.Event.Bucket != edge.BucketOf("u1") {
		t.Fatalf("first like event %+v", d.Event)
	}
	if err := d.Err(); err != nil {
		t.Fatalf("write Err() = %v", err)
	}
	mustEdge(t, s, "i1", "u1", crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
	if e, _ := getEdge(t, s, "i1", "u1"); e.UpdatedAt != t0 {
		t.Fatalf("UpdatedAt %d, want %d", e.UpdatedAt, t0)
	}

	// A like of a liked edge under a new key: no-op, still answers liked.
	d = apply(t, s, Like("i1", "u1", "k2", 1, t0+1))
	mustAction(t, "second like", d, edge.ActNoop)
	if want := (edge.Answer{Item: "i1", User: "u1", Liked: true}); d.Answer != want {
		t.Fatalf("noop answer %+v, want %+v", d.Answer, want)
	}
	if d.Event != nil {
		t.Fatalf("noop carries an event %+v", d.Event)
	}
	mustEdge(t, s, "i1", "u1", crdt.Liked, crdt.Version{Epoch: 1, Op: 1})

	// The noop's key is recorded too: it replays its own (unchanged) answer.
	d = apply(t, s, Like("i1", "u1", "k2", 1, t0+2))
	mustAction(t, "replay of noop key", d, edge.ActReplay)
	if d.Answer.Changed || !d.Answer.Liked {
		t.Fatalf("replay of noop key answered %+v", d.Answer)
	}

	// Same key, same request: replays the first answer, writes nothing.
	d = apply(t, s, Like("i1", "u1", "k1", 1, t0+3))
	mustAction(t, "retry", d, edge.ActReplay)
	if want := (edge.Answer{Item: "i1", User: "u1", Liked: true, Changed: true}); d.Answer != want {
		t.Fatalf("replay answer %+v, want %+v", d.Answer, want)
	}
	if d.Event != nil {
		t.Fatalf("replay carries an event")
	}

	// Same key, different request: conflict, writes nothing.
	d = apply(t, s, Unlike("i1", "u1", "k1", 1, t0+4))
	mustAction(t, "key reuse", d, edge.ActConflict)
	if !errors.Is(d.Err(), edge.ErrKeyConflict) {
		t.Fatalf("conflict Err() = %v", d.Err())
	}
	mustEdge(t, s, "i1", "u1", crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
	// Same key on a different edge (same user) is a different request too.
	d = apply(t, s, Like("i2", "u1", "k1", 1, t0+5))
	mustAction(t, "key reuse on another item", d, edge.ActConflict)
	if _, ok := getEdge(t, s, "i2", "u1"); ok {
		t.Fatalf("a conflicting request created an edge")
	}
	// Keys are per user: another user's k1 is unrelated.
	d = apply(t, s, Like("i1", "u2", "k1", 1, t0+6))
	mustAction(t, "other user's k1", d, edge.ActWrite)

	// Unlike: a write with delta -1 and op+1.
	d = apply(t, s, Unlike("i1", "u1", "k3", 1, t0+7))
	mustAction(t, "unlike", d, edge.ActWrite)
	if d.Event == nil || d.Event.Delta != -1 || d.Edge.Version != (crdt.Version{Epoch: 1, Op: 2}) || d.Answer.Liked || !d.Answer.Changed {
		t.Fatalf("unlike decision %+v event %+v", d, d.Event)
	}
	mustEdge(t, s, "i1", "u1", crdt.Unliked, crdt.Version{Epoch: 1, Op: 2})

	// No key (retraction): never recorded, so a repeat is a noop, not a replay.
	r := Unlike("i1", "u2", "", 1, t0+8)
	r.Kind = edge.KindRetraction
	d = apply(t, s, r)
	mustAction(t, "retraction", d, edge.ActWrite)
	if d.Event == nil || d.Event.Kind != edge.KindRetraction || d.Event.Delta != -1 {
		t.Fatalf("retraction event %+v", d.Event)
	}
	r.Now++
	mustAction(t, "repeated retraction", apply(t, s, r), edge.ActNoop)
}

// testOldKeyReplays is seed 000's deep-dive 1: a lost 200, the user unlikes, the
// client retries the OLD like; the retry replays instead of re-liking.
func testOldKeyReplays(t *testing.T, s edge.Store) {
	mustAction(t, "like", apply(t, s, Like("post", "ann", "like-1", 1, t0)), edge.ActWrite)
	mustAction(t, "unlike", apply(t, s, Unlike("post", "ann", "unlike-1", 1, t0+10)), edge.ActWrite)
	d := apply(t, s, Like("post", "ann", "like-1", 1, t0+20))
	mustAction(t, "old like retried", d, edge.ActReplay)
	if !d.Answer.Liked || !d.Answer.Changed {
		t.Fatalf("old like replayed %+v", d.Answer)
	}
	mustEdge(t, s, "post", "ann", crdt.Unliked, crdt.Version{Epoch: 1, Op: 2})
	if got := AllLikers(t, s, "post", 10); len(got) != 0 {
		t.Fatalf("likers after replayed old like: %v", got)
	}
}

func testIdemExpires(t *testing.T, s edge.Store) {
	const ttl = 1000
	req := func(r edge.Request) edge.Request { r.IdemTTLms = ttl; return r }
	mustAction(t, "like", apply(t, s, req(Like("i", "u", "k", 1, t0))), edge.ActWrite)
	mustAction(t, "unlike", apply(t, s, req(Unlike("i", "u", "k2", 1, t0+1))), edge.ActWrite)
	mustAction(t, "retry before expiry", apply(t, s, req(Like("i", "u", "k", 1, t0+ttl-1))), edge.ActReplay)
	mustAction(t, "conflict before expiry", apply(t, s, req(Unlike("i", "u", "k", 1, t0+ttl-1))), edge.ActConflict)
	mustEdge(t, s, "i", "u", crdt.Unliked, crdt.Version{Epoch: 1, Op: 2})

	// At Now == ExpiresAt the record no longer replays: the request executes.
	d := apply(t, s, req(Like("i", "u", "k", 1, t0+ttl)))
	mustAction(t, "retry at expiry", d, edge.ActWrite)
	mustEdge(t, s, "i", "u", crdt.Liked, crdt.Version{Epoch: 1, Op: 3})
	// ...and leaves a fresh record that replays for another TTL.
	mustAction(t, "retry after refresh", apply(t, s, req(Like("i", "u", "k", 1, t0+2*ttl-1))), edge.ActReplay)

	// An expired key may be reused for another request.
	d = apply(t, s, req(Unlike("i", "u", "k2", 1, t0+5*ttl)))
	mustAction(t, "expired key reused", d, edge.ActWrite)
	if d.Answer.Liked || !d.Answer.Changed {
		t.Fatalf("reused expired key answered %+v", d.Answer)
	}
	mustAction(t, "reused key replays its new answer", apply(t, s, req(Unlike("i", "u", "k2", 1, t0+5*ttl+1))), edge.ActReplay)
	mustAction(t, "reused key conflicts with the old request", apply(t, s, req(Like("i", "u", "k2", 1, t0+5*ttl+2))), edge.ActConflict)
}

func testErased(t *testing.T, s edge.Store) {
	mustAction(t, "like", apply(t, s, Like("i", "eve", "k1", 1, t0)), edge.ActWrite)
	mustAction(t, "other like", apply(t, s, Like("i", "bob", "k1", 1, t0)), edge.ActWrite)
	d := apply(t, s, Erase("i", "eve", 1, t0+1))
	mustAction(t, "erase", d, edge.ActWrite)
	if d.Event == nil || d.Event.Delta != -1 || d.Event.Kind != edge.KindErasure || d.Event.State != crdt.Erased {
		t.Fatalf("erase event %+v", d.Event)
	}
	mustEdge(t, s, "i", "eve", crdt.Erased, crdt.Version{Epoch: 1, Op: 2})
	if got := AllLikers(t, s, "i", 10); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("likers after erasure = %v, want [bob]", got)
	}
	d = apply(t, s, Like("i", "eve", "k2", 1, t0+2))
	mustAction(t, "like of erased edge", d, edge.ActErased)
	if !errors.Is(d.Err(), edge.ErrErased) {
		t.Fatalf("erased Err() = %v", d.Err())
	}
	mustAction(t, "unlike of erased edge", apply(t, s, Unlike("i", "eve", "k3", 2, t0+3)), edge.ActErased)
	mustAction(t, "erase again", apply(t, s, Erase("i", "eve", 1, t0+4)), edge.ActNoop)
	mustAction(t, "erase at a newer epoch", apply(t, s, Erase("i", "eve", 5, t0+5)), edge.ActNoop)
	mustEdge(t, s, "i", "eve", crdt.Erased, crdt.Version{Epoch: 1, Op: 2})
	// The refused like wrote no record: its key is still free.
	mustAction(t, "refused key is free", apply(t, s, Like("i2", "eve", "k2", 1, t0+6)), edge.ActWrite)
	// Erasing an edge that was never written leaves a tombstone.
	mustAction(t, "erase absent edge", apply(t, s, Erase("i3", "eve", 1, t0+7)), edge.ActWrite)
	mustEdge(t, s, "i3", "eve", crdt.Erased, crdt.Version{Epoch: 1, Op: 1})
	mustAction(t, "like of tombstone", apply(t, s, Like("i3", "eve", "k9", 1, t0+8)), edge.ActErased)
}

func testStaleEpoch(t *testing.T, s edge.Store) {
	mustAction(t, "like at epoch 2", apply(t, s, Like("i", "u", "k1", 2, t0)), edge.ActWrite)
	d := apply(t, s, Unlike("i", "u", "k2", 1, t0+1))
	mustAction(t, "unlike at epoch 1", d, edge.ActStale)
	if !errors.Is(d.Err(), edge.ErrStaleEpoch) {
		t.Fatalf("stale Err() = %v", d.Err())
	}
	mustAction(t, "like at epoch 1", apply(t, s, Like("i", "u", "k3", 1, t0+2)), edge.ActStale)
	mustEdge(t, s, "i", "u", crdt.Liked, crdt.Version{Epoch: 2, Op: 1})
	// The stale attempt recorded nothing: its key executes under the right epoch.
	d = apply(t, s, Unlike("i", "u", "k2", 2, t0+3))
	mustAction(t, "unlike at epoch 2", d, edge.ActWrite)
	mustEdge(t, s, "i", "u", crdt.Unliked, crdt.Version{Epoch: 2, Op: 2})
	// A higher epoch always passes.
	mustAction(t, "like at epoch 7", apply(t, s, Like("i", "u", "k4", 7, t0+4)), edge.ActWrite)
	mustEdge(t, s, "i", "u", crdt.Liked, crdt.Version{Epoch: 7, Op: 3})
}

func testFirstTouch(t *testing.T, s edge.Store) {
	mustAction(t, "like at epoch 1", apply(t, s, Like("i", "u", "k1", 1, t0)), edge.ActWrite)
	d := apply(t, s, Like("i", "u", "k2", 2, t0+1))
	mustAction(t, "same state, new epoch", d, edge.ActWrite)
	if d.Answer.Changed || !d.Answer.Liked {
		t.Fatalf("first touch answer %+v", d.Answer)
	}
	if d.Event == nil || d.Event.Delta != 0 || d.Event.Version != (crdt.Version{Epoch: 2, Op: 2}) {
		t.Fatalf("first touch event %+v", d.Event)
	}
	mustEdge(t, s, "i", "u", crdt.Liked, crdt.Version{Epoch: 2, Op: 2})
	mustAction(t, "same state, same epoch", apply(t, s, Like("i", "u", "k3", 2, t0+2)), edge.ActNoop)
}

// modelKey names an edge or an idempotency record in the model.
type modelKey struct{ a, b string }

// testModel drives a random sequence of requests through the store and an
// in-memory model built on edge.Decide, and demands identical outcomes.
func testModel(t *testing.T, s edge.Store) {
	const ttl = 500
	n := 1500
	if testing.Short() {
		n = 400
	}
	rng := rand.New(rand.NewPCG(7, 11))
	items := []string{"a", "ab", "a b", "ü", "日本"}
	users := []string{"u", "u1", "ü", "😀", "x"}
	edges := map[modelKey]edge.Edge{}
	recs := map[modelKey]edge.IdemRecord{}
	now := t0
	epoch := uint64(1)
	for i := range n {
		now += int64(rng.IntN(40))
		if rng.IntN(60) == 0 {
			now += ttl
		}
		if rng.IntN(80) == 0 {
			epoch++
		}
		item, user := items[rng.IntN(len(items))], users[rng.IntN(len(users))]
		ep := epoch
		if ep > 1 && rng.IntN(15) == 0 {
			ep = epoch - 1 // a writer that has not seen the newest pin
		}
		key := fmt.Sprintf("k%d", rng.IntN(6))
		var req edge.Request
		switch r := rng.IntN(100); {
		case r < 45:
			req = Like(item, user, key, ep, now)
		case r < 88:
			req = Unlike(item, user, key, ep, now)
		case r < 95:
			req = Unlike(item, user, "", ep, now)
			req.Kind = edge.KindRetraction
		default:
			req = Erase(item, user, ep, now)
		}
		req.IdemTTLms = ttl
		ek := modelKey{item, user}
		cur := edges[ek]
		var rec *edge.IdemRecord
		if r, ok := recs[modelKey{user, req.IdemKey}]; ok && req.IdemKey != "" {
			rec = &r
		}
		want := edge.Decide(cur, rec, false, req)
		got := apply(t, s, req)
		where := fmt.Sprintf("step %d %+v", i, req)
		if got.Action != want.Action || got.Answer != want.Answer || got.Edge.Register() != want.Edge.Register() {
			t.Fatalf("%s:\n got  %d %+v %+v\n want %d %+v %+v", where, got.Action, got.Answer, got.Edge, want.Action, want.Answer, want.Edge)
		}
		if want.Action == edge.ActWrite {
			if got.Edge != want.Edge {
				t.Fatalf("%s: edge %+v, want %+v", where, got.Edge, want.Edge)
			}
			if got.Event == nil {
				t.Fatalf("%s: write without an event", where)
			}
			// The store may attach the idempotency record (Idem); the rest is Decide's.
			ge, we := *got.Event, *want.Event
			ge.Partition, ge.Pos, ge.EventTime, ge.Idem = 0, 0, 0, nil
			if ge != we {
				t.Fatalf("%s: event %+v, want %+v", where, ge, we)
			}
			edges[ek] = want.Edge
		} else if got.Event != nil {
			t.Fatalf("%s: action %d carries an event", where, got.Action)
		}
		if r := want.Record(req); r != nil {
			recs[modelKey{user, req.IdemKey}] = *r
		}
		if i%97 == 0 || i == n-1 {
			checkModel(t, s, items, users, edges)
		}
	}
}

func checkModel(t *testing.T, s edge.Store, items, users []string, edges map[modelKey]edge.Edge) {
	t.Helper()
	for _, item := range items {
		var liked []string
		for _, user := range users {
			want, wok := edges[modelKey{item, user}]
			got, gok := getEdge(t, s, item, user)
			if wok != gok || (wok && got != want) {
				t.Fatalf("Edge(%q, %q) = %+v %v, want %+v %v", item, user, got, gok, want, wok)
			}
			if want.State == crdt.Liked {
				liked = append(liked, user)
			}
		}
		if got, want := AllLikers(t, s, item, 2), likerOrder(liked); !slices.Equal(got, want) {
			t.Fatalf("Likers(%q) = %q, want %q", item, got, want)
		}
	}
	for _, user := range users {
		var want []string
		for _, item := range items {
			if _, ok := edges[modelKey{item, user}]; ok {
				want = append(want, item)
			}
		}
		sort.Strings(want)
		if got := AllUserItems(t, s, user, 2); !slices.Equal(got, want) {
			t.Fatalf("UserItems(%q) = %q, want %q", user, got, want)
		}
	}
}

func goroutines() int {
	if testing.Short() {
		return 16
	}
	return 48
}

// applyAll runs reqs concurrently, all released at once, and returns the decisions.
func applyAll(t *testing.T, s edge.Store, reqs []edge.Request) []edge.Decision {
	t.Helper()
	out := make([]edge.Decision, len(reqs))
	errs := make([]error, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = s.Apply(context.Background(), r)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Apply(%+v): %v", reqs[i], err)
		}
	}
	return out
}

func testConcurrentSameKey(t *testing.T, s edge.Store) {
	n := goroutines()
	for round := range 4 {
		item, user := fmt.Sprintf("hot-%d", round), fmt.Sprintf("dup-%d", round)
		reqs := make([]edge.Request, n)
		for i := range reqs {
			reqs[i] = Like(item, user, "same-key", 1, t0+int64(i%3))
		}
		writes, replays := 0, 0
		for _, d := range applyAll(t, s, reqs) {
			switch d.Action {
			case edge.ActWrite:
				writes++
			case edge.ActReplay:
				replays++
			default:
				t.Fatalf("duplicate request decided %d", d.Action)
			}
			if want := (edge.Answer{Item: item, User: user, Liked: true, Changed: true}); d.Answer != want {
				t.Fatalf("duplicate answered %+v, want %+v", d.Answer, want)
			}
		}
		if writes != 1 || replays != n-1 {
			t.Fatalf("%d duplicates: %d writes, %d replays; want exactly 1 write", n, writes, replays)
		}
		mustEdge(t, s, item, user, crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
		if got := AllLikers(t, s, item, 100); !slices.Equal(got, []string{user}) {
			t.Fatalf("likers %v", got)
		}
	}
}

func testConcurrentSameEdge(t *testing.T, s edge.Store) {
	n := goroutines()
	reqs := make([]edge.Request, n)
	for i := range reqs {
		reqs[i] = Like("hot", "u", fmt.Sprintf("key-%d", i), 1, t0)
	}
	writes := 0
	for _, d := range applyAll(t, s, reqs) {
		switch d.Action {
		case edge.ActWrite:
			writes++
		case edge.ActNoop:
		default:
			t.Fatalf("like decided %d", d.Action)
		}
		if !d.Answer.Liked {
			t.Fatalf("like answered %+v", d.Answer)
		}
	}
	if writes != 1 {
		t.Fatalf("%d concurrent likes of one edge: %d writes, want 1", n, writes)
	}
	mustEdge(t, s, "hot", "u", crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
	if got := AllUserItems(t, s, "u", 10); !slices.Equal(got, []string{"hot"}) {
		t.Fatalf("user items %v", got)
	}
}

// testConcurrentFlips: concurrent likes and unlikes of one edge serialize: the
// written versions are exactly 1..w, the edge ends at the last one, and the
// deltas of the written events telescope to the final state.
func testConcurrentFlips(t *testing.T, s edge.Store) {
	n := goroutines()
	reqs := make([]edge.Request, n)
	for i := range reqs {
		if i%2 == 0 {
			reqs[i] = Like("flip", "u", fmt.Sprintf("key-%d", i), 1, t0)
		} else {
			reqs[i] = Unlike("flip", "u", fmt.Sprintf("key-%d", i), 1, t0)
		}
	}
	var ops []uint64
	sum := 0
	last := map[uint64]crdt.State{}
	for _, d := range applyAll(t, s, reqs) {
		if d.Action == edge.ActWrite {
			ops = append(ops, d.Edge.Version.Op)
			sum += int(d.Event.Delta)
			last[d.Edge.Version.Op] = d.Edge.State
		} else if d.Action != edge.ActNoop {
			t.Fatalf("flip decided %d", d.Action)
		}
	}
	slices.Sort(ops)
	for i, op := range ops {
		if op != uint64(i+1) {
			t.Fatalf("written versions %v, want 1..%d without gaps or repeats", ops, len(ops))
		}
	}
	e, ok := getEdge(t, s, "flip", "u")
	if !ok || e.Version.Op != uint64(len(ops)) || e.State != last[uint64(len(ops))] {
		t.Fatalf("edge %+v after %d writes (last state %v)", e, len(ops), last[uint64(len(ops))])
	}
	if sum != e.State.Counts() {
		t.Fatalf("deltas sum to %d, final state counts %d", sum, e.State.Counts())
	}
}

func testLikersPagination(t *testing.T, s edge.Store) {
	n := 300
	if testing.Short() {
		n = 120
	}
	var reqs []edge.Request
	var liked []string
	for i := range n {
		u := fmt.Sprintf("user-%03d", i)
		reqs = append(reqs, Like("viral", u, "k", 1, t0))
		reqs = append(reqs, Like("other", u, "k2", 1, t0)) // another item must not leak in
		if i%5 != 3 {
			liked = append(liked, u)
		}
	}
	reqs = append(reqs, Like("viral2", "user-x", "k", 1, t0)) // an item extending the id
	reqs = append(reqs, Like("vira", "user-y", "k", 1, t0))   // an item prefixing the id
	applyBatches(t, s, reqs)
	var fixes []edge.Request
	for i := range n {
		u := fmt.Sprintf("user-%03d", i)
		switch i % 5 {
		case 3:
			if i%2 == 0 {
				fixes = append(fixes, Unlike("viral", u, "k3", 1, t0+1))
			} else {
				fixes = append(fixes, Erase("viral", u, 1, t0+1))
			}
		case 1:
			fixes = append(fixes, Unlike("viral", u, "k3", 1, t0+1), Like("viral", u, "k4", 1, t0+2))
		}
	}
	for _, r := range fixes {
		apply(t, s, r)
	}
	want := likerOrder(liked)
	var first []string
	for _, limit := range []int{1, 2, 7, 50, 1000} {
		got := AllLikers(t, s, "viral", limit)
		if !slices.Equal(got, want) {
			t.Fatalf("Likers(limit %d): %d users, want %d in (bucket, user) order\n got  %q\n want %q", limit, len(got), len(want), got, want)
		}
		if first == nil {
			first = got
		} else if !slices.Equal(first, got) {
			t.Fatalf("Likers order is not stable across page sizes")
		}
	}
	if got := AllLikers(t, s, "nobody-likes-this", 10); len(got) != 0 {
		t.Fatalf("Likers of an unknown item = %v", got)
	}
	if got := AllLikers(t, s, "vira", 10); !slices.Equal(got, []string{"user-y"}) {
		t.Fatalf("Likers(vira) = %v", got)
	}
}

// applyBatches applies reqs concurrently in groups, for speed; the requests
// must touch distinct edges within a group of 32.
func applyBatches(t *testing.T, s edge.Store, reqs []edge.Request) {
	t.Helper()
	for len(reqs) > 0 {
		k := min(32, len(reqs))
		for _, d := range applyAll(t, s, reqs[:k]) {
			if d.Err() != nil {
				t.Fatalf("setup write refused: %+v", d)
			}
		}
		reqs = reqs[k:]
	}
}

// testLikersStable: while a reader pages, other users' edges change; every user
// whose edge stayed LIKED throughout appears exactly once, no user appears
// twice, and no user appears whose edge was never LIKED.
func testLikersStable(t *testing.T, s edge.Store) {
	n := 200
	if testing.Short() {
		n = 80
	}
	var reqs []edge.Request
	for i := range n {
		reqs = append(reqs, Like("item", fmt.Sprintf("s%03d", i), "k", 1, t0))
	}
	applyBatches(t, s, reqs)
	rng := rand.New(rand.NewPCG(3, 5))
	stable := map[string]bool{}
	for i := range n {
		stable[fmt.Sprintf("s%03d", i)] = true
	}
	everLiked := cloneSet(stable)
	seen := map[string]bool{}
	cursor := ""
	for step := 0; ; step++ {
		users, next, err := s.Likers(context.Background(), "item", cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			if seen[u] {
				t.Fatalf("user %q listed twice", u)
			}
			if !everLiked[u] {
				t.Fatalf("user %q listed but never liked", u)
			}
			seen[u] = true
		}
		// Mutate between pages: unlike existing users, add new ones.
		for range 3 {
			u := fmt.Sprintf("s%03d", rng.IntN(n))
			delete(stable, u)
			apply(t, s, Unlike("item", u, fmt.Sprintf("unlike-%d", step), 1, t0+int64(step)))
			nu := fmt.Sprintf("new-%d-%d", step, rng.IntN(1000))
			everLiked[nu] = true
			apply(t, s, Like("item", nu, "k", 1, t0+int64(step)))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	for u := range stable {
		if !seen[u] {
			t.Fatalf("user %q stayed liked throughout but was never listed", u)
		}
	}
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func testLikersBadCursor(t *testing.T, s edge.Store) {
	for i := range 5 {
		apply(t, s, Like("i", fmt.Sprintf("u%d", i), "k", 1, t0))
	}
	_, next, err := s.Likers(context.Background(), "i", "", 2)
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, err %v", next, err)
	}
	for _, bad := range []string{"%%% not a cursor %%%", "\x00\xff\x00", strings.Repeat("!", 64)} {
		if bad == next {
			continue
		}
		if users, _, err := s.Likers(context.Background(), "i", bad, 2); !errors.Is(err, edge.ErrBadCursor) {
			t.Fatalf("Likers with bad cursor %q: %v (users %v), want edge.ErrBadCursor", bad, err, users)
		}
	}
}

func testUserItems(t *testing.T, s edge.Store) {
	var want []string
	var reqs []edge.Request
	for i := range 40 {
		item := fmt.Sprintf("item-%02d", i)
		want = append(want, item)
		reqs = append(reqs, Like(item, "reader", fmt.Sprintf("k%d", i), 1, t0))
	}
	for _, item := range []string{"Ω", "é", "item", "item-05x", "z"} {
		want = append(want, item)
		reqs = append(reqs, Like(item, "reader", "k-"+item, 1, t0))
	}
	reqs = append(reqs, Like("item-00", "reader2", "k", 1, t0), Like("zz", "reade", "k", 1, t0))
	applyBatches(t, s, reqs)
	// An unliked edge is still an edge the user has.
	apply(t, s, Unlike("item-07", "reader", "u7", 1, t0+1))
	sort.Strings(want)
	for _, limit := range []int{1, 3, 10, 100} {
		if got := AllUserItems(t, s, "reader", limit); !slices.Equal(got, want) {
			t.Fatalf("UserItems(limit %d) = %q\n want %q", limit, got, want)
		}
	}
	items, err := s.UserItems(context.Background(), "reader", "item-05", 2)
	if err != nil || !slices.Equal(items, []string{"item-05x", "item-06"}) {
		t.Fatalf("UserItems after item-05 = %q, %v", items, err)
	}
	if got := AllUserItems(t, s, "nobody", 5); len(got) != 0 {
		t.Fatalf("UserItems(nobody) = %q", got)
	}
}

func testPurgeUser(t *testing.T, s edge.Store) {
	for _, u := range []string{"u", "u1", "ué"} {
		apply(t, s, Like("a", u, "k1", 1, t0))
		apply(t, s, Like("b", u, "k2", 1, t0))
	}
	mustAction(t, "erase a", apply(t, s, Erase("a", "u", 1, t0)), edge.ActWrite)
	if err := s.PurgeUser(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	// The index entries of ERASED edges go. (A store that applies replicated
	// edges keeps the entries of edges not ERASED, for the eraser to list: see
	// edge.ReopenLate; a single-region store may drop them too.)
	if got := AllUserItems(t, s, "u", 10); slices.Contains(got, "a") {
		t.Fatalf("UserItems after purge = %q, still lists the erased edge", got)
	}
	// Edges stay (purge alone does not erase them).
	mustEdge(t, s, "b", "u", crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
	// The records are gone: the same request under k2 no longer replays, and
	// another request under k1 no longer conflicts.
	mustAction(t, "retry after purge", apply(t, s, Like("b", "u", "k2", 1, t0+1)), edge.ActNoop)
	mustAction(t, "k1 other request after purge", apply(t, s, Unlike("b", "u", "k1", 1, t0+2)), edge.ActWrite)
	// Other users, including ones whose id extends "u", are untouched.
	for _, u := range []string{"u1", "ué"} {
		mustAction(t, "other user's retry", apply(t, s, Like("a", u, "k1", 1, t0+3)), edge.ActReplay)
		mustAction(t, "other user's conflict", apply(t, s, Unlike("a", u, "k2", 1, t0+3)), edge.ActConflict)
		if got := AllUserItems(t, s, u, 10); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("UserItems(%q) after purging u = %q", u, got)
		}
	}
	// Purging a user with nothing is fine, and purge is idempotent.
	for range 2 {
		if err := s.PurgeUser(context.Background(), "ghost"); err != nil {
			t.Fatal(err)
		}
	}
}

// testPurgeErased is the erasure sequence: tombstone every edge, then purge.
// A replay of an old key now refuses (ActErased) instead of replaying, and the
// tombstones stay, so nothing can bring the likes back.
func testPurgeErased(t *testing.T, s edge.Store) {
	apply(t, s, Like("a", "gone", "k1", 1, t0))
	apply(t, s, Like("b", "gone", "k2", 1, t0))
	apply(t, s, Unlike("b", "gone", "k3", 1, t0+1))
	apply(t, s, Like("a", "stay", "k1", 1, t0))
	for _, item := range AllUserItems(t, s, "gone", 10) {
		mustAction(t, "erase "+item, apply(t, s, Erase(item, "gone", 1, t0+2)), edge.ActWrite)
	}
	// Before the purge the old key still replays (erasure only refuses new requests).
	mustAction(t, "replay before purge", apply(t, s, Like("a", "gone", "k1", 1, t0+3)), edge.ActReplay)
	if err := s.PurgeUser(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	d := apply(t, s, Like("a", "gone", "k1", 1, t0+4))
	mustAction(t, "replay after purge", d, edge.ActErased)
	mustAction(t, "like at a new epoch after purge", apply(t, s, Like("a", "gone", "k9", 9, t0+5)), edge.ActErased)
	mustEdge(t, s, "a", "gone", crdt.Erased, crdt.Version{Epoch: 1, Op: 2})
	mustEdge(t, s, "b", "gone", crdt.Erased, crdt.Version{Epoch: 1, Op: 3})
	if got := AllLikers(t, s, "a", 10); !slices.Equal(got, []string{"stay"}) {
		t.Fatalf("Likers(a) = %v", got)
	}
	if got := AllUserItems(t, s, "gone", 10); len(got) != 0 {
		t.Fatalf("UserItems after purge = %q", got)
	}
}

func testUnicode(t *testing.T, s edge.Store) {
	items := []string{"日本語のポスト", "émoji-😀", "עברית", "e\u0301", "é", "Ω≈ç√", "a/b?c=d&e#f", "ü"}
	users := []string{"用户", "😀😃", "ñandú", "e\u0301", "é", "Zoë", "𝔘𝔫𝔦"}
	var reqs []edge.Request
	for _, it := range items {
		for _, u := range users {
			reqs = append(reqs, Like(it, u, "κλειδί-"+it, 1, t0))
		}
	}
	applyBatches(t, s, reqs)
	for _, it := range items {
		if got, want := AllLikers(t, s, it, 3), likerOrder(users); !slices.Equal(got, want) {
			t.Fatalf("Likers(%q) = %q, want %q", it, got, want)
		}
		for _, u := range users {
			mustEdge(t, s, it, u, crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
			mustAction(t, "unicode replay", apply(t, s, Like(it, u, "κλειδί-"+it, 1, t0+1)), edge.ActReplay)
		}
	}
	want := slices.Clone(items)
	sort.Strings(want)
	for _, u := range users {
		if got := AllUserItems(t, s, u, 4); !slices.Equal(got, want) {
			t.Fatalf("UserItems(%q) = %q, want %q", u, got, want)
		}
	}
	// Composed and decomposed forms are different ids: no normalization.
	apply(t, s, Unlike(items[3], users[3], "x", 1, t0+2))
	mustEdge(t, s, items[4], users[4], crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
	mustEdge(t, s, items[3], users[4], crdt.Liked, crdt.Version{Epoch: 1, Op: 1})
	mustEdge(t, s, items[3], users[3], crdt.Unliked, crdt.Version{Epoch: 1, Op: 2})
}
