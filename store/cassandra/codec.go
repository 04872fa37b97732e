package cassandra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"likes/crdt"
	"likes/edge"
)

// errCorrupt is returned for a blob this package did not write.
var errCorrupt = errors.New("cassandra: corrupt value")

// Blob formats (all varint based, versioned by a leading format byte so a later
// release can change them without a migration of old rows):
//
//	event    := 1 kind state bucket(uvarint) delta(varint) item user version time(varint) idem?
//	pending  := 1 nonce(8) ttl(uvarint) intent-minute(uvarint) event
//	inflight := 1 count(uvarint) { pos(uvarint) eseq(uvarint) nonce(8) event }*
//	branches := 1 count(uvarint) { epoch version state }*
const blobV1 = 1

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
}

func (d *dec) byte1() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *dec) version() crdt.Version { return crdt.Version{Epoch: d.uvarint(), Op: d.uvarint()} }

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendVersion(b []byte, v crdt.Version) []byte {
	b = binary.AppendUvarint(b, v.Epoch)
	return binary.AppendUvarint(b, v.Op)
}

// appendEvent encodes everything of ev except Partition and Pos, which the
// outbox row's key holds.
func appendEvent(b []byte, ev edge.Event) []byte {
	b = append(b, blobV1, byte(ev.Kind), byte(ev.State))
	b = binary.AppendUvarint(b, uint64(ev.Bucket))
	b = binary.AppendVarint(b, int64(ev.Delta))
	b = appendStr(b, ev.Item)
	b = appendStr(b, ev.User)
	b = appendVersion(b, ev.Version)
	b = binary.AppendVarint(b, ev.EventTime)
	if ev.Idem == nil {
		return append(b, 0)
	}
	flags := byte(1)
	if ev.Idem.Liked {
		flags |= 2
	}
	if ev.Idem.Changed {
		flags |= 4
	}
	b = append(b, flags)
	b = appendStr(b, ev.Idem.Key)
	b = appendStr(b, ev.Idem.Fingerprint)
	return binary.AppendVarint(b, ev.Idem.ExpiresAt)
}

func (d *dec) event() edge.Event {
	if v := d.byte1(); v != blobV1 {
		d.fail()
		return edge.Event{}
	}
	ev := edge.Event{Kind: edge.Kind(d.byte1()), State: crdt.State(d.byte1())}
	bucket := d.uvarint()
	delta := d.varint()
	if bucket > math.MaxUint32 || delta < math.MinInt32 || delta > math.MaxInt32 {
		d.fail()
	}
	ev.Bucket, ev.Delta = uint32(bucket), int32(delta)
	ev.Item = d.str()
	ev.User = d.str()
	ev.Version = d.version()
	ev.EventTime = d.varint()
	if flags := d.byte1(); d.err == nil && flags&1 != 0 {
		ev.Idem = &edge.IdemRef{Liked: flags&2 != 0, Changed: flags&4 != 0}
		ev.Idem.Key = d.str()
		ev.Idem.Fingerprint = d.str()
		ev.Idem.ExpiresAt = d.varint()
	}
	return ev
}

func encodeEvent(ev edge.Event) []byte { return appendEvent(nil, ev) }

func decodeEvent(part uint32, pos uint64, v []byte) (edge.Event, error) {
	d := dec{b: v}
	ev := d.event()
	ev.Partition, ev.Pos = part, pos
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return ev, d.err
}

// pending is the event an edge row carries between the lightweight
// transaction that wrote it and its append to the outbox.
type pending struct {
	Nonce  uint64 // identifies the Apply attempt that wrote it
	TTLSec int64  // the idempotency record's Cassandra TTL (0: no record)
	Minute int64  // the relay intent's time bucket (Unix minutes)
	Event  edge.Event
}

func encodePending(p pending) []byte {
	b := []byte{blobV1}
	b = binary.BigEndian.AppendUint64(b, p.Nonce)
	b = binary.AppendUvarint(b, uint64(p.TTLSec))
	b = binary.AppendUvarint(b, uint64(p.Minute))
	return appendEvent(b, p.Event)
}

func decodePending(v []byte) (pending, error) {
	d := dec{b: v}
	if d.byte1() != blobV1 {
		d.fail()
	}
	p := pending{Nonce: d.u64(), TTLSec: int64(d.uvarint()), Minute: int64(d.uvarint())}
	p.Event = d.event()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return p, d.err
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
	d := dec{b: v}
	if d.byte1() != blobV1 {
		d.fail()
	}
	n := d.uvarint()
	if n > 1<<20 {
		d.fail()
	}
	var out []slot
	for i := uint64(0); i < n && d.err == nil; i++ {
		s := slot{Pos: d.uvarint(), ESeq: d.uvarint(), Nonce: d.u64()}
		s.Event = d.event()
		s.Event.Partition, s.Event.Pos = part, s.Pos
		out = append(out, s)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return out, d.err
}

func encodeBranches(bs crdt.Branches) []byte {
	if len(bs) == 0 {
		return nil
	}
	b := []byte{blobV1}
	b = binary.AppendUvarint(b, uint64(len(bs)))
	for _, br := range bs {
		b = binary.AppendUvarint(b, br.Epoch)
		b = appendVersion(b, br.Base.Version)
		b = append(b, byte(br.Base.State))
	}
	return b
}

func decodeBranches(v []byte) (crdt.Branches, error) {
	if len(v) == 0 {
		return nil, nil
	}
	d := dec{b: v}
	if d.byte1() != blobV1 {
		d.fail()
	}
	n := d.uvarint()
	if n > 1<<16 {
		d.fail()
	}
	var bs crdt.Branches
	for i := uint64(0); i < n && d.err == nil; i++ {
		br := crdt.Branch{Epoch: d.uvarint()}
		br.Base.Version = d.version()
		br.Base.State = crdt.State(d.byte1())
		bs = append(bs, br)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return bs, d.err
}

func wrapCorrupt(what string, err error) error {
	return fmt.Errorf("cassandra: %s: %w", what, err)
}
