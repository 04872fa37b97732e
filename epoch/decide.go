package epoch

import (
	"fmt"
	"time"

	"github.com/likes-dev/likes/edge"
)

// Pin is the write authority of one user range.
type Pin struct {
	Range  uint32
	Region string
	// Epoch starts at 1 and grows by one on every move.
	Epoch uint64
	// NotBefore is when the owner may start writing (zero: at once).
	NotBefore time.Time
	// CatchUp marks a planned move (DESIGN section 5) whose new owner has not
	// yet caught up on the other live regions' logs: it may not write the
	// range until it has, and then clears the flag itself (Directory.Settle).
	// An unplanned failover never sets it.
	CatchUp bool
	// From is the region the range was moved from (informational).
	From string
}

// NotOwnerError says another region holds the range. It matches
// edge.ErrNotOwner with errors.Is; Owner is where to forward.
type NotOwnerError struct {
	Owner string
	Range uint32
	Epoch uint64
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("%v: range %d is pinned to region %q (epoch %d)", edge.ErrNotOwner, e.Range, e.Owner, e.Epoch)
}

// Unwrap makes errors.Is(err, edge.ErrNotOwner) hold.
func (e *NotOwnerError) Unwrap() error { return edge.ErrNotOwner }

// OwnerRegion implements edge.Owned, so the edge service can forward.
func (e *NotOwnerError) OwnerRegion() string { return e.Owner }

var _ edge.Owned = (*NotOwnerError)(nil)

// FailClosedError says this region cannot prove it may write the range now.
// It matches edge.ErrFailClosed with errors.Is.
type FailClosedError struct {
	Range  uint32
	Reason string
}

func (e *FailClosedError) Error() string {
	return fmt.Sprintf("%v: range %d: %s", edge.ErrFailClosed, e.Range, e.Reason)
}

// Unwrap makes errors.Is(err, edge.ErrFailClosed) hold.
func (e *FailClosedError) Unwrap() error { return edge.ErrFailClosed }

// Decide is the write-authority rule, without I/O. Region self may write pin's
// range at now, under the returned epoch, only if the pin names self, it is
// not catching up after a planned move, its notBefore has passed, and lastKeepalive (the send time of the last successful
// lease keepalive; Authority passes the older of that and the last confirmation
// of its pin table) is younger than ttl − margin. Otherwise it returns *NotOwnerError (another region is pinned)
// or *FailClosedError (no pin, not yet, or no fresh proof).
func Decide(pin Pin, self string, now, lastKeepalive time.Time, ttl, margin time.Duration) (uint64, error) {
	if pin.Region == "" || pin.Epoch == 0 {
		return 0, &FailClosedError{Range: pin.Range, Reason: "no pin known"}
	}
	if pin.Region != self {
		return 0, &NotOwnerError{Owner: pin.Region, Range: pin.Range, Epoch: pin.Epoch}
	}
	if pin.CatchUp {
		return 0, &FailClosedError{Range: pin.Range, Reason: fmt.Sprintf("epoch %d is a planned move from %q still catching up on the other regions' logs", pin.Epoch, pin.From)}
	}
	if now.Before(pin.NotBefore) {
		return 0, &FailClosedError{Range: pin.Range, Reason: fmt.Sprintf("epoch %d starts in %v", pin.Epoch, pin.NotBefore.Sub(now))}
	}
	limit := ttl - margin
	if limit <= 0 {
		return 0, &FailClosedError{Range: pin.Range, Reason: fmt.Sprintf("no freshness window (ttl %v, margin %v)", ttl, margin)}
	}
	if lastKeepalive.IsZero() {
		return 0, &FailClosedError{Range: pin.Range, Reason: "no lease keepalive yet"}
	}
	if age := now.Sub(lastKeepalive); age >= limit {
		return 0, &FailClosedError{Range: pin.Range, Reason: fmt.Sprintf("lease proof is %v old (limit %v)", age, limit)}
	}
	return pin.Epoch, nil
}
