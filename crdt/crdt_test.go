package crdt

import (
	"errors"
	"flag"
	"maps"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestMain pins rapid's seed so `go test` is deterministic. Pass -rapid.seed=N
// (or RAPID_SEED) to explore other seeds; -rapid.checks=N for more cases.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("RAPID_SEED") == "" && flag.Lookup("rapid.seed").Value.String() == "0" {
		_ = flag.Set("rapid.seed", "20260101")
	}
	if os.Getenv("RAPID_NOFAILFILE") == "" {
		_ = flag.Set("rapid.nofailfile", "true")
	}
	os.Exit(m.Run())
}

// ---- generators ----------------------------------------------------------
//
// Values are drawn either from a tiny domain (so that ties on HWM, version and
// contents, which exercise Merge's tie-breaks, are common) or from the whole
// domain.

func genU64() *rapid.Generator[uint64] {
	return rapid.OneOf(rapid.Uint64Range(0, 3), rapid.Uint64())
}

func genI64() *rapid.Generator[int64] {
	return rapid.OneOf(rapid.Int64Range(-2, 3), rapid.Int64())
}

func genCell() *rapid.Generator[Cell] {
	return rapid.Custom(func(t *rapid.T) Cell {
		return Cell{
			P:         genU64().Draw(t, "p"),
			N:         genU64().Draw(t, "n"),
			HWM:       genU64().Draw(t, "hwm"),
			Watermark: genI64().Draw(t, "watermark"),
		}
	})
}

func genRegister() *rapid.Generator[Register] {
	return rapid.Custom(func(t *rapid.T) Register {
		return Register{
			Version: Version{
				Epoch: genU64().Draw(t, "epoch"),
				Op:    genU64().Draw(t, "op"),
			},
			// 3 is not a valid State, but Merge must still be a join for it.
			State: State(rapid.Uint8Range(0, 3).Draw(t, "state")),
		}
	})
}

var (
	testItems   = []string{"i1", "i2", "i3"}
	testRegions = []string{"eu", "us", "ap"}
)

func genCellKey() *rapid.Generator[CellKey] {
	return rapid.Custom(func(t *rapid.T) CellKey {
		return CellKey{
			Item:   rapid.SampledFrom(testItems).Draw(t, "item"),
			Region: rapid.SampledFrom(testRegions).Draw(t, "region"),
			Shard:  rapid.Uint32Range(0, 2).Draw(t, "shard"),
		}
	})
}

func genCellSet() *rapid.Generator[CellSet] {
	return rapid.Custom(func(t *rapid.T) CellSet {
		return CellSet(rapid.MapOfN(genCellKey(), genCell(), 0, 8).Draw(t, "cells"))
	})
}

func genWatermarks() *rapid.Generator[Watermarks] {
	return rapid.Custom(func(t *rapid.T) Watermarks {
		return Watermarks(rapid.MapOfN(rapid.SampledFrom(testRegions), genI64(), 0, 3).Draw(t, "wm"))
	})
}

// mergedSet returns a fresh CellSet holding a merged with each of os, in order;
// none of the inputs is modified.
func mergedSet(a CellSet, os ...CellSet) CellSet {
	out := maps.Clone(a)
	if out == nil {
		out = CellSet{}
	}
	for _, o := range os {
		out.Merge(o)
	}
	return out
}

func mergedWM(a Watermarks, os ...Watermarks) Watermarks {
	out := maps.Clone(a)
	if out == nil {
		out = Watermarks{}
	}
	for _, o := range os {
		out.Merge(o)
	}
	return out
}

// ---- MergeCell -----------------------------------------------------------

func TestMergeCellLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genCell().Draw(t, "a")
		b := genCell().Draw(t, "b")
		c := genCell().Draw(t, "c")
		checkCellLaws(t, a, b, c)
	})
}

