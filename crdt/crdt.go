package crdt

import (
	"errors"
	"fmt"
	"sort"
)

// ErrFenced is the one fence error of the counting path: a window would apply
// at or below a cell's HWM (it, or part of it, has already been applied), or
// a store's conditional commit found the HWM moved (pipeline.ErrFenced is this
// same value).
var ErrFenced = errors.New("fenced: the cell's high-water mark is past the window")

// Cell is one PN-counter slot. P and N only grow; HWM is the source log position
// the cell has applied through; Watermark is the event time (Unix ms) up to which
// the cell's source partition was complete when the cell was last written.
type Cell struct {
	P         uint64
	N         uint64
	HWM       uint64
	Watermark int64
}

// Value is the cell's contribution to its item's count.
func (c Cell) Value() int64 { return int64(c.P) - int64(c.N) }

// less orders cells totally: by HWM first (the single writer's history order),
// then by contents, so Merge is a lattice join even for inputs no correct writer
// produces.
func (c Cell) less(o Cell) bool {
	if c.HWM != o.HWM {
		return c.HWM < o.HWM
	}
	if c.P != o.P {
		return c.P < o.P
	}
	if c.N != o.N {
		return c.N < o.N
	}
	return c.Watermark < o.Watermark
}

// MergeCell returns the join of two states of one cell.
func MergeCell(a, b Cell) Cell {
	if a.less(b) {
		return b
	}
	return a
}

// Delta is what one window adds to one cell.
type Delta struct {
	P uint64
	N uint64
}

// Add accumulates a signed unit change into d.
func (d *Delta) Add(v int) {
	switch {
	case v > 0:
		d.P += uint64(v)
	case v < 0:
		d.N += uint64(-v)
	}
}

// Zero reports whether the delta changes nothing.
func (d Delta) Zero() bool { return d.P == 0 && d.N == 0 }

// Apply returns c with d applied through log position `through`. It refuses with
// ErrFenced unless through > c.HWM. The watermark never moves backwards.
func (c Cell) Apply(d Delta, through uint64, watermark int64) (Cell, error) {
	if through <= c.HWM {
		return c, fmt.Errorf("%w: cell hwm %d, window through %d", ErrFenced, c.HWM, through)
	}
	c.P += d.P
	c.N += d.N
	c.HWM = through
	if watermark > c.Watermark {
		c.Watermark = watermark
	}
	return c, nil
}

// CellKey names a cell.
type CellKey struct {
	Item   string
	Region string
	Shard  uint32
}

// CellSet is a set of cells, merged pointwise.
type CellSet map[CellKey]Cell

// Merge folds o into s (s is modified) and returns the keys whose state changed.
func (s CellSet) Merge(o CellSet) []CellKey {
	var changed []CellKey
	for k, c := range o {
		old, ok := s[k]
		m := c
		if ok {
			// An absent key is the bottom of the lattice, not the zero Cell: a
			// zero Cell can still outrank c (e.g. c with a negative watermark).
			m = MergeCell(old, c)
		}
		if !ok || m != old {
			s[k] = m
			changed = append(changed, k)
		}
	}
	return changed
}

// Count sums P−N over the cells of item.
func (s CellSet) Count(item string) int64 {
	var n int64
	for k, c := range s {
		if k.Item == item {
			n += c.Value()
		}
	}
	return n
}

// Sum is the count that a list of cells adds up to.
func Sum(cells []Cell) int64 {
	var n int64
	for _, c := range cells {
		n += c.Value()
	}
	return n
}

// State is an edge's target state.
type State uint8

// Edge states. The zero value is Unliked, which is also what a missing edge means.
const (
	Unliked State = 0
	Liked   State = 1
	Erased  State = 2
)

func (s State) String() string {
	switch s {
	case Unliked:
		return "UNLIKED"
	case Liked:
		return "LIKED"
	case Erased:
		return "ERASED"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Counts is 1 for a state that counts as a like, else 0.
func (s State) Counts() int {
	if s == Liked {
		return 1
	}
	return 0
}

// Version orders an edge's writes: epoch first (a higher epoch's owner wins), then
// op, which grows by one per write within the edge's history.
type Version struct {
	Epoch uint64
	Op    uint64
}

// Less reports whether v is older than o.
func (v Version) Less(o Version) bool {
	if v.Epoch != o.Epoch {
		return v.Epoch < o.Epoch
	}
	return v.Op < o.Op
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Epoch, v.Op) }

// Register is an edge's value at a version.
type Register struct {
	Version Version
	State   State
}

// Less orders registers by version, then by state (only to make Merge total).
func (r Register) Less(o Register) bool {
	if r.Version != o.Version {
		return r.Version.Less(o.Version)
	}
	return r.State < o.State
}

// MergeRegister is last-writer-wins by (epoch, op).
func MergeRegister(a, b Register) Register {
	if a.Less(b) {
		return b
	}
	return a
}

// Watermarks maps region → event time (Unix ms) through which that region's
// cells are complete. Merge is the pointwise max.
type Watermarks map[string]int64

// Merge folds o into w (w is modified).
func (w Watermarks) Merge(o Watermarks) {
	for r, t := range o {
		// An absent region is the bottom, not 0: comparing against w[r]'s zero
		// value would drop entries <= 0 and make Merge non-commutative.
		if cur, ok := w[r]; !ok || t > cur {
			w[r] = t
		}
	}
}

// AsOf is the min over the given regions (a region never heard from counts as 0:
// nothing is known to be complete there).
func (w Watermarks) AsOf(regions []string) int64 {
	if len(regions) == 0 {
		return 0
	}
	min := w[regions[0]]
	for _, r := range regions[1:] {
		if t := w[r]; t < min {
			min = t
		}
	}
	return min
}

// Branch is one epoch's base for an edge: the version the owner held when it
// first wrote the edge in that epoch.
type Branch struct {
	Epoch uint64
	Base  Register
}

// Branches is an edge's branch records at one region, sorted by epoch.
type Branches []Branch

// Open records that the region starts writing the edge in epoch, branching from
// base. It is a no-op when a branch for that epoch already exists.
func (bs Branches) Open(epoch uint64, base Register) Branches {
	for _, b := range bs {
		if b.Epoch == epoch {
			return bs
		}
	}
	out := append(append(Branches(nil), bs...), Branch{Epoch: epoch, Base: base})
	sort.Slice(out, func(i, j int) bool { return out[i].Epoch < out[j].Epoch })
	return out
}

// Observe is called when a replicated version v of the edge arrives. For every
// branch opened in an epoch later than v's whose base v is newer than, the region
// owes a correction: its own writes in that epoch assumed base, but the edge's
// history actually passed through v. Observe returns the summed delta to append
// as one correction event and the updated branches. A delta of 0 with changed
// true still moves bases forward and must be persisted.
func (bs Branches) Observe(v Register) (delta int, out Branches, changed bool) {
	out = bs
	for i, b := range bs {
		if v.Version.Epoch < b.Epoch && b.Base.Less(v) {
			if !changed {
				out = append(Branches(nil), bs...)
				changed = true
			}
			delta -= v.State.Counts() - b.Base.State.Counts()
			out[i].Base = v
		}
	}
	return delta, out, changed
}
