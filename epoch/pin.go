package epoch

import (
	"errors"
	"fmt"
	"strings"
)

// ErrEpochChanged is returned by Move when the pin is no longer at the
// expected epoch (another move won the race). Re-read the pin and decide again.
var ErrEpochChanged = errors.New("epoch: pin epoch changed")

// ErrNoPin is returned for a range that has no pin (Init not run).
var ErrNoPin = errors.New("epoch: no pin for range")

// RegionInfo is a live region's registration, the value of its lease key.
type RegionInfo struct {
	Name string `json:"name"`
	HTTP string `json:"http,omitempty"`
	GRPC string `json:"grpc,omitempty"`
	// Draining is set by a region that is stopping gracefully
	// (KeepAlive.SetDraining): it is handing its ranges off, so no range
	// fails back to it and no drain picks it as a target.
	Draining bool `json:"draining,omitempty"`
}

// ValidRegion rejects names that cannot be one key segment.
func ValidRegion(name string) error {
	if name == "" || strings.ContainsAny(name, "/ \t\n") || len(name) > 128 {
		return fmt.Errorf("epoch: invalid region name %q", name)
	}
	return nil
}
