package epoch_test

import (
	"errors"
	"testing"

	"github.com/likes-dev/likes/epoch"
)

var allStates = []epoch.RegionState{epoch.StateHome, epoch.StateJoining, epoch.StateActive, epoch.StateDraining, epoch.StateRetired}

// TestRegionLifecycle: the transitions allowed are exactly the lifecycle's
// (retired is final; home and joining are only ever created; a retired or
// draining region is never a target), checked over every pair of states.
func TestRegionLifecycle(t *testing.T) {
	allowed := map[[2]epoch.RegionState]bool{
		{epoch.StateJoining, epoch.StateActive}:    true,
		{epoch.StateActive, epoch.StateActive}:     true,
		{epoch.StateHome, epoch.StateDraining}:     true,
		{epoch.StateJoining, epoch.StateDraining}:  true,
		{epoch.StateActive, epoch.StateDraining}:   true,
		{epoch.StateDraining, epoch.StateDraining}: true,
		{epoch.StateDraining, epoch.StateRetired}:  true,
		{epoch.StateRetired, epoch.StateRetired}:   true,
	}
	for _, from := range append(allStates, "", "bogus") {
		for _, to := range append(allStates, "", "bogus") {
			err := epoch.CheckTransition(from, to)
			if want := allowed[[2]epoch.RegionState{from, to}]; (err == nil) != want {
				t.Errorf("%q → %q: %v, allowed %v", from, to, err, want)
			}
			if err != nil && !errors.Is(err, epoch.ErrBadTransition) {
				t.Errorf("%q → %q: %v does not wrap ErrBadTransition", from, to, err)
			}
		}
	}
	for _, s := range allStates {
		if !s.Valid() {
			t.Errorf("%s invalid", s)
		}
		if s.Target() != (s == epoch.StateHome || s == epoch.StateActive) {
			t.Errorf("%s: Target %v", s, s.Target())
		}
		if s.Ships() == (s == epoch.StateRetired) {
			t.Errorf("%s: Ships %v", s, s.Ships())
		}
		if s.Planned() != (s != epoch.StateDraining && s != epoch.StateRetired) {
			t.Errorf("%s: Planned %v", s, s.Planned())
		}
	}
	for _, s := range []epoch.RegionState{"", "HOME", "gone"} {
		if s.Valid() || s.Target() || s.Ships() || s.Planned() {
			t.Errorf("%q accepted", s)
		}
	}
}
