package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/wire"
	"github.com/likes-dev/likes/pipeline"
)

var errCorrupt = errors.New("pebblestore: corrupt value")

const sep = 0x00

func cat(prefix byte, parts ...string) []byte {
	n := 1
	for _, p := range parts {
		n += len(p) + 1
	}
	k := make([]byte, 0, n)
	k = append(k, prefix)
	for i, p := range parts {
		if i > 0 {
			k = append(k, sep)
		}
		k = append(k, p...)
	}
	return k
}

func edgeKey(item, user string) []byte {
	k := cat('e', item)
	k = append(k, sep, byte(edge.BucketOf(user)))
	return append(k, user...)
}

func edgePrefix(item string) []byte { return append(cat('e', item), sep) }

func branchKey(item, user string) []byte  { return cat('b', item, user) }
func idemKey(user, key string) []byte     { return cat('i', user, key) }
func idemPrefix(user string) []byte       { return append(cat('i', user), sep) }
func userIdxKey(user, item string) []byte { return cat('u', user, item) }
func userIdxPrefix(user string) []byte    { return append(cat('u', user), sep) }
func dedupeKey(item, user string) []byte  { return cat('d', item, user) }
func erasureKey(user string) []byte       { return cat('x', user) }
func cellPrefix(item string) []byte       { return append(cat('c', item), sep) }
func cellKey(k crdt.CellKey) []byte {
	b := cat('c', k.Item, k.Region)
	b = append(b, sep)
	return binary.BigEndian.AppendUint32(b, k.Shard)
}

func logKey(part uint32, pos uint64) []byte {
	k := []byte{'l'}
	k = binary.BigEndian.AppendUint32(k, part)
	return binary.BigEndian.AppendUint64(k, pos)
}

func posKey(part uint32) []byte { return binary.BigEndian.AppendUint32([]byte{'p'}, part) }

// Replication keys: o seq(8) → cell key (own cell changes, shipped to peers);
// r from 00 part(4) → applied log position of a peer; k from → applied cell
// sequence of a peer; w from → a peer's watermark.
func outboxKey(seq uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'o'}, seq) }
func remotePosKey(from string, part uint32) []byte {
	return binary.BigEndian.AppendUint32(append(cat('r', from), sep), part)
}
func remoteCellKey(from string) []byte { return cat('k', from) }
func remoteWMKey(from string) []byte   { return cat('w', from) }

// parseCellKey inverts cellKey.
func parseCellKey(k []byte) (crdt.CellKey, bool) {
	if len(k) < 1+4+2 || k[0] != 'c' {
		return crdt.CellKey{}, false
	}
	body := k[1 : len(k)-4]
	shard := binary.BigEndian.Uint32(k[len(k)-4:])
	if body[len(body)-1] != sep {
		return crdt.CellKey{}, false
	}
	body = body[:len(body)-1]
	i := len(body) - 1
	for i >= 0 && body[i] != sep {
		i--
	}
	if i < 0 {
		return crdt.CellKey{}, false
	}
	return crdt.CellKey{Item: string(body[:i]), Region: string(body[i+1:]), Shard: shard}, true
}

var metaKey = []byte{'m'}

// prefixEnd is the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func newDec(v []byte) wire.Decoder { return wire.NewDecoder(v, errCorrupt) }

func decodeUvarint(v []byte) (uint64, error) {
	d := newDec(v)
	return d.Uvarint(), d.Err()
}

func decodeVarint(v []byte) (int64, error) {
	d := newDec(v)
	return d.Varint(), d.Err()
}

func encodeEdge(e edge.Edge) []byte {
	b := []byte{byte(e.State)}
	b = wire.AppendVersion(b, e.Version)
	return binary.AppendVarint(b, e.UpdatedAt)
}

func decodeEdge(item, user string, v []byte) (edge.Edge, error) {
	d := newDec(v)
	e := edge.Edge{Item: item, User: user, State: crdt.State(d.Byte()), Version: d.Version(), UpdatedAt: d.Varint()}
	return e, d.Err()
}