// checkCellLaws is shared with the fuzz target.
func checkCellLaws(t interface{ Fatalf(string, ...any) }, a, b, c Cell) {
	if ab, ba := MergeCell(a, b), MergeCell(b, a); ab != ba {
		t.Fatalf("MergeCell not commutative: %+v vs %+v for a=%+v b=%+v", ab, ba, a, b)
	}
	if l, r := MergeCell(MergeCell(a, b), c), MergeCell(a, MergeCell(b, c)); l != r {
		t.Fatalf("MergeCell not associative: %+v vs %+v for a=%+v b=%+v c=%+v", l, r, a, b, c)
	}
	if aa := MergeCell(a, a); aa != a {
		t.Fatalf("MergeCell not idempotent: %+v vs %+v", aa, a)
	}
	// A join returns one of its inputs, and never one with a lower HWM.
	m := MergeCell(a, b)
	if m != a && m != b {
		t.Fatalf("MergeCell(%+v, %+v) = %+v, neither input", a, b, m)
	}
	if m.HWM < a.HWM || m.HWM < b.HWM {
		t.Fatalf("MergeCell(%+v, %+v) = %+v lost the higher HWM", a, b, m)
	}
	// The zero cell is the bottom for every real cell (watermarks are Unix ms,
	// never negative).
	if z := MergeCell(a, Cell{}); a.Watermark >= 0 && z != a {
		t.Fatalf("MergeCell(a, zero) = %+v, want %+v", z, a)
	}
}

// ---- MergeRegister -------------------------------------------------------

func TestMergeRegisterLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genRegister().Draw(t, "a")
		b := genRegister().Draw(t, "b")
		c := genRegister().Draw(t, "c")
		checkRegisterLaws(t, a, b, c)
	})
}

func checkRegisterLaws(t interface{ Fatalf(string, ...any) }, a, b, c Register) {
	if ab, ba := MergeRegister(a, b), MergeRegister(b, a); ab != ba {
		t.Fatalf("MergeRegister not commutative: %+v vs %+v for a=%+v b=%+v", ab, ba, a, b)
	}
	if l, r := MergeRegister(MergeRegister(a, b), c), MergeRegister(a, MergeRegister(b, c)); l != r {
		t.Fatalf("MergeRegister not associative: %+v vs %+v for a=%+v b=%+v c=%+v", l, r, a, b, c)
	}
	if aa := MergeRegister(a, a); aa != a {
		t.Fatalf("MergeRegister not idempotent: %+v vs %+v", aa, a)
	}
	m := MergeRegister(a, b)
	if m != a && m != b {
		t.Fatalf("MergeRegister(%+v, %+v) = %+v, neither input", a, b, m)
	}
	// Last writer wins: the result is never older than either input.
	if m.Version.Less(a.Version) || m.Version.Less(b.Version) {
		t.Fatalf("MergeRegister(%+v, %+v) = %+v is older than an input", a, b, m)
	}
	// Less is a strict total order: exactly one of <, >, == holds.
	n := 0
	if a.Less(b) {
		n++
	}
	if b.Less(a) {
		n++
	}
	if a == b {
		n++
	}
	if n != 1 {
		t.Fatalf("Register.Less not a strict total order on %+v, %+v", a, b)
	}
}

