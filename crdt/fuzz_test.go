package crdt

import (
	"errors"
	"math"
	"testing"
)

// The fuzz targets check the merge laws on fuzzed inputs. Their seed corpus runs
// as an ordinary test under `go test`; explore with e.g.
//
//	go test ./crdt -run '^$' -fuzz FuzzMergeCell -fuzztime 30s
//
// Random uint64s almost never collide, so a `ties` byte folds some fields of b
// and c onto a's, to reach the tie-breaking branches of the orders.

func cellFrom(p, n, hwm, wm uint64) Cell {
	return Cell{P: p, N: n, HWM: hwm, Watermark: int64(wm)}
}

// tieCells makes fields of b and c equal to a's according to the bits of ties.
func tieCells(ties uint8, a, b, c Cell) (Cell, Cell) {
	if ties&1 != 0 {
		b.HWM = a.HWM
	}
	if ties&2 != 0 {
		c.HWM = a.HWM
	}
	if ties&4 != 0 {
		b.P = a.P
	}
	if ties&8 != 0 {
		b.N = a.N
	}
	if ties&16 != 0 {
		c.P, c.N = b.P, b.N
	}
	if ties&32 != 0 {
		b = a
	}
	return b, c
}

func FuzzMergeCell(f *testing.F) {
	const m = math.MaxUint64
	f.Add(uint8(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint8(0), uint64(1), uint64(0), uint64(5), uint64(100), uint64(2), uint64(1), uint64(7), uint64(90), uint64(0), uint64(3), uint64(6), uint64(95))
	f.Add(uint8(1), uint64(1), uint64(0), uint64(5), uint64(100), uint64(2), uint64(1), uint64(7), uint64(90), uint64(0), uint64(3), uint64(6), uint64(95))
	f.Add(uint8(3|4), uint64(4), uint64(4), uint64(9), uint64(1), uint64(4), uint64(3), uint64(0), uint64(2), uint64(4), uint64(5), uint64(0), uint64(3))
	f.Add(uint8(3|4|8), uint64(4), uint64(4), uint64(9), uint64(1), uint64(4), uint64(3), uint64(0), uint64(2), uint64(4), uint64(5), uint64(0), uint64(3))
	f.Add(uint8(3|16), uint64(1), uint64(2), uint64(3), uint64(m), uint64(4), uint64(5), uint64(6), uint64(0), uint64(7), uint64(8), uint64(9), uint64(1))
	f.Add(uint8(32), uint64(m), uint64(m), uint64(m), uint64(m), uint64(0), uint64(0), uint64(0), uint64(0), uint64(m), uint64(0), uint64(m), uint64(1<<63))
	f.Add(uint8(255), uint64(m), uint64(1), uint64(m-1), uint64(1<<63), uint64(0), uint64(m), uint64(3), uint64(1<<63-1), uint64(m), uint64(0), uint64(m), uint64(1<<63))
	// A zero cell with a negative watermark ranks below the zero Cell.
	f.Add(uint8(0), uint64(1), uint64(0), uint64(1), uint64(0), uint64(0), uint64(0), uint64(0), uint64(1<<63), uint64(0), uint64(0), uint64(0), uint64(m))
	f.Fuzz(func(t *testing.T, ties uint8,
		ap, an, ah, aw, bp, bn, bh, bw, cp, cn, ch, cw uint64) {
		a := cellFrom(ap, an, ah, aw)
		b, c := tieCells(ties, a, cellFrom(bp, bn, bh, bw), cellFrom(cp, cn, ch, cw))
		checkCellLaws(t, a, b, c)

		// CellSet.Merge on one key agrees with MergeCell and obeys the laws.
		k := CellKey{Item: "i", Region: "r", Shard: 1}
		sa, sb, sc := CellSet{k: a}, CellSet{k: b}, CellSet{k: c}
		if ab, ba := mergedSet(sa, sb), mergedSet(sb, sa); ab[k] != ba[k] || ab[k] != MergeCell(a, b) {
			t.Fatalf("CellSet.Merge: %+v / %+v, MergeCell %+v", ab[k], ba[k], MergeCell(a, b))
		}
		if l, r := mergedSet(mergedSet(sa, sb), sc), mergedSet(sa, mergedSet(sb, sc)); l[k] != r[k] {
			t.Fatalf("CellSet.Merge not associative: %+v vs %+v", l[k], r[k])
		}
		if e := mergedSet(CellSet{}, sb); e[k] != b {
			t.Fatalf("merging into an empty set gave %+v, want %+v", e[k], b)
		}

		// Fence: a window through <= HWM is refused and changes nothing.
		if got, err := a.Apply(Delta{P: bp, N: bn}, min(bh, a.HWM), int64(bw)); !errors.Is(err, ErrFenced) || got != a {
			t.Fatalf("Apply through %d on hwm %d: %+v, %v", min(bh, a.HWM), a.HWM, got, err)
		}
		if a.HWM < math.MaxUint64 {
			through := a.HWM + 1 + bh%1000
			if through <= a.HWM { // overflow
				return
			}
			got, err := a.Apply(Delta{P: bp, N: bn}, through, int64(bw))
			if err != nil {
				t.Fatalf("Apply through %d on hwm %d: %v", through, a.HWM, err)
			}
			if got.HWM != through || got.P != a.P+bp || got.N != a.N+bn || got.Watermark != max(a.Watermark, int64(bw)) {
				t.Fatalf("Apply = %+v from %+v", got, a)
			}
			if MergeCell(a, got) != got {
				t.Fatalf("applied state %+v loses a merge against %+v", got, a)
			}
		}
	})
}

func regFrom(e, o uint64, s uint8) Register {
	return Register{Version: Version{Epoch: e, Op: o}, State: State(s)}
}

func FuzzMergeRegister(f *testing.F) {
	const m = math.MaxUint64
	f.Add(uint8(0), uint64(0), uint64(0), uint8(0), uint64(0), uint64(0), uint8(0), uint64(0), uint64(0), uint8(0))
	f.Add(uint8(0), uint64(1), uint64(5), uint8(1), uint64(2), uint64(1), uint8(0), uint64(1), uint64(6), uint8(0))
	f.Add(uint8(1), uint64(1), uint64(5), uint8(1), uint64(2), uint64(1), uint8(0), uint64(1), uint64(6), uint8(0))
	f.Add(uint8(1|2), uint64(3), uint64(5), uint8(1), uint64(9), uint64(5), uint8(2), uint64(3), uint64(5), uint8(0))
	f.Add(uint8(1|2|4), uint64(3), uint64(5), uint8(1), uint64(9), uint64(5), uint8(2), uint64(3), uint64(5), uint8(0))
	f.Add(uint8(255), uint64(m), uint64(m), uint8(255), uint64(0), uint64(0), uint8(0), uint64(m), uint64(0), uint8(1))
	f.Fuzz(func(t *testing.T, ties uint8,
		ae, ao uint64, as uint8, be, bo uint64, bs uint8, ce, co uint64, cs uint8) {
		a, b, c := regFrom(ae, ao, as), regFrom(be, bo, bs), regFrom(ce, co, cs)
		if ties&1 != 0 {
			b.Version.Epoch = a.Version.Epoch
		}
		if ties&2 != 0 {
			b.Version.Op = a.Version.Op
		}
		if ties&4 != 0 {
			c.Version = a.Version
		}
		if ties&8 != 0 {
			b = a
		}
		checkRegisterLaws(t, a, b, c)

		// Branches.Observe of the same version twice never corrects twice.
		br := Branches(nil).Open(a.Version.Epoch, b)
		d1, br1, _ := br.Observe(c)
		d2, _, changed := br1.Observe(c)
		if d2 != 0 || changed {
			t.Fatalf("second Observe(%v) of %v: delta %d changed %v (first %d)", c, br, d2, changed, d1)
		}
	})
}

func FuzzWatermarksMerge(f *testing.F) {
	f.Add(uint8(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Add(uint8(7), int64(5), int64(-1), int64(9), int64(0), int64(3), int64(2))
	f.Add(uint8(0x3f), int64(math.MinInt64), int64(math.MaxInt64), int64(0), int64(-5), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, present uint8, a1, a2, b1, b2, c1, c2 int64) {
		mk := func(bits uint8, x, y int64) Watermarks {
			w := Watermarks{}
			if bits&1 != 0 {
				w["eu"] = x
			}
			if bits&2 != 0 {
				w["us"] = y
			}
			return w
		}
		a, b, c := mk(present, a1, a2), mk(present>>2, b1, b2), mk(present>>4, c1, c2)
		if ab, ba := mergedWM(a, b), mergedWM(b, a); !equalWM(ab, ba) {
			t.Fatalf("not commutative: %v vs %v", ab, ba)
		}
		if l, r := mergedWM(mergedWM(a, b), c), mergedWM(a, mergedWM(b, c)); !equalWM(l, r) {
			t.Fatalf("not associative: %v vs %v", l, r)
		}
		if aa := mergedWM(a, a); !equalWM(aa, a) {
			t.Fatalf("not idempotent: %v vs %v", aa, a)
		}
	})
}

func equalWM(a, b Watermarks) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
