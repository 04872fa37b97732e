package epoch

import (
	"errors"
	"fmt"
)

// RegionState is a region's place in its lifecycle, as the cluster's region
// registry records it (etcdepoch.Directory.Registry).
//
//	home ──────────────┐
//	joining ─► active ─┴─► draining ─► retired
//	   └──────────────────────┘
//
// A name is recorded once: there is no way back from retired, and a retired
// name is never added again (its cells stay part of every count under that
// name, so a new region of the same name would be mistaken for it).
type RegionState string

const (
	// StateHome is a region the cluster was created with: it is the home of
	// the ranges epoch.Home gives it, takes failovers and gets failbacks.
	StateHome RegionState = "home"
	// StateJoining is a region added to a running cluster that has not yet
	// rebuilt from its peers. It takes pins only by planned moves
	// (likectl move, drain: the catch-up barrier), never by a failover.
	StateJoining RegionState = "joining"
	// StateActive is an added region that has caught up: a failover target
	// like a home region, but the home of no range (it gets no failbacks).
	StateActive RegionState = "active"
	// StateDraining is a region being retired: its pins are moving away; it
	// takes none (no failover, no failback, no drain target).
	StateDraining RegionState = "draining"
	// StateRetired is a region that owns nothing and never will: peers stop
	// shipping to it and no longer wait for it; its name is never reused.
	StateRetired RegionState = "retired"
)

// ErrBadTransition is wrapped by CheckTransition for a state change the
// lifecycle does not allow.
var ErrBadTransition = errors.New("epoch: region state change not allowed")

// Valid reports whether s is one of the five states.
func (s RegionState) Valid() bool {
	switch s {
	case StateHome, StateJoining, StateActive, StateDraining, StateRetired:
		return true
	}
	return false
}

// Target reports whether a region in state s may be given ranges by the
// failover Controller (and be chosen as a hand-off target): only home and
// active regions. A joining region takes pins only by planned moves.
func (s RegionState) Target() bool { return s == StateHome || s == StateActive }

// Planned reports whether a region in state s may receive a planned move
// (likectl move or drain): any region that is not leaving.
func (s RegionState) Planned() bool { return s.Target() || s == StateJoining }

// Ships reports whether peers ship to, and hold retention for, a region in
// state s: every state but retired.
func (s RegionState) Ships() bool { return s.Valid() && s != StateRetired }

// CheckTransition says whether a region may go from state from to state to.
// Staying in the same state is allowed (a retried step is idempotent) except
// for the creation states, which are only ever written once.
func CheckTransition(from, to RegionState) error {
	ok := false
	switch to {
	case StateActive:
		ok = from == StateJoining || from == StateActive
	case StateDraining:
		ok = from == StateHome || from == StateJoining || from == StateActive || from == StateDraining
	case StateRetired:
		ok = from == StateDraining || from == StateRetired
	}
	if !ok {
		return fmt.Errorf("%w: %q → %q", ErrBadTransition, from, to)
	}
	return nil
}