func TestVersionLess(t *testing.T) {
	cases := []struct {
		a, b Version
		want bool
	}{
		{Version{1, 5}, Version{2, 1}, true},  // a higher epoch wins over any op
		{Version{2, 1}, Version{1, 5}, false}, //
		{Version{2, 1}, Version{2, 2}, true},  // same epoch: op decides
		{Version{2, 2}, Version{2, 2}, false}, // irreflexive
		{Version{}, Version{0, 1}, true},
	}
	for _, c := range cases {
		if got := c.a.Less(c.b); got != c.want {
			t.Errorf("%v.Less(%v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// ---- CellSet.Merge -------------------------------------------------------

func TestCellSetMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genCellSet().Draw(t, "a")
		b := genCellSet().Draw(t, "b")
		c := genCellSet().Draw(t, "c")
		a0, b0 := maps.Clone(a), maps.Clone(b)

		if ab, ba := mergedSet(a, b), mergedSet(b, a); !maps.Equal(ab, ba) {
			t.Fatalf("CellSet.Merge not commutative:\n%v\n%v", ab, ba)
		}
		if l, r := mergedSet(mergedSet(a, b), c), mergedSet(a, mergedSet(b, c)); !maps.Equal(l, r) {
			t.Fatalf("CellSet.Merge not associative:\n%v\n%v", l, r)
		}
		aa := maps.Clone(a)
		if changed := aa.Merge(a); len(changed) != 0 || !maps.Equal(aa, a) {
			t.Fatalf("CellSet.Merge not idempotent: changed %v, %v vs %v", changed, aa, a)
		}
		// Pointwise: every key of the result is the MergeCell of the inputs.
		m := mergedSet(a, b)
		for k, v := range m {
			if want := joinAt(a, b, k); v != want {
				t.Fatalf("key %v: %+v, want %+v", k, v, want)
			}
		}
		if len(m) != len(mergedKeys(a, b)) {
			t.Fatalf("result has %d keys, want %d", len(m), len(mergedKeys(a, b)))
		}
		// changed lists exactly the keys whose state differs, each once.
		s := maps.Clone(a)
		if s == nil {
			s = CellSet{}
		}
		changed := s.Merge(b)
		var want []CellKey
		for k, v := range s {
			if old, ok := a[k]; !ok || old != v {
				want = append(want, k)
			}
		}
		sortKeys(changed)
		sortKeys(want)
		if !slices.Equal(changed, want) {
			t.Fatalf("changed = %v, want %v", changed, want)
		}
		// The argument is never modified.
		if !maps.Equal(a, a0) || !maps.Equal(b, b0) {
			t.Fatalf("Merge modified an input")
		}
	})
}

// joinAt is the pointwise join at k, an absent key being the bottom.
func joinAt(a, b CellSet, k CellKey) Cell {
	av, aok := a[k]
	bv, bok := b[k]
	switch {
	case !aok:
		return bv
	case !bok:
		return av
	}
	return MergeCell(av, bv)
}

func mergedKeys(a, b CellSet) map[CellKey]bool {
	ks := map[CellKey]bool{}
	for k := range a {
		ks[k] = true
	}
	for k := range b {
		ks[k] = true
	}
	return ks
}

func sortKeys(ks []CellKey) {
	slices.SortFunc(ks, func(x, y CellKey) int {
		switch {
		case x.Item != y.Item:
			if x.Item < y.Item {
				return -1
			}
			return 1
		case x.Region != y.Region:
			if x.Region < y.Region {
				return -1
			}
			return 1
		default:
			return int(x.Shard) - int(y.Shard)
		}
	})
}

// TestMergeAbsentIsBottom pins the two bugs the law tests found: merging into
// a set or vector that lacks the key must copy the incoming value as is, even
// when it is "below" the zero value (a zero cell with a negative watermark, a
// watermark <= 0). Otherwise Merge(a, b) != Merge(b, a).
func TestMergeAbsentIsBottom(t *testing.T) {
	k := CellKey{Item: "i", Region: "eu"}
	c := Cell{Watermark: -1}
	if s := mergedSet(CellSet{}, CellSet{k: c}); s[k] != c {
		t.Fatalf("CellSet: got %+v, want %+v", s[k], c)
	}
	for _, v := range []int64{0, -5} {
		w := mergedWM(Watermarks{}, Watermarks{"eu": v})
		if got, ok := w["eu"]; !ok || got != v {
			t.Fatalf("Watermarks: merging eu=%d into {} gave %v", v, w)
		}
	}
}

// ---- Watermarks.Merge ----------------------------------------------------

func TestWatermarksMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genWatermarks().Draw(t, "a")
		b := genWatermarks().Draw(t, "b")
		c := genWatermarks().Draw(t, "c")
		if ab, ba := mergedWM(a, b), mergedWM(b, a); !maps.Equal(ab, ba) {
			t.Fatalf("Watermarks.Merge not commutative: %v vs %v", ab, ba)
		}
		if l, r := mergedWM(mergedWM(a, b), c), mergedWM(a, mergedWM(b, c)); !maps.Equal(l, r) {
			t.Fatalf("Watermarks.Merge not associative: %v vs %v", l, r)
		}
		if aa := mergedWM(a, a); !maps.Equal(aa, a) {
			t.Fatalf("Watermarks.Merge not idempotent: %v vs %v", aa, a)
		}
		m := mergedWM(a, b)
		for r, v := range m {
			av, aok := a[r]
			bv, bok := b[r]
			want := max(av, bv)
			if !aok {
				want = bv
			} else if !bok {
				want = av
			}
			if v != want {
				t.Fatalf("region %s: %d, want pointwise max %d", r, v, want)
			}
		}
	})
}