func encodeEvent(ev edge.Event) []byte {
	b := []byte{byte(ev.Kind), byte(ev.State)}
	b = binary.AppendVarint(b, int64(ev.Delta))
	b = wire.AppendStr(b, ev.Item)
	b = wire.AppendStr(b, ev.User)
	b = wire.AppendVersion(b, ev.Version)
	b = binary.AppendVarint(b, ev.EventTime)
	return wire.AppendIdem(b, ev.Idem)
}

func decodeEvent(part uint32, pos uint64, v []byte) (edge.Event, error) {
	d := newDec(v)
	ev := edge.Event{Partition: part, Pos: pos, Kind: edge.Kind(d.Byte()), State: crdt.State(d.Byte())}
	delta := d.Varint()
	if delta < math.MinInt32 || delta > math.MaxInt32 {
		d.Fail()
	}
	ev.Delta = int32(delta)
	ev.Item = d.Str()
	ev.User = d.Str()
	ev.Version = d.Version()
	ev.EventTime = d.Varint()
	ev.Bucket = edge.BucketOf(ev.User)
	ev.Idem = d.Idem()
	return ev, d.Err()
}

func encodeIdem(r edge.IdemRecord) []byte {
	b := wire.AppendStr(nil, r.Fingerprint)
	flags := byte(0)
	if r.Answer.Liked {
		flags |= 1
	}
	if r.Answer.Changed {
		flags |= 2
	}
	b = append(b, flags)
	return binary.AppendVarint(b, r.ExpiresAt)
}

func decodeIdem(item, user string, v []byte) (edge.IdemRecord, error) {
	d := newDec(v)
	r := edge.IdemRecord{Fingerprint: d.Str()}
	flags := d.Byte()
	r.ExpiresAt = d.Varint()
	r.Answer = edge.Answer{Item: item, User: user, Liked: flags&1 != 0, Changed: flags&2 != 0}
	return r, d.Err()
}

func encodeCell(c crdt.Cell) []byte {
	b := binary.AppendUvarint(nil, c.P)
	b = binary.AppendUvarint(b, c.N)
	b = binary.AppendUvarint(b, c.HWM)
	return binary.AppendVarint(b, c.Watermark)
}

func decodeCell(v []byte) (crdt.Cell, error) {
	d := newDec(v)
	c := crdt.Cell{P: d.Uvarint(), N: d.Uvarint(), HWM: d.Uvarint(), Watermark: d.Varint()}
	return c, d.Err()
}

func encodeApplied(a pipeline.Applied) []byte {
	b := wire.AppendVersion(wire.AppendVersion(nil, a.Write), a.Correction)
	return binary.AppendVarint(b, a.At)
}

// decodeApplied reads an entry with or without its event time (entries
// written before At existed end after the two versions: At 0, unknown).
func decodeApplied(v []byte) (pipeline.Applied, error) {
	d := newDec(v)
	a := pipeline.Applied{Write: d.Version(), Correction: d.Version()}
	if d.Err() == nil && d.Len() > 0 {
		a.At = d.Varint()
	}
	return a, d.Err()
}

func encodeBranches(bs crdt.Branches) []byte { return wire.AppendBranches(nil, bs) }

func encodePos(pos uint64, wm int64) []byte {
	return binary.AppendVarint(binary.AppendUvarint(nil, pos), wm)
}

func decodePos(v []byte) (uint64, int64, error) {
	d := newDec(v)
	p, w := d.Uvarint(), d.Varint()
	return p, w, d.Err()
}

func wrapCorrupt(what string, key []byte, err error) error {
	return fmt.Errorf("pebblestore: %s at %q: %w", what, key, err)
}

// branchRec is an edge's branch record: its branches and the number of
// corrections appended for it here (their dedupe sequence).
type branchRec struct {
	bs          crdt.Branches
	corrections uint64
}

func encodeBranchRec(r branchRec) []byte {
	return binary.AppendUvarint(encodeBranches(r.bs), r.corrections)
}

func decodeBranchRec(v []byte) (branchRec, error) {
	d := newDec(v)
	r := branchRec{bs: d.Branches()}
	if d.Err() == nil && d.Len() > 0 {
		r.corrections = d.Uvarint()
	}
	return r, d.Err()
}
