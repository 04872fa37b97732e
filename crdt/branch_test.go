package crdt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Branch correction (DESIGN section 5), ported from
// /work/shared/models/branch_correction.py and extended.
//
// One edge, n regions. Epochs are owned by one region at a time and handed over
// cleanly in time (every old-epoch write happens before every new-epoch write),
// but replication is arbitrarily delayed, so a new owner may branch from a stale
// local version. Each region keeps its branch records in crdt.Branches (Open on
// the first write in an epoch, Observe on every replicated version) and sums its
// contribution: its own write deltas plus correction deltas.
//
// Invariant after full delivery: every region holds the same register (the
// newest version written), and the sum of all contributions equals the final
// state's Counts(). Also: the final state is what the last acknowledged write
// asked for. Also: every branch's base is the newest version written in
// an earlier epoch, which is why the contributions telescope.
//
// Delivery modes go beyond the Python model (per-link FIFO): reordered delivery
// within a link, duplicated messages, and anti-entropy gossip that re-sends a
// region's current register to any peer (including a version back to its own
// writer, and third-party versions).

type deliveryMode int

const (
	modeFIFO    deliveryMode = iota // the Python model: per-(source,dest) FIFO
	modeReorder                     // any pending message of a link may arrive next
	modeDup                         // reordered, plus duplicates and anti-entropy gossip
)

func (m deliveryMode) String() string {
	return [...]string{"fifo", "reorder", "dup"}[m]
}

// chooser is the source of the world's nondeterminism: a seeded PCG, or rapid.
type chooser interface {
	intn(n int, label string) int
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int, _ string) int { return c.r.IntN(n) }

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) intn(n int, label string) int {
	return rapid.IntRange(0, n-1).Draw(c.t, label)
}

type link struct{ from, to int }

type branchWorld struct {
	ch       chooser
	mode     deliveryMode
	n        int
	epoch    uint64
	owner    int
	local    []Register
	branches []Branches
	contrib  []int
	links    []link       // fixed order, so a seed replays exactly
	pend     []link       // scratch for pending()
	queue    [][]Register // pending messages, indexed by link (from*n+to)
	written  []Register   // every version any owner wrote
	dupLeft  int          // bounds duplicates so the run terminates
	nonzero  int          // nonzero corrections seen (the run is not vacuous)
	acked    []State      // targets of the owners' acknowledged writes, in time order
	tracing  bool         // record a trace (only when replaying a failed seed)
	trace    []string
}

func newBranchWorld(ch chooser, mode deliveryMode, n int) *branchWorld {
	w := &branchWorld{
		ch:       ch,
		mode:     mode,
		n:        n,
		epoch:    1,
		local:    make([]Register, n),
		branches: make([]Branches, n),
		contrib:  make([]int, n),
		queue:    make([][]Register, n*n),
		dupLeft:  64,
	}
	for a := range n {
		for b := range n {
			if a != b {
				w.links = append(w.links, link{a, b})
			}
		}
	}
	w.owner = ch.intn(n, "first owner")
	return w
}

func (w *branchWorld) logf(format string, args ...any) {
	if !w.tracing {
		return
	}
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
}

// write is the owner's conditional write of target (edge.Decide's rule): a new
// version when the state differs, or always on the first touch in an epoch.
func (w *branchWorld) write(target State) {
	o := w.owner
	cur := w.local[o]
	first := cur.Version.Epoch < w.epoch
	w.acked = append(w.acked, target) // a write or a noop: both answer the client
	if cur.State == target && !first {
		return
	}
	if first {
		w.branches[o] = w.branches[o].Open(w.epoch, cur)
	}
	nv := Register{Version: Version{Epoch: w.epoch, Op: cur.Version.Op + 1}, State: target}
	delta := target.Counts() - cur.State.Counts()
	w.contrib[o] += delta
	w.local[o] = nv
	w.written = append(w.written, nv)
	if w.tracing {
		w.logf("r%d writes %v %v (delta %+d, first %v)", o, nv.Version, nv.State, delta, first)
	}
	for b := range w.n {
		if b != o {
			w.queue[o*w.n+b] = append(w.queue[o*w.n+b], nv)
		}
	}
}

func (w *branchWorld) failover() {
	w.epoch++
	w.owner = w.ch.intn(w.n, "new owner")
	if w.tracing {
		w.logf("failover: epoch %d owned by r%d", w.epoch, w.owner)
	}
}

