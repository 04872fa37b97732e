package cassandra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/wire"
)

// errCorrupt is returned for a blob this package did not write.
var errCorrupt = errors.New("cassandra: corrupt value")

// Blob formats (all varint based, versioned by a leading format byte so a later
// release can change them without a migration of old rows):
//
//	event    := 1 kind state bucket(uvarint) delta(varint) item user version time(varint) idem?
//	pending  := 2 nonce(8) ttl(uvarint) intent-minute(uvarint) event   (1: the same, from releases
//	            that cleared the column with a lightweight transaction; still read)
//	inflight := 1 count(uvarint) { pos(uvarint) eseq(uvarint) nonce(8) event }*
//	branches := 1 count(uvarint) { epoch version state }*
const blobV1 = 1

// pendingV2 marks a pending event whose relay is recorded in edge_relays and
// whose column is never cleared (schema 4). A release that knows only format
// 1 fails to decode it and so refuses to touch the edge, instead of taking an
// event this release relayed for one still pending and appending it twice.
const pendingV2 = 2

func newDec(v []byte) wire.Decoder { return wire.NewDecoder(v, errCorrupt) }

// appendEvent encodes everything of ev except Partition and Pos, which the
// outbox row's key holds.
func appendEvent(b []byte, ev edge.Event) []byte {
	b = append(b, blobV1, byte(ev.Kind), byte(ev.State))
	b = binary.AppendUvarint(b, uint64(ev.Bucket))
	b = binary.AppendVarint(b, int64(ev.Delta))
	b = wire.AppendStr(b, ev.Item)
	b = wire.AppendStr(b, ev.User)
	b = wire.AppendVersion(b, ev.Version)
	b = binary.AppendVarint(b, ev.EventTime)
	return wire.AppendIdem(b, ev.Idem)
}

// readEvent inverts appendEvent.
func readEvent(d *wire.Decoder) edge.Event {
	if v := d.Byte(); v != blobV1 {
		d.Fail()
		return edge.Event{}
	}
	ev := edge.Event{Kind: edge.Kind(d.Byte()), State: crdt.State(d.Byte())}
	bucket := d.Uvarint()
	delta := d.Varint()
	if bucket > math.MaxUint32 || delta < math.MinInt32 || delta > math.MaxInt32 {
		d.Fail()
	}
	ev.Bucket, ev.Delta = uint32(bucket), int32(delta)
	ev.Item = d.Str()
	ev.User = d.Str()
	ev.Version = d.Version()
	ev.EventTime = d.Varint()
	ev.Idem = d.Idem()
	return ev
}

func encodeEvent(ev edge.Event) []byte { return appendEvent(nil, ev) }

func decodeEvent(part uint32, pos uint64, v []byte) (edge.Event, error) {
	d := newDec(v)
	ev := readEvent(&d)
	ev.Partition, ev.Pos = part, pos
	return ev, d.End()
}

// pending is the event an edge row carries between the lightweight
// transaction that wrote it and its append to the outbox.
type pending struct {
	Nonce  uint64 // identifies the Apply attempt that wrote it
	TTLSec int64  // the idempotency record's Cassandra TTL (0: no record)
	Minute int64  // the relay intent's time bucket (Unix minutes)
	Event  edge.Event
	// legacy: decoded from format 1 (not encoded): an earlier release may
	// have relayed it, recording that in the edge row rather than in
	// edge_relays.
	legacy bool
}

func encodePending(p pending) []byte {
	b := []byte{pendingV2}
	b = binary.BigEndian.AppendUint64(b, p.Nonce)
	b = binary.AppendUvarint(b, uint64(p.TTLSec))
	b = binary.AppendUvarint(b, uint64(p.Minute))
	return appendEvent(b, p.Event)
}

func decodePending(v []byte) (pending, error) {
	d := newDec(v)
	f := d.Byte()
	if f != blobV1 && f != pendingV2 {
		d.Fail()
	}
	p := pending{Nonce: d.Uint64(), TTLSec: int64(d.Uvarint()), Minute: int64(d.Uvarint()), legacy: f == blobV1}
	p.Event = readEvent(&d)
	return p, d.End()
}

// slot is one position of an outbox append batch, as the sequence row's
// inflight column records it until the next append replaces it.
type slot struct {
	Pos   uint64
	ESeq  uint64 // the edge event sequence the event came from; 0 for standalone events
	Nonce uint64
	Event edge.Event // Item/User name the edge when ESeq > 0
}

func encodeInflight(ss []slot) []byte {
	b := []byte{blobV1}
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = binary.AppendUvarint(b, s.Pos)
		b = binary.AppendUvarint(b, s.ESeq)
		b = binary.BigEndian.AppendUint64(b, s.Nonce)
		b = appendEvent(b, s.Event)
	}
	return b
}

func decodeInflight(part uint32, v []byte) ([]slot, error) {
	if len(v) == 0 {
		return nil, nil
	}
	d := newDec(v)
	if d.Byte() != blobV1 {
		d.Fail()
	}
	n := d.Uvarint()
	if n > 1<<20 {
		d.Fail()
	}
	var out []slot
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		s := slot{Pos: d.Uvarint(), ESeq: d.Uvarint(), Nonce: d.Uint64()}
		s.Event = readEvent(&d)
		s.Event.Partition, s.Event.Pos = part, s.Pos
		out = append(out, s)
	}
	return out, d.End()
}

func encodeBranches(bs crdt.Branches) []byte {
	if len(bs) == 0 {
		return nil
	}
	return wire.AppendBranches([]byte{blobV1}, bs)
}

func decodeBranches(v []byte) (crdt.Branches, error) {
	if len(v) == 0 {
		return nil, nil
	}
	d := newDec(v)
	if d.Byte() != blobV1 {
		d.Fail()
	}
	bs := d.Branches()
	return bs, d.End()
}

func wrapCorrupt(what string, err error) error {
	return fmt.Errorf("cassandra: %s: %w", what, err)
}
