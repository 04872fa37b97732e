package edge

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/likes-dev/likes/crdt"
)

// MaxIDBytes bounds item ids, user ids and idempotency keys.
const MaxIDBytes = 256

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("edge: invalid")

// ValidateID checks an item id, user id or idempotency key: 1..256 bytes of
// valid UTF-8 without control characters (so 0x00 can separate ids in storage
// keys). It is the one rule for ids from clients, peers and records.
func ValidateID(what, s string) error {
	switch {
	case s == "":
		return invalid(fmt.Sprintf("%s is empty", what))
	case len(s) > MaxIDBytes:
		return invalid(fmt.Sprintf("%s is %d bytes, the limit is %d", what, len(s), MaxIDBytes))
	case !utf8.ValidString(s):
		return invalid(fmt.Sprintf("%s is not valid UTF-8", what))
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return invalid(fmt.Sprintf("%s contains a control character (%U)", what, r))
		}
	}
	return nil
}

// invalid is an ErrInvalid whose message is only the problem (the API shows
// it to clients as is).
type invalid string

func (e invalid) Error() string        { return string(e) }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

// maxHealDelta bounds a reconciliation event's delta (as the stores do).
const maxHealDelta = 1 << 30

// ValidateEvent checks a log event that arrives from outside this region (a
// peer's replication batch, a Kafka record) as strictly as the public API
// checks a request: a kind in range, ids, a bucket and partition that follow
// from them, a state and delta the kind can have, and the idempotency record's
// fields. It does not know pins: epochs are the caller's to bound.
func ValidateEvent(ev Event, partitions int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: event %s at %d/%d: "+format, append([]any{ErrInvalid, ev.Kind, ev.Partition, ev.Pos}, args...)...)
	}
	if ev.Kind < KindFlip || ev.Kind > LastKind {
		return bad("unknown kind %d", ev.Kind)
	}
	if ev.State > crdt.Erased {
		return bad("unknown state %d", ev.State)
	}
	if ev.Bucket >= Buckets {
		return bad("bucket %d out of range", ev.Bucket)
	}
	hasItem, hasUser := ev.Kind.HasItem(), ev.Kind.HasUser()
	if hasItem {
		if err := ValidateID("itemId", ev.Item); err != nil {
			return bad("%v", err)
		}
	} else if ev.Item != "" {
		return bad("carries an item")
	}
	if hasUser {
		if err := ValidateID("userId", ev.User); err != nil {
			return bad("%v", err)
		}
		if ev.Bucket != BucketOf(ev.User) {
			return bad("bucket %d is not the user's (%d)", ev.Bucket, BucketOf(ev.User))
		}
	} else if ev.User != "" {
		return bad("carries a user")
	}
	if p := PartitionOf(ev.Item, ev.Bucket, partitions); ev.Partition != p {
		return bad("partition %d, the item and bucket place it in %d", ev.Partition, p)
	}
	d := ev.Delta
	switch ev.Kind {
	case KindFlip:
		if ev.State == crdt.Erased || d < -1 || d > 1 {
			return bad("a flip to %v with delta %d", ev.State, d)
		}
	case KindRetraction:
		if ev.State != crdt.Unliked || d < -1 || d > 0 {
			return bad("a retraction to %v with delta %d", ev.State, d)
		}
	case KindErasure:
		if ev.State != crdt.Erased || d < -1 || d > 0 {
			return bad("an erasure to %v with delta %d", ev.State, d)
		}
	case KindCorrection:
		if d < -1 || d > 1 {
			return bad("a correction with delta %d", d)
		}
	case KindReconcile:
		if d < -maxHealDelta || d > maxHealDelta {
			return bad("a reconciliation with delta %d", d)
		}
	default: // records, purges, erasure starts count nothing
		if d != 0 {
			return bad("delta %d on an uncounted kind", d)
		}
	}
	if ev.Version.Epoch == 0 && (ev.Kind == KindFlip || ev.Kind == KindRetraction || ev.Kind == KindErasure) {
		return bad("an edge version in epoch 0")
	}
	if r := ev.Idem; r != nil {
		if ev.Kind != KindFlip && ev.Kind != KindRecord {
			return bad("an idempotency record on a %s", ev.Kind)
		}
		if err := ValidateID("idempotency key", r.Key); err != nil {
			return bad("%v", err)
		}
		if len(r.Fingerprint) > 64 {
			return bad("a fingerprint of %d bytes", len(r.Fingerprint))
		}
	}
	return nil
}
