// Package wire holds the primitives of likes' binary value formats: varints,
// length-prefixed strings, versions and the idempotency reference an event
// carries, with a Decoder that remembers its first error.
//
// The formats themselves stay with their owners (store/pebblestore,
// store/cassandra, stream/kafkalog): each is persisted, so each keeps its
// own field order and versioning, built from these pieces. Nothing here
// allocates beyond the returned slices and strings; a Decoder never panics on
// any input (FuzzDecoder).
package wire

import (
	"encoding/binary"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// AppendStr appends s with a uvarint length prefix.
func AppendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendVersion appends v as two uvarints (epoch, op).
func AppendVersion(b []byte, v crdt.Version) []byte {
	b = binary.AppendUvarint(b, v.Epoch)
	return binary.AppendUvarint(b, v.Op)
}

// AppendBranches appends an edge's branch list: its length, then each
// branch's epoch, base version and base state.
func AppendBranches(b []byte, bs crdt.Branches) []byte {
	b = binary.AppendUvarint(b, uint64(len(bs)))
	for _, br := range bs {
		b = binary.AppendUvarint(b, br.Epoch)
		b = AppendVersion(b, br.Base.Version)
		b = append(b, byte(br.Base.State))
	}
	return b
}

// maxBranches bounds a decoded branch list (an edge gains one per epoch in
// which it was written after a move).
const maxBranches = 1 << 16

// Idempotency reference flags: present, then the answer's two booleans.
const (
	idemPresent = 1 << iota
	idemLiked
	idemChanged
	idemAll = idemPresent | idemLiked | idemChanged
)

// AppendIdem appends an event's idempotency reference: one flags byte (0 for
// nil), then key, fingerprint and expiry when present.
func AppendIdem(b []byte, r *edge.IdemRef) []byte {
	if r == nil {
		return append(b, 0)
	}
	flags := byte(idemPresent)
	if r.Liked {
		flags |= idemLiked
	}
	if r.Changed {
		flags |= idemChanged
	}
	b = append(b, flags)
	b = AppendStr(b, r.Key)
	b = AppendStr(b, r.Fingerprint)
	return binary.AppendVarint(b, r.ExpiresAt)
}

// Decoder reads values written with this package's Append functions (and
// encoding/binary's). After the first failure every read returns a zero value
// and Err reports the failure, so a caller reads a whole value and checks once.
type Decoder struct {
	b       []byte
	err     error
	corrupt error
}

// NewDecoder reads b; a malformed value fails with corrupt (the owner's
// sentinel, e.g. "pebblestore: corrupt value").
func NewDecoder(b []byte, corrupt error) Decoder { return Decoder{b: b, corrupt: corrupt} }

// Err is the first failure, or nil.
func (d *Decoder) Err() error { return d.err }

// Fail records a failure (the corrupt sentinel) unless one is recorded.
func (d *Decoder) Fail() {
	if d.err == nil {
		d.err = d.corrupt
	}
}

// Len is how many bytes are left unread.
func (d *Decoder) Len() int { return len(d.b) }

// End fails the decoder if bytes are left, and returns Err.
func (d *Decoder) End() error {
	if len(d.b) != 0 {
		d.Fail()
	}
	return d.err
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.Fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Uint64 reads 8 bytes, big-endian.
func (d *Decoder) Uint64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.Fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.Fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.Fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Str reads a string written by AppendStr.
func (d *Decoder) Str() string {
	n := d.Uvarint()
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.Fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// Version reads a version written by AppendVersion.
func (d *Decoder) Version() crdt.Version { return crdt.Version{Epoch: d.Uvarint(), Op: d.Uvarint()} }

// Branches reads a list written by AppendBranches.
func (d *Decoder) Branches() crdt.Branches {
	n := d.Uvarint()
	if n > maxBranches {
		d.Fail()
	}
	var bs crdt.Branches
	for i := uint64(0); i < n && d.err == nil; i++ {
		br := crdt.Branch{Epoch: d.Uvarint()}
		br.Base.Version = d.Version()
		br.Base.State = crdt.State(d.Byte())
		bs = append(bs, br)
	}
	if d.err != nil {
		return nil
	}
	return bs
}

// Idem reads an idempotency reference written by AppendIdem (nil when absent).
// Unknown flag bits, or answer bits without the presence bit, fail.
func (d *Decoder) Idem() *edge.IdemRef {
	flags := d.Byte()
	if d.err != nil || flags == 0 {
		return nil
	}
	if flags&^idemAll != 0 || flags&idemPresent == 0 {
		d.Fail()
		return nil
	}
	r := &edge.IdemRef{Liked: flags&idemLiked != 0, Changed: flags&idemChanged != 0}
	r.Key = d.Str()
	r.Fingerprint = d.Str()
	r.ExpiresAt = d.Varint()
	if d.err != nil {
		return nil
	}
	return r
}
