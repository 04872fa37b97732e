package peerpb

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// ErrBadMessage prefixes a message that does not convert (an overflowing
// position or time, a field out of its type's range). What converts is still
// validated by its receiver (edge.ValidateEvent and the rest).
var ErrBadMessage = errors.New("peerpb: bad message")

// FromEvent encodes ev, its position as a delta from prev (the run's previous
// position) and its times as deltas from base.
func FromEvent(ev edge.Event, prev uint64, base int64) *Event {
	e := &Event{PosDelta: ev.Pos - prev, Item: ev.Item, User: ev.User, Bucket: ev.Bucket,
		Epoch: ev.Version.Epoch, Op: ev.Version.Op, State: uint32(ev.State), Delta: ev.Delta,
		EventTime: ev.EventTime - base, Kind: uint32(ev.Kind)}
	if r := ev.Idem; r != nil {
		e.Idem = &IdemRef{Key: r.Key, ExpiresAt: r.ExpiresAt - ev.EventTime, Liked: r.Liked, Changed: r.Changed}
		e.Idem.Fingerprint, e.Idem.FingerprintRaw = EncodeFingerprint(r.Fingerprint)
	}
	return e
}

// ToEvent decodes e as an event of partition p following position prev,
// its times relative to base.
func (e *Event) ToEvent(p uint32, prev uint64, base int64) (edge.Event, error) {
	if e.GetPosDelta() > math.MaxUint64-prev {
		return edge.Event{}, fmt.Errorf("%w: event position overflows", ErrBadMessage)
	}
	// Times are deltas in two's complement (the encoder's subtraction may
	// wrap, so the sum must too to be its exact inverse; a sender can name any
	// time either way, and the receiver judges it).
	t := base + e.GetEventTime()
	if e.GetState() > math.MaxUint8 || e.GetKind() > math.MaxUint8 {
		return edge.Event{}, fmt.Errorf("%w: event state or kind out of range", ErrBadMessage)
	}
	ev := edge.Event{Partition: p, Pos: prev + e.GetPosDelta(), Item: e.GetItem(), User: e.GetUser(), Bucket: e.GetBucket(),
		Version: crdt.Version{Epoch: e.GetEpoch(), Op: e.GetOp()}, State: crdt.State(e.GetState()), Delta: e.GetDelta(),
		EventTime: t, Kind: edge.Kind(e.GetKind())}
	if r := e.GetIdem(); r != nil {
		x := t + r.GetExpiresAt()
		fp, err := DecodeFingerprint(r.GetFingerprint(), r.GetFingerprintRaw())
		if err != nil {
			return edge.Event{}, err
		}
		ev.Idem = &edge.IdemRef{Key: r.GetKey(), Fingerprint: fp, ExpiresAt: x, Liked: r.GetLiked(), Changed: r.GetChanged()}
	}
	return ev, nil
}

// EncodeFingerprint splits a fingerprint into its two wire forms: the 16
// bytes of 32 lower-case hex digits (edge.Fingerprint) in raw, anything else
// as the string.
func EncodeFingerprint(fp string) (s string, raw []byte) {
	if raw, ok := hexFingerprint(fp); ok {
		return "", raw
	}
	return fp, nil
}

// DecodeFingerprint is EncodeFingerprint's inverse; both forms at once, or a
// raw one of other than 16 bytes, is a bad message.
func DecodeFingerprint(s string, raw []byte) (string, error) {
	if len(raw) == 0 {
		return s, nil
	}
	if s != "" || len(raw) != 16 {
		return "", fmt.Errorf("%w: a fingerprint in both forms, or a raw one of %d bytes", ErrBadMessage, len(raw))
	}
	return hex.EncodeToString(raw), nil
}

// hexFingerprint returns the 16 bytes of a fingerprint written as 32
// lower-case hex digits (edge.Fingerprint), so it decodes back identically.
func hexFingerprint(fp string) ([]byte, bool) {
	if len(fp) != 32 || strings.ToLower(fp) != fp {
		return nil, false
	}
	raw, err := hex.DecodeString(fp)
	return raw, err == nil
}