func TestWatermarksAsOf(t *testing.T) {
	w := Watermarks{"eu": 100, "us": 70}
	cases := []struct {
		regions []string
		want    int64
	}{
		{nil, 0},
		{[]string{"eu"}, 100},
		{[]string{"eu", "us"}, 70},
		{[]string{"us", "eu"}, 70},
		{[]string{"eu", "us", "ap"}, 0}, // never heard from ap: nothing is complete
	}
	for _, c := range cases {
		if got := w.AsOf(c.regions); got != c.want {
			t.Errorf("AsOf(%v) = %d, want %d", c.regions, got, c.want)
		}
	}
	// asOf never goes backwards as watermarks are merged in (real watermarks
	// are Unix ms, never negative).
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.MapOfN(rapid.SampledFrom(testRegions), rapid.Int64Range(0, 1<<50), 0, 3)
		a := Watermarks(gen.Draw(t, "a"))
		b := Watermarks(gen.Draw(t, "b"))
		m := mergedWM(a, b)
		if m.AsOf(testRegions) < max(a.AsOf(testRegions), b.AsOf(testRegions)) {
			t.Fatalf("asOf went backwards: %v + %v = %v", a, b, m)
		}
	})
}

// ---- Cell.Apply: the exactly-once fence ----------------------------------

func TestApplyFence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genCell().Draw(t, "c")
		d := Delta{P: rapid.Uint64Range(0, 100).Draw(t, "dp"), N: rapid.Uint64Range(0, 100).Draw(t, "dn")}
		wm := genI64().Draw(t, "wm")
		through := rapid.Uint64Range(0, c.HWM).Draw(t, "through")
		got, err := c.Apply(d, through, wm)
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("Apply through %d <= hwm %d: err %v, want ErrFenced", through, c.HWM, err)
		}
		if got != c {
			t.Fatalf("fenced Apply changed the cell: %+v -> %+v", c, got)
		}
	})
}

func TestApplyAdvances(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Cell{
			P:         rapid.Uint64Range(0, 1<<40).Draw(t, "p"),
			N:         rapid.Uint64Range(0, 1<<40).Draw(t, "n"),
			HWM:       rapid.Uint64Range(0, 1<<40).Draw(t, "hwm"),
			Watermark: genI64().Draw(t, "cwm"),
		}
		d := Delta{P: rapid.Uint64Range(0, 100).Draw(t, "dp"), N: rapid.Uint64Range(0, 100).Draw(t, "dn")}
		wm := genI64().Draw(t, "wm")
		through := c.HWM + 1 + rapid.Uint64Range(0, 1000).Draw(t, "gap")
		got, err := c.Apply(d, through, wm)
		if err != nil {
			t.Fatalf("Apply through %d > hwm %d: %v", through, c.HWM, err)
		}
		want := Cell{P: c.P + d.P, N: c.N + d.N, HWM: through, Watermark: max(c.Watermark, wm)}
		if got != want {
			t.Fatalf("Apply = %+v, want %+v", got, want)
		}
		if got.Value()-c.Value() != int64(d.P)-int64(d.N) {
			t.Fatalf("value moved by %d, want %d", got.Value()-c.Value(), int64(d.P)-int64(d.N))
		}
		// The new state wins every merge against the old one.
		if MergeCell(c, got) != got {
			t.Fatalf("applied state does not supersede the old one")
		}
	})
}