// receive applies a replicated version at region to, as the replication layer
// does: last-writer-wins on the register, then Observe on the branch records.
func (w *branchWorld) receive(to int, v Register) {
	w.local[to] = MergeRegister(w.local[to], v)
	before := w.branches[to]
	d, nb, changed := before.Observe(v)
	if !changed && d != 0 {
		panic("Observe returned a delta without a change")
	}
	w.contrib[to] += d
	w.branches[to] = nb
	if d != 0 {
		w.nonzero++
	}
	switch {
	case !w.tracing:
	case changed:
		w.logf("  r%d gets %v %v: correction %+d, branches %v", to, v.Version, v.State, d, nb)
	default:
		w.logf("  r%d gets %v %v", to, v.Version, v.State)
	}
}

func (w *branchWorld) pending() []link {
	ls := w.pend[:0]
	for _, l := range w.links {
		if len(w.queue[l.from*w.n+l.to]) > 0 {
			ls = append(ls, l)
		}
	}
	w.pend = ls
	return ls
}

// deliverOne delivers one pending message; false when none is pending.
func (w *branchWorld) deliverOne() bool {
	ls := w.pending()
	if len(ls) == 0 {
		return false
	}
	l := ls[w.ch.intn(len(ls), "link")]
	q := w.queue[l.from*w.n+l.to]
	i := 0
	if w.mode != modeFIFO {
		i = w.ch.intn(len(q), "message")
	}
	v := q[i]
	q = slices.Delete(q, i, i+1)
	if w.mode == modeDup && w.dupLeft > 0 && w.ch.intn(4, "duplicate?") == 0 {
		// The network delivers this message again later.
		w.dupLeft--
		q = slices.Insert(q, w.ch.intn(len(q)+1, "dup position"), v)
	}
	w.queue[l.from*w.n+l.to] = q
	w.receive(l.to, v)
	return true
}

// gossip: anti-entropy re-sends from's current register to to.
func (w *branchWorld) gossip() {
	from := w.ch.intn(w.n, "gossip from")
	to := w.ch.intn(w.n, "gossip to")
	if from == to || w.local[from] == (Register{}) {
		return
	}
	l := link{from, to}
	q := w.queue[l.from*w.n+l.to]
	w.queue[l.from*w.n+l.to] = slices.Insert(q, w.ch.intn(len(q)+1, "gossip position"), w.local[from])
}

func (w *branchWorld) step() {
	x := w.ch.intn(100, "action")
	switch {
	case x < 50:
		w.write(State(w.ch.intn(2, "target")))
	case x < 65:
		w.failover()
	case x < 95 || w.mode != modeDup:
		w.deliverOne()
	default:
		w.gossip()
	}
}

func (w *branchWorld) drain() {
	for w.deliverOne() {
	}
}

// check returns a description of the first violated invariant, or "".
func (w *branchWorld) check() string {
	final := w.local[0]
	for r, l := range w.local {
		if l != final {
			return fmt.Sprintf("regions disagree: r0 %v/%v, r%d %v/%v", final.Version, final.State, r, l.Version, l.State)
		}
	}
	var newest Register
	for _, v := range w.written {
		newest = MergeRegister(newest, v)
	}
	if final != newest {
		return fmt.Sprintf("final register %v, newest written %v", final, newest)
	}
	// Nothing acknowledged is overtaken: the edge ends as the last request
	// asked (this is what "first touch in a new epoch writes a version" buys).
	if len(w.acked) > 0 && final.State != w.acked[len(w.acked)-1] {
		return fmt.Sprintf("last acknowledged write asked for %v, edge converged to %v", w.acked[len(w.acked)-1], final.State)
	}
	sum := 0
	for _, c := range w.contrib {
		sum += c
	}
	if sum != final.State.Counts() {
		return fmt.Sprintf("sum of contributions %d (%v) != final state %v counts %d", sum, w.contrib, final.State, final.State.Counts())
	}
	for r, bs := range w.branches {
		for i, b := range bs {
			if i > 0 && bs[i-1].Epoch >= b.Epoch {
				return fmt.Sprintf("r%d branches not sorted by epoch: %v", r, bs)
			}
			var want Register
			for _, v := range w.written {
				if v.Version.Epoch < b.Epoch {
					want = MergeRegister(want, v)
				}
			}
			if b.Base != want {
				return fmt.Sprintf("r%d branch %d base %v, want newest earlier version %v", r, b.Epoch, b.Base, want)
			}
		}
	}
	return ""
}

