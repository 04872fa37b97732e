package region_test

// Integration tests with three real regions on loopback and the embedded etcd
// (DESIGN section 5): replication, forwarding, idempotency across regions, a
// pin move under load, and lease loss failing closed. One cluster is shared by
// the subtests, which run in order and each use their own items.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

func TestThreeRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and three regions")
	}
	c := startTri(t)
	users := triUsers(1) // one user in every range
	for _, st := range []struct {
		name string
		f    func(*testing.T, *triCluster, []string)
	}{
		{"ReplicationAndForwarding", testTriReplication},
		{"IdempotencyAcrossRegions", testTriIdempotency},
		{"PinMoveUnderLoad", testTriPinMove},
		{"LeaseLossFailsClosed", testTriLeaseLoss},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.f(t, c, users) }) {
			return // later subtests build on the cluster's state
		}
	}
}

// testTriReplication: likes written through any region, for users of every
// range (so about two thirds are forwarded to the owner), become visible in
// every region's count; the actor reads their own write at the ingress region
// at once; asOf is the min over the regions' watermarks and advances.
func testTriReplication(t *testing.T, c *triCluster, users []string) {
	ps := c.mustPins(t)
	items := []string{"rep-a", "rep-b", "rep-c"}
	type job struct {
		item, user     string
		via, unlikeVia *triNode
	}
	want := map[string]int64{}
	var jobs []job
	for i, item := range items {
		want[item] = 0
		for j, u := range users {
			jb := job{item: item, user: u, via: c.nodes[(i+j)%3]}
			if (i+2*j)%5 == 0 { // liked through one region, unliked through another
				jb.unlikeVia = c.nodes[(i+j+1)%3]
			} else {
				want[item]++
			}
			jobs = append(jobs, jb)
		}
	}
	var forwarded, local atomic.Int64
	work := make(chan job)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for jb := range work {
				owner := triOwner(ps, jb.user).Region
				if owner == jb.via.name {
					local.Add(1)
				} else {
					forwarded.Add(1)
				}
				r, err := c.setRetry(jb.via, jb.user, jb.item, "like-"+jb.item, true, 10*time.Second)
				if err != nil {
					t.Error(err)
					continue
				}
				if !r.ans.Liked || !r.ans.Changed {
					t.Errorf("like of (%s, %s) via %s (owner %s) = %+v, want liked and changed", jb.item, jb.user, jb.via.name, owner, r.ans)
				}
				if liked, err := c.button(jb.via, jb.user, jb.item); err != nil || !liked {
					t.Errorf("read-your-writes: button of (%s, %s) at ingress %s (owner %s) right after the 200 = %v, %v; want true",
						jb.item, jb.user, jb.via.name, owner, liked, err)
				}
				if jb.unlikeVia == nil {
					continue
				}
				r, err = c.setRetry(jb.unlikeVia, jb.user, jb.item, "unlike-"+jb.item, false, 10*time.Second)
				if err != nil {
					t.Error(err)
					continue
				}
				if r.ans.Liked || !r.ans.Changed {
					t.Errorf("unlike of (%s, %s) via %s (owner %s) = %+v, want unliked and changed", jb.item, jb.user, jb.unlikeVia.name, owner, r.ans)
				}
				if liked, err := c.button(jb.unlikeVia, jb.user, jb.item); err != nil || liked {
					t.Errorf("read-your-writes: button of (%s, %s) at ingress %s (owner %s) right after the unlike = %v, %v; want false",
						jb.item, jb.user, jb.unlikeVia.name, owner, liked, err)
				}
			}
		})
	}
	for _, jb := range jobs {
		work <- jb
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		return
	}
	if forwarded.Load() == 0 || local.Load() == 0 {
		t.Fatalf("%d forwarded and %d local writes; the test needs both", forwarded.Load(), local.Load())
	}
	acked := time.Now()
	c.waitCounts(t, want, 20*time.Second)

	// asOf: every region's count is labelled with an asOf that covers the last
	// acknowledgement, that is the min over the three regions' watermarks as
	// known there, and that keeps advancing.
	for _, n := range c.nodes {
		var last triStatus
		c.poll(t, 15*time.Second, "asOf at "+n.name+" to cover the last acknowledged write", func() (bool, string) {
			cnt, err := c.count(n, items[0])
			if err != nil {
				return false, err.Error()
			}
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			last = st
			asOf, min, err := triAsOf(st)
			if err != nil {
				t.Fatalf("status at %s: %v (%+v)", n.name, err, st)
			}
			if !asOf.Equal(min) {
				t.Fatalf("status at %s: asOf %v is not the min %v over %v", n.name, asOf, min, st.Watermarks)
			}
			if cnt.AsOf.After(asOf) {
				t.Fatalf("count at %s claims asOf %v, later than the watermarks read after it (min %v)", n.name, cnt.AsOf, asOf)
			}
			if now := time.Now(); asOf.After(now) {
				t.Fatalf("status at %s: asOf %v is in the future (now %v)", n.name, asOf, now)
			}
			return !cnt.AsOf.Before(acked), fmt.Sprintf("count asOf %v, last ack %v, watermarks %v", cnt.AsOf, acked, st.Watermarks)
		})
		prev, _, _ := triAsOf(last)
		c.poll(t, 10*time.Second, "asOf at "+n.name+" to advance", func() (bool, string) {
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			asOf, _, err := triAsOf(st)
			return err == nil && asOf.After(prev), fmt.Sprintf("asOf %s, was %v", st.AsOf, prev)
		})
	}
}