func TestDeltaAdd(t *testing.T) {
	var d Delta
	if !d.Zero() {
		t.Fatal("zero Delta not Zero")
	}
	for _, v := range []int{+1, +1, -1, 0, +3, -2} {
		d.Add(v)
	}
	if d != (Delta{P: 5, N: 3}) {
		t.Fatalf("Delta = %+v, want {5 3}", d)
	}
	if d.Zero() {
		t.Fatal("nonzero Delta reported Zero")
	}
}

type window struct {
	d       Delta
	through uint64
	wm      int64
}

func genWindows(t *rapid.T) []window {
	n := rapid.IntRange(1, 20).Draw(t, "windows")
	ws := make([]window, n)
	pos := rapid.Uint64Range(0, 5).Draw(t, "start")
	for i := range ws {
		pos += 1 + rapid.Uint64Range(0, 5).Draw(t, "gap")
		ws[i] = window{
			d:       Delta{P: rapid.Uint64Range(0, 4).Draw(t, "p"), N: rapid.Uint64Range(0, 4).Draw(t, "n")},
			through: pos,
			// Watermarks may arrive out of order; Apply keeps the max.
			wm: rapid.Int64Range(0, 100).Draw(t, "wm"),
		}
	}
	return ws
}

// TestApplyReplayExactlyOnce: a consumer that crashes and resumes from any
// earlier position, and redelivers windows it already applied, ends with the
// same cell as one that applied each window exactly once. Every redelivery is
// refused with ErrFenced, every first delivery succeeds.
func TestApplyReplayExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ws := genWindows(t)
		var want Cell
		for _, w := range ws {
			var err error
			if want, err = want.Apply(w.d, w.through, w.wm); err != nil {
				t.Fatalf("in-order apply: %v", err)
			}
		}

		var c Cell
		applied, next := 0, 0 // windows applied to the cell; consumer's position
		history := []Cell{c}
		deliver := func(i int) {
			got, err := c.Apply(ws[i].d, ws[i].through, ws[i].wm)
			switch {
			case i < applied:
				if !errors.Is(err, ErrFenced) || got != c {
					t.Fatalf("redelivery of window %d (applied %d): err %v, cell %+v -> %+v", i, applied, err, c, got)
				}
			case i == applied:
				if err != nil {
					t.Fatalf("first delivery of window %d: %v", i, err)
				}
				c = got
				applied++
				history = append(history, c)
			default:
				t.Fatalf("test bug: delivered window %d before %d", i, applied)
			}
		}
		for steps := 0; next < len(ws); steps++ {
			act := 0 // deliver the next window
			if steps < 200 {
				act = rapid.IntRange(0, 3).Draw(t, "act")
			}
			switch act {
			case 0, 1:
				deliver(next)
				next++
			case 2: // crash: resume from any earlier position
				next = rapid.IntRange(0, next).Draw(t, "resume")
			case 3: // duplicate: an already delivered window arrives again
				if next > 0 {
					deliver(rapid.IntRange(0, next-1).Draw(t, "dup"))
				}
			}
		}
		if c != want {
			t.Fatalf("after replays cell = %+v, want %+v", c, want)
		}
		if Sum([]Cell{c}) != Sum([]Cell{want}) {
			t.Fatalf("Sum differs")
		}

		// Replicas that receive the cell's intermediate states in any order, with
		// duplicates, converge to the last one.
		perm := rapid.Permutation(append(history, history...)).Draw(t, "perm")
		var r Cell
		for _, h := range perm {
			r = MergeCell(r, h)
		}
		if r != want {
			t.Fatalf("replica merged history to %+v, want %+v", r, want)
		}
	})
}