func runBranchWorld(ch chooser, mode deliveryMode, n, steps int, tracing bool) *branchWorld {
	w := newBranchWorld(ch, mode, n)
	w.tracing = tracing
	for range steps {
		w.step()
	}
	w.drain()
	return w
}

func TestBranchCorrectionSeeds(t *testing.T) {
	seeds := 5000
	if testing.Short() {
		seeds = 300
	}
	for _, mode := range []deliveryMode{modeFIFO, modeReorder, modeDup} {
		t.Run(mode.String(), func(t *testing.T) {
			corrections := 0
			for seed := range uint64(seeds) {
				run := func(tracing bool) (*branchWorld, int, int) {
					r := rand.New(rand.NewPCG(seed, uint64(mode)))
					n := 2 + r.IntN(3)       // 2..4 regions
					steps := 20 + r.IntN(60) // 20..79 actions
					return runBranchWorld(randChooser{r}, mode, n, steps, tracing), n, steps
				}
				w, n, steps := run(false)
				if msg := w.check(); msg != "" {
					w, _, _ = run(true) // the same seed again, with a trace
					t.Fatalf("mode %v seed %d (n=%d steps=%d): %s\ntrace:\n%s", mode, seed, n, steps, msg, strings.Join(w.trace, "\n"))
				}
				corrections += w.nonzero
			}
			// The runs must actually exercise nonzero corrections.
			if corrections == 0 {
				t.Fatalf("mode %v: no nonzero correction in %d seeds; the test is vacuous", mode, seeds)
			}
			t.Logf("mode %v: %d seeds, %d nonzero corrections", mode, seeds, corrections)
		})
	}
}

// TestBranchCorrectionRapid is the same world driven by rapid, which shrinks a
// failure to a short trace.
func TestBranchCorrectionRapid(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mode := deliveryMode(rapid.IntRange(0, 2).Draw(rt, "mode"))
		n := rapid.IntRange(2, 4).Draw(rt, "regions")
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		w := runBranchWorld(rapidChooser{rt}, mode, n, steps, true)
		if msg := w.check(); msg != "" {
			rt.Fatalf("%s\ntrace:\n%s", msg, strings.Join(w.trace, "\n"))
		}
	})
}

// TestBranchChainABC is the A→B→C chain by hand, with replication delivered in
// the worst order: C learns B's versions before A's, and everything twice.
func TestBranchChainABC(t *testing.T) {
	const A, B, C = 0, 1, 2
	reg := func(e, o uint64, s State) Register { return Register{Version{e, o}, s} }

	// Epoch 1, A: like, unlike, like. Nothing replicates yet.
	a1, a2, a3 := reg(1, 1, Liked), reg(1, 2, Unliked), reg(1, 3, Liked)
	contrib := map[int]int{A: +1 - 1 + 1}
	// Epoch 2, B (knows nothing): first touch branches from 0.0; B unlikes →
	// equal state, still writes 2.1 (first touch), delta 0; then likes: 2.2, +1.
	var bB Branches
	bB = bB.Open(2, Register{})
	b1, b2 := reg(2, 1, Unliked), reg(2, 2, Liked)
	contrib[B] += 0 + 1
	// Epoch 3, C (knows nothing): branches from 0.0, unlikes: 3.1 delta 0.
	var bC Branches
	bC = bC.Open(3, Register{})
	c1 := reg(3, 1, Unliked)
	contrib[C] += 0

	observe := func(r int, bs *Branches, v Register) {
		d, nb, _ := bs.Observe(v)
		contrib[r] += d
		*bs = nb
	}
	// C gets B's versions (newest first), then A's, everything twice.
	for _, v := range []Register{b2, b1, b2, a3, a1, a2, a3, b1} {
		observe(C, &bC, v)
	}
	// B gets A's versions out of order and duplicated, and C's (no correction:
	// a later epoch than B's branch).
	for _, v := range []Register{a2, a1, a2, c1, a3, a3} {
		observe(B, &bB, v)
	}
	// A has no branch; it owes nothing.
	sum := contrib[A] + contrib[B] + contrib[C]
	if sum != c1.State.Counts() {
		t.Fatalf("contributions %v sum %d, want %d", contrib, sum, c1.State.Counts())
	}
	if bB[0].Base != a3 || bC[0].Base != b2 {
		t.Fatalf("bases: B %v (want %v), C %v (want %v)", bB[0].Base, a3, bC[0].Base, b2)
	}
	// B: writes +1, corrections -(L-U)=-1 (via a2 then a1 ignored, then a3):
	// a2 moves base U→U (0), a1 is older than a2 (ignored), a3: -(1-0) = -1.
	if contrib[B] != 0 {
		t.Fatalf("B contributed %d, want 0", contrib[B])
	}
	// C: writes 0, b2 arrives first: -(1-0) = -1; everything else is older.
	if contrib[C] != -1 {
		t.Fatalf("C contributed %d, want -1", contrib[C])
	}
}