// triAsOf parses a status's asOf and the min of its watermarks over the three
// regions (each must be known).
func triAsOf(st triStatus) (asOf, min time.Time, err error) {
	if asOf, err = time.Parse(time.RFC3339Nano, st.AsOf); err != nil {
		return
	}
	for _, name := range triNames {
		s, ok := st.Watermarks[name]
		if !ok {
			return asOf, min, fmt.Errorf("no watermark of %s", name)
		}
		wm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return asOf, min, err
		}
		if min.IsZero() || wm.Before(min) {
			min = wm
		}
	}
	return asOf, min, nil
}

// testTriIdempotency: a key retried through a different ingress region replays
// the first answer (the owner's record decides, wherever the write enters), is
// never applied twice, and a key reused for another request is 409 even when
// forwarded.
func testTriIdempotency(t *testing.T, c *triCluster, users []string) {
	ps := c.mustPins(t)
	pick := func(owner string) string {
		for _, u := range users {
			if triOwner(ps, u).Region == owner {
				return u
			}
		}
		t.Fatalf("no user pinned to %s: %s", owner, c.pinString())
		return ""
	}
	ok := func(n *triNode, user, item, key string, like bool) triRetry {
		t.Helper()
		r, err := c.setRetry(n, user, item, key, like, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	conflict := func(n *triNode, user, item, key string, like bool) {
		t.Helper()
		r, err := c.setRetry(n, user, item, key, like, 10*time.Second)
		if err == nil || r.last.code != http.StatusConflict || r.last.errCode() != "idempotency_key_conflict" {
			t.Fatalf("reusing key %s for another request via %s = %s, %v; want 409 idempotency_key_conflict", key, n.name, r.last, err)
		}
	}
	type tcase struct {
		owner, first, retry string
		user, item          string
		firstAnswer         triRetry
	}
	cases := []*tcase{
		{owner: "eu", first: "us", retry: "ap"}, // forwarded both times, from two regions
		{owner: "us", first: "us", retry: "eu"}, // local, then forwarded
		{owner: "ap", first: "eu", retry: "ap"}, // forwarded, then local
	}
	want := map[string]int64{}
	for _, tc := range cases {
		tc.user, tc.item = pick(tc.owner), "idem-"+tc.owner
		first, retry := c.byName[tc.first], c.byName[tc.retry]
		k1, k2 := "k1-"+tc.item, "k2-"+tc.item

		a1 := ok(first, tc.user, tc.item, k1, true)
		if !a1.ans.Liked || !a1.ans.Changed {
			t.Fatalf("first like via %s = %+v, want liked and changed", tc.first, a1.ans)
		}
		tc.firstAnswer = a1
		if a2 := ok(retry, tc.user, tc.item, k1, true); a2.ans != a1.ans {
			t.Fatalf("retry of %s via %s (owner %s) = %+v, want the first answer %+v", k1, tc.retry, tc.owner, a2.ans, a1.ans)
		}
		a3 := ok(retry, tc.user, tc.item, k2, true)
		if !a3.ans.Liked || a3.ans.Changed {
			t.Fatalf("second like (new key) via %s = %+v, want liked and unchanged", tc.retry, a3.ans)
		}
		if a4 := ok(first, tc.user, tc.item, k2, true); a4.ans != a3.ans {
			t.Fatalf("retry of %s via %s = %+v, want its first answer %+v (changed:false)", k2, tc.first, a4.ans, a3.ans)
		}
		for _, n := range []*triNode{retry, first} {
			conflict(n, tc.user, tc.item+"-other", k1, true) // same key, another item
			conflict(n, tc.user, tc.item, k1, false)         // same key, an unlike
		}
		want[tc.item], want[tc.item+"-other"] = 1, 0
	}
	c.waitCounts(t, want, 20*time.Second) // retries did not double anything

	// Unlike, then replay the first like's key through the other region: the
	// stored answer comes back, but the like is not applied again.
	for _, tc := range cases {
		first, retry := c.byName[tc.first], c.byName[tc.retry]
		u := ok(first, tc.user, tc.item, "k3-"+tc.item, false)
		if u.ans.Liked || !u.ans.Changed {
			t.Fatalf("unlike via %s = %+v, want unliked and changed", tc.first, u.ans)
		}
		if r := ok(retry, tc.user, tc.item, "k1-"+tc.item, true); r.ans != tc.firstAnswer.ans {
			t.Fatalf("replay of k1 after the unlike via %s = %+v, want the first answer %+v", tc.retry, r.ans, tc.firstAnswer.ans)
		}
		for _, n := range []*triNode{retry, first} {
			if liked, err := c.button(n, tc.user, tc.item); err != nil || liked {
				t.Fatalf("button at %s after unlike + replay = %v, %v; want false (a replay must not re-apply)", n.name, liked, err)
			}
		}
		want[tc.item] = 0
	}
	c.waitCounts(t, want, 20*time.Second)
}

// testTriPinMove: writers keep writing through random regions while every
// range of us is drained to eu. Writes to the moving ranges fail closed
// (503 + Retry-After) until notBefore and succeed afterwards on retry with the
// same key; other ranges keep being served. After quiescing, every region
// counts exactly the LIKED edges implied by the acknowledged writes, the
// aggregators and replication have no lag, and reconciliation finds nothing.
func testTriPinMove(t *testing.T, c *triCluster, users []string) {
	before := c.mustPins(t)
	fromRanges := map[uint32]bool{}
	for _, p := range before {
		if p.Region == "us" {
			fromRanges[p.Range] = true
		}
	}
	if len(fromRanges) == 0 {
		t.Fatalf("us owns no range: %s", c.pinString())
	}
	type pair struct {
		item, user string
		moving     bool
	}
	items := []string{"mv-0", "mv-1", "mv-2"}
	var moving, staying []pair
	for _, it := range items {
		for _, u := range users {
			p := pair{item: it, user: u, moving: triOwner(before, u).Region == "us"}
			if p.moving {
				moving = append(moving, p)
			} else {
				staying = append(staying, p)
			}
		}
	}
	// Each pair belongs to one writer, so its final state is its writer's
	// last acknowledged target.
	const perSide = 3
	var mine [2 * perSide][]pair
	for i, p := range moving {
		mine[i%perSide] = append(mine[i%perSide], p)
	}
	for i, p := range staying {
		mine[perSide+i%perSide] = append(mine[perSide+i%perSide], p)
	}

	var (
		stop                 atomic.Bool
		acks, notAuth, other atomic.Int64
		stayingInWindow      atomic.Int64
		movedAfterNB         atomic.Bool
		winMu                sync.Mutex
		drainStart           time.Time
		drainDone            time.Time
		notBefore            map[uint32]time.Time // of each moved range
		results              [2 * perSide]map[pair]bool
		wg                   sync.WaitGroup
	)
	proofLimit := c.ecfg.TTL - c.ecfg.Margin
	for w := range mine {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			last := map[pair]bool{}
			defer func() { results[w] = last }()
			for op := 0; op < 5000 && !stop.Load(); op++ {
				p := mine[w][rng.IntN(len(mine[w]))]
				target := last[p]
				if rng.IntN(4) != 0 {
					target = !target // mostly flips; some repeat the current state
				}
				via := c.nodes[rng.IntN(len(c.nodes))]
				r, err := c.setRetry(via, p.user, p.item, fmt.Sprintf("mv-%d-%d", w, op), target, 20*time.Second)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					stop.Store(true)
					return
				}
				if r.ans.Liked != target {
					t.Errorf("writer %d: set (%s, %s) to liked=%v via %s answered %+v", w, p.item, p.user, target, via.name, r.ans)
				}
				last[p] = target
				acks.Add(1)
				notAuth.Add(int64(r.notAuth))
				other.Add(int64(r.other503))
				winMu.Lock()
				start, done, nbs := drainStart, drainDone, notBefore
				winMu.Unlock()
				if nbs == nil {
					continue
				}
				got, sent := r.last.got, r.last.sent
				if !p.moving {
					if got.After(start) && got.Before(start.Add(c.ecfg.TTL+c.ecfg.MaxSkew)) {
						stayingInWindow.Add(1)
					}
					continue
				}
				rg := triOwner(before, p.user).Range
				switch nb := nbs[rg]; {
				case sent.After(done.Add(proofLimit)) && got.Before(nb):
					// us must have seen the move by then (its proof is
					// younger than TTL − margin), and eu waits for notBefore.
					t.Errorf("fail closed violated: a write to moved range %d sent %v after the drain was acknowledged %v before its notBefore",
						rg, sent.Sub(done), nb.Sub(got))
				case got.After(nb):
					movedAfterNB.Store(true)
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // on a Fatal below

	c.poll(t, 15*time.Second, "writers to get going", func() (bool, string) {
		return acks.Load() >= 30, fmt.Sprint(acks.Load(), " acknowledged writes")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An operator tool (likectl pins drain, the chaos nemesis) computes one
	// notBefore before draining. A drain of many ranges through a remote etcd
	// can outlast it (on a loaded 2-core machine these 6 moves took up to
	// 5s), so pass one already in the past: every range must still get
	// notBefore >= its own move + TTL + MaxSkew, or eu could start while us
	// may still write (its proof lasts TTL − Margin after the move).
	start := time.Now()
	moved, err := c.dir.Drain(ctx, "us", "eu", start.Add(-time.Second), etcdepoch.Planned())
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	done := time.Now()
	nbs := map[uint32]time.Time{}
	for _, p := range moved {
		nbs[p.Range] = p.NotBefore
	}
	winMu.Lock()
	drainStart, drainDone, notBefore = start, done, nbs
	winMu.Unlock()
	t.Logf("pin move: the drain of %d ranges took %v", len(moved), done.Sub(start).Round(time.Millisecond))
	if len(moved) != len(fromRanges) {
		t.Fatalf("drain moved %d ranges, us owned %d", len(moved), len(fromRanges))
	}
	floor := c.ecfg.NotBefore(start).UnixMilli() // pins store ms
	for _, p := range moved {
		if !fromRanges[p.Range] || p.Region != "eu" || p.Epoch != before[p.Range].Epoch+1 {
			t.Fatalf("drain moved %+v (before: %+v)", p, before[p.Range])
		}
		if p.NotBefore.UnixMilli() < floor {
			t.Errorf("range %d moved to eu is writable from %v, only %v after the drain started (want >= TTL + MaxSkew = %v after its move)",
				p.Range, p.NotBefore, p.NotBefore.Sub(start), c.ecfg.TTL+c.ecfg.MaxSkew)
		}
	}
	c.poll(t, 20*time.Second, "a write to a moved range to be acknowledged after its notBefore", func() (bool, string) {
		return movedAfterNB.Load(), fmt.Sprintf("%d acks, %d not_authoritative, now %v", acks.Load(), notAuth.Load(), time.Now())
	})
	// The drain was planned: eu settled every moved pin (caught up on us's and
	// ap's logs) before writing it.
	c.poll(t, 20*time.Second, "eu to settle the planned moves", func() (bool, string) {
		for _, p := range c.mustPins(t) {
			if fromRanges[p.Range] && (p.CatchUp || p.Region != "eu") {
				return false, fmt.Sprintf("range %d: %+v", p.Range, p)
			}
		}
		st, err := c.status(c.byName["eu"])
		if err != nil || st.CatchingUp != 0 {
			return false, fmt.Sprintf("eu status: %d pins catching up, %v", st.CatchingUp, err)
		}
		return true, ""
	})
	stop.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("pin move: %d writes acknowledged, %d answered 503 not_authoritative first, %d other 503s; %d writes to other ranges acknowledged while the moved ranges waited",
		acks.Load(), notAuth.Load(), other.Load(), stayingInWindow.Load())
	if notAuth.Load() == 0 {
		t.Error("no write was refused with 503 not_authoritative during the move's notBefore window")
	}

	final := map[pair]bool{}
	for _, m := range results {
		for p, v := range m {
			final[p] = v
		}
	}
	want := map[string]int64{}
	for _, it := range items {
		want[it] = 0
	}
	for p, v := range final {
		if v {
			want[p.item]++
		}
	}
	c.waitCounts(t, want, 30*time.Second)
	c.poll(t, 20*time.Second, "aggregators and replication to drain (lag 0)", func() (bool, string) {
		var b strings.Builder
		ok := true
		// A region of several nodes ships from one of them (elected); the
		// others list no peers.
		sts := map[*triNode]triStatus{}
		regions, shipping := map[string]bool{}, map[string]bool{}
		for _, n := range c.nodes {
			st, err := c.status(n)
			if err != nil {
				return false, err.Error()
			}
			sts[n], regions[st.Region] = st, true
			shipping[st.Region] = shipping[st.Region] || len(st.Peers) > 0
		}
		for _, n := range c.nodes {
			st := sts[n]
			fmt.Fprintf(&b, "%s: aggregator lag %d, peers", n.name, st.AggregatorLag)
			ok = ok && st.AggregatorLag == 0 && shipping[st.Region] && (len(st.Peers) == 0 || len(st.Peers) == len(regions)-1)
			for _, p := range st.Peers {
				fmt.Fprintf(&b, " %s(active=%v lag=%d)", p.Region, p.Active, p.LagEvents)
				ok = ok && p.Active && p.LagEvents == 0
			}
			b.WriteString("; ")
		}
		return ok, b.String()
	})
	for _, n := range c.nodes {
		rep, err := c.reconcile(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Mismatched) != 0 || rep.Items < len(items) {
			t.Errorf("reconcile at %s: %d items checked, mismatched %s", n.name, rep.Items, rep.Mismatched)
		}
	}
	// Every region's replica (and overlay) of every edge is the final state.
	pairs := make([]pair, 0, len(final))
	for p := range final {
		pairs = append(pairs, p)
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].item+pairs[i].user < pairs[j].item+pairs[j].user })
	for _, n := range c.nodes {
		for _, p := range pairs {
			if liked, err := c.button(n, p.user, p.item); err != nil || liked != final[p] {
				t.Errorf("edge (%s, %s) at %s = %v, %v; last acknowledged liked=%v", p.item, p.user, n.name, liked, err, final[p])
			}
		}
	}
	for _, p := range c.mustPins(t) {
		if p.Region == "us" {
			t.Errorf("after the drain range %d is still pinned to us: %s", p.Range, c.pinString())
		}
	}
	// us learns of the moves from its watch (or its TTL/4 re-read): its own
	// view may trail etcd's by a moment.
	c.poll(t, 10*time.Second, "us's status to own no pins after the drain", func() (bool, string) {
		st, err := c.status(c.byName["us"])
		return err == nil && st.PinsOwned == 0, fmt.Sprintf("%d pins owned, %v", st.PinsOwned, err)
	})
}

// testTriLeaseLoss: cut ap off from etcd (close its own client). Within TTL
// it refuses writes for its ranges with 503 not_authoritative instead of
// accepting them, while us and eu (and ap, for ranges it forwards) keep
// serving; the controller in a live region then moves ap's ranges to the
// next region in preference order, and their users' writes succeed there.
func testTriLeaseLoss(t *testing.T, c *triCluster, users []string) {
	before := c.mustPins(t)
	ap := c.byName["ap"]
	var apUsers, euUsers []string
	apRanges := map[uint32]epoch.Pin{}
	for _, u := range users {
		switch p := triOwner(before, u); p.Region {
		case "ap":
			apUsers = append(apUsers, u)
			apRanges[p.Range] = p
		case "eu":
			euUsers = append(euUsers, u)
		}
	}
	if len(apUsers) == 0 || len(euUsers) == 0 {
		t.Fatalf("need users pinned to ap and to eu: %s", c.pinString())
	}
	u := apUsers[0]
	if r, err := c.setRetry(ap, u, "cut-probe", "cut-probe-first", true, 10*time.Second); err != nil || !r.ans.Liked {
		t.Fatalf("write at ap for its own range before the cut = %+v, %v", r.ans, err)
	}

	cut := time.Now()
	_ = c.apCli.Close() // ap can no longer keep its lease or read pins
	var refused triResp
	for i := 0; ; i++ {
		res := c.set(ap, u, "cut-probe", fmt.Sprintf("cut-probe-%d", i), true)
		if res.code == http.StatusServiceUnavailable {
			refused = res
			break
		}
		if res.code != http.StatusOK {
			t.Fatalf("probe at ap after the cut: %s", res)
		}
		// A write may be accepted only while ap's last proof (at or before
		// the cut) is younger than TTL − Margin: never once TTL has passed.
		if d := res.sent.Sub(cut); d > c.ecfg.TTL {
			t.Fatalf("ap accepted a write for its own range sent %v after losing etcd (TTL %v): %s", d, c.ecfg.TTL, res)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refused.errCode() != "not_authoritative" || refused.retryAfter == "" {
		t.Fatalf("ap refused with %s (Retry-After %q), want 503 not_authoritative with Retry-After", refused, refused.retryAfter)
	}
	t.Logf("lease loss: ap failed closed %v after the cut", refused.got.Sub(cut).Round(time.Millisecond))

	// The others keep serving, and ap still forwards the ranges it does not
	// own (the owner decides, so its stale table is harmless there).
	for _, n := range c.nodes {
		r, err := c.setRetry(n, euUsers[0], "cut-other", "cut-other-"+n.name, true, 10*time.Second)
		if err != nil || !r.ans.Liked {
			t.Fatalf("write for an eu user via %s while ap is cut = %+v, %v", n.name, r.ans, err)
		}
	}

	// Failover: ap's lease expires and the elected controller (us or eu)
	// moves its ranges, each with its epoch bumped.
	var after []epoch.Pin
	c.poll(t, 20*time.Second, "the controller to move ap's ranges", func() (bool, string) {
		ps, err := c.pins()
		if err != nil {
			return false, err.Error()
		}
		after = ps
		for rng, old := range apRanges {
			if p := ps[rng]; p.Region == "ap" || p.Epoch != old.Epoch+1 {
				return false, fmt.Sprintf("range %d is %s@%d", rng, p.Region, p.Epoch)
			}
		}
		return true, ""
	})
	for rng := range apRanges {
		if p := after[rng]; p.Region != "us" {
			t.Errorf("range %d moved to %s; the preference order %v puts us after ap", rng, p.Region, triNames)
		}
	}

	// Writes for ap's users succeed again through us and eu (after notBefore).
	want := map[string]int64{"cut-probe": 1, "cut-other": 1, "cut-after": 0}
	for i, au := range apUsers {
		via := c.nodes[i%2] // us, eu
		r, err := c.setRetry(via, au, "cut-after", "cut-after-"+au, true, 15*time.Second)
		if err != nil || !r.ans.Liked || !r.ans.Changed {
			t.Fatalf("write for ap's former user %s via %s after failover = %+v, %v", au, via.name, r.ans, err)
		}
		want["cut-after"]++
	}
	// ap, still cut off, keeps refusing them: it cannot prove anything.
	if res := c.set(ap, u, "cut-probe", "cut-probe-late", true); res.code != http.StatusServiceUnavailable {
		t.Errorf("ap accepted a write for a range it lost while cut off from etcd: %s", res)
	}
	c.waitCounts(t, want, 20*time.Second)
}