// ---- Sum and Count -------------------------------------------------------

func TestSum(t *testing.T) {
	if Sum(nil) != 0 {
		t.Fatal("Sum(nil) != 0")
	}
	if got := Sum([]Cell{{P: 5, N: 2}, {P: 1, N: 4}, {}}); got != 0 {
		t.Fatalf("Sum = %d, want 0", got)
	}
	if got := (Cell{P: 2, N: 7}).Value(); got != -5 {
		t.Fatalf("Value = %d, want -5 (a cell may be negative; only the item's sum is a count)", got)
	}
	rapid.Check(t, func(t *rapid.T) {
		g := rapid.Custom(func(t *rapid.T) Cell {
			return Cell{P: rapid.Uint64Range(0, 1<<40).Draw(t, "p"), N: rapid.Uint64Range(0, 1<<40).Draw(t, "n")}
		})
		cells := rapid.SliceOfN(g, 0, 20).Draw(t, "cells")
		var want int64
		for _, c := range cells {
			want += int64(c.P) - int64(c.N)
		}
		if got := Sum(cells); got != want {
			t.Fatalf("Sum = %d, want %d", got, want)
		}
	})
}

func TestCount(t *testing.T) {
	s := CellSet{
		{"a", "eu", 0}: {P: 3, N: 1},
		{"a", "us", 0}: {P: 1},
		{"a", "us", 7}: {N: 1},
		{"b", "eu", 0}: {P: 9},
	}
	for item, want := range map[string]int64{"a": 2, "b": 9, "zzz": 0} {
		if got := s.Count(item); got != want {
			t.Errorf("Count(%q) = %d, want %d", item, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		a := genSmallCellSet().Draw(t, "a")
		b := genSmallCellSet().Draw(t, "b")
		m := mergedSet(a, b)
		for _, item := range testItems {
			var want int64
			var cells []Cell
			for k := range mergedKeys(a, b) {
				if k.Item == item {
					cells = append(cells, joinAt(a, b, k))
					want += joinAt(a, b, k).Value()
				}
			}
			if got := m.Count(item); got != want || got != Sum(cells) {
				t.Fatalf("Count(%s) = %d, want %d (Sum %d)", item, got, want, Sum(cells))
			}
		}
		// Cells of different regions never overlap, so merging two regions' sets
		// adds their counts.
		eu, us := CellSet{}, CellSet{}
		for k, c := range a {
			k.Region = "eu"
			eu[k] = c
		}
		for k, c := range b {
			k.Region = "us"
			us[k] = c
		}
		both := mergedSet(eu, us)
		for _, item := range testItems {
			if both.Count(item) != eu.Count(item)+us.Count(item) {
				t.Fatalf("Count(%s) over disjoint regions: %d != %d + %d", item, both.Count(item), eu.Count(item), us.Count(item))
			}
		}
	})
}

func genSmallCellSet() *rapid.Generator[CellSet] {
	return rapid.Custom(func(t *rapid.T) CellSet {
		g := rapid.Custom(func(t *rapid.T) Cell {
			return Cell{
				P:   rapid.Uint64Range(0, 1000).Draw(t, "p"),
				N:   rapid.Uint64Range(0, 1000).Draw(t, "n"),
				HWM: rapid.Uint64Range(0, 3).Draw(t, "hwm"),
			}
		})
		return CellSet(rapid.MapOfN(genCellKey(), g, 0, 8).Draw(t, "cells"))
	})
}

func TestStateCounts(t *testing.T) {
	for s, want := range map[State]int{Unliked: 0, Liked: 1, Erased: 0, State(9): 0} {
		if got := s.Counts(); got != want {
			t.Errorf("%v.Counts() = %d, want %d", s, got, want)
		}
	}
}