func TestBranchesOpen(t *testing.T) {
	base := Register{Version{1, 4}, Liked}
	var bs Branches
	bs = bs.Open(3, base)
	bs = bs.Open(1, Register{})
	bs = bs.Open(3, Register{Version{2, 9}, Unliked}) // exists: no-op
	want := Branches{{1, Register{}}, {3, base}}
	if !slices.Equal(bs, want) {
		t.Fatalf("Open = %v, want %v", bs, want)
	}
	// Open never writes into its receiver's backing array, even with spare
	// capacity (callers keep the old slice, e.g. a store's read snapshot).
	grown := make(Branches, len(bs), 10)
	copy(grown, bs)
	backing := slices.Clone(grown[:cap(grown)])
	if got := grown.Open(2, Register{}); len(got) != 3 || got[1].Epoch != 2 {
		t.Fatalf("Open(2) = %v", got)
	}
	if !slices.Equal(grown[:cap(grown)], backing) {
		t.Fatalf("Open modified its receiver's backing array: %v", grown[:cap(grown)])
	}
}

func TestBranchesObserve(t *testing.T) {
	zero := Register{}
	bs := Branches(nil).Open(2, zero).Open(4, Register{Version{3, 7}, Liked})
	orig := slices.Clone(bs)

	// v from epoch 1 is newer than branch 2's base, older than branch 4's.
	v := Register{Version{1, 3}, Liked}
	d, out, changed := bs.Observe(v)
	if d != -1 || !changed {
		t.Fatalf("Observe(%v) = %d, %v; want -1, true", v, d, changed)
	}
	if out[0].Base != v || out[1].Base != bs[1].Base {
		t.Fatalf("Observe moved bases to %v", out)
	}
	if !slices.Equal(bs, orig) {
		t.Fatalf("Observe modified its receiver: %v", bs)
	}
	// The same version again: nothing more to correct (no double correction).
	if d, out2, changed := out.Observe(v); d != 0 || changed || !slices.Equal(out2, out) {
		t.Fatalf("duplicate Observe = %d, %v, %v", d, out2, changed)
	}
	// An older version of the same epoch arriving late: already accounted for.
	if d, _, changed := out.Observe(Register{Version{1, 2}, Unliked}); d != 0 || changed {
		t.Fatalf("late older Observe = %d, %v", d, changed)
	}
	// A version of a branch's own epoch (echoed back), a later one, or one
	// older than every base it could correct: no-op.
	for _, e := range []Register{{Version{2, 5}, Liked}, {Version{4, 1}, Unliked}, {Version{5, 1}, Liked}} {
		if d, _, changed := bs.Observe(e); d != 0 || changed {
			t.Fatalf("Observe(%v) = %d, %v", e, d, changed)
		}
	}
	// Epoch 3 version newer than branch 4's base: corrects branch 4 only.
	w := Register{Version{3, 8}, Unliked}
	d, out, changed = bs.Observe(w)
	if d != +1 || !changed || out[1].Base != w || out[0].Base != zero {
		t.Fatalf("Observe(%v) = %d, %v, %v", w, d, out, changed)
	}
	// A version that moves a base without changing the state: delta 0, but
	// changed (the new base must be persisted).
	same := Register{Version{3, 9}, Liked}
	d, out, changed = bs.Observe(same)
	if d != 0 || !changed || out[1].Base != same {
		t.Fatalf("Observe(%v) = %d, %v, %v; want 0, moved, true", same, d, out, changed)
	}
}
