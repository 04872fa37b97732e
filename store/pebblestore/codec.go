package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"likes/crdt"
	"likes/edge"
	"likes/pipeline"
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

// dec reads varints and strings, remembering the first error.
type dec struct {
	b   []byte
	err error
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
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
		d.err = errCorrupt
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
		d.err = errCorrupt
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendVersion(b []byte, v crdt.Version) []byte {
	b = binary.AppendUvarint(b, v.Epoch)
	return binary.AppendUvarint(b, v.Op)
}

func (d *dec) version() crdt.Version { return crdt.Version{Epoch: d.uvarint(), Op: d.uvarint()} }

func encodeEdge(e edge.Edge) []byte {
	b := []byte{byte(e.State)}
	b = appendVersion(b, e.Version)
	return binary.AppendVarint(b, e.UpdatedAt)
}

func decodeEdge(item, user string, v []byte) (edge.Edge, error) {
	if len(v) < 1 {
		return edge.Edge{}, errCorrupt
	}
	d := dec{b: v[1:]}
	e := edge.Edge{Item: item, User: user, State: crdt.State(v[0]), Version: d.version(), UpdatedAt: d.varint()}
	return e, d.err
}

func encodeEvent(ev edge.Event) []byte {
	b := []byte{byte(ev.Kind), byte(ev.State)}
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

func decodeEvent(part uint32, pos uint64, v []byte) (edge.Event, error) {
	if len(v) < 3 {
		return edge.Event{}, errCorrupt
	}
	d := dec{b: v[2:]}
	ev := edge.Event{Partition: part, Pos: pos, Kind: edge.Kind(v[0]), State: crdt.State(v[1])}
	delta := d.varint()
	if delta < math.MinInt32 || delta > math.MaxInt32 {
		return ev, errCorrupt
	}
	ev.Delta = int32(delta)
	ev.Item = d.str()
	ev.User = d.str()
	ev.Version = d.version()
	ev.EventTime = d.varint()
	ev.Bucket = edge.BucketOf(ev.User)
	if d.err == nil && len(d.b) > 0 && d.b[0]&1 != 0 {
		flags := d.b[0]
		d.b = d.b[1:]
		ev.Idem = &edge.IdemRef{Liked: flags&2 != 0, Changed: flags&4 != 0}
		ev.Idem.Key = d.str()
		ev.Idem.Fingerprint = d.str()
		ev.Idem.ExpiresAt = d.varint()
	}
	return ev, d.err
}

func encodeIdem(r edge.IdemRecord) []byte {
	b := appendStr(nil, r.Fingerprint)
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
	d := dec{b: v}
	r := edge.IdemRecord{Fingerprint: d.str()}
	if d.err == nil && len(d.b) < 1 {
		d.err = errCorrupt
	}
	if d.err != nil {
		return r, d.err
	}
	flags := d.b[0]
	d.b = d.b[1:]
	r.ExpiresAt = d.varint()
	r.Answer = edge.Answer{Item: item, User: user, Liked: flags&1 != 0, Changed: flags&2 != 0}
	return r, d.err
}

func encodeCell(c crdt.Cell) []byte {
	b := binary.AppendUvarint(nil, c.P)
	b = binary.AppendUvarint(b, c.N)
	b = binary.AppendUvarint(b, c.HWM)
	return binary.AppendVarint(b, c.Watermark)
}

func decodeCell(v []byte) (crdt.Cell, error) {
	d := dec{b: v}
	c := crdt.Cell{P: d.uvarint(), N: d.uvarint(), HWM: d.uvarint(), Watermark: d.varint()}
	return c, d.err
}

func encodeApplied(a pipeline.Applied) []byte {
	return appendVersion(appendVersion(nil, a.Write), a.Correction)
}

func decodeApplied(v []byte) (pipeline.Applied, error) {
	d := dec{b: v}
	a := pipeline.Applied{Write: d.version(), Correction: d.version()}
	return a, d.err
}

func encodeBranches(bs crdt.Branches) []byte {
	b := binary.AppendUvarint(nil, uint64(len(bs)))
	for _, br := range bs {
		b = binary.AppendUvarint(b, br.Epoch)
		b = appendVersion(b, br.Base.Version)
		b = append(b, byte(br.Base.State))
	}
	return b
}

func decodeBranches(v []byte) (crdt.Branches, error) {
	d := dec{b: v}
	n := d.uvarint()
	if n > 1<<16 {
		return nil, errCorrupt
	}
	var bs crdt.Branches
	for i := uint64(0); i < n && d.err == nil; i++ {
		br := crdt.Branch{Epoch: d.uvarint()}
		br.Base.Version = d.version()
		if d.err == nil && len(d.b) > 0 {
			br.Base.State = crdt.State(d.b[0])
			d.b = d.b[1:]
		} else if d.err == nil {
			d.err = errCorrupt
		}
		bs = append(bs, br)
	}
	return bs, d.err
}

func encodePos(pos uint64, wm int64) []byte {
	return binary.AppendVarint(binary.AppendUvarint(nil, pos), wm)
}

func decodePos(v []byte) (uint64, int64, error) {
	d := dec{b: v}
	p, w := d.uvarint(), d.varint()
	return p, w, d.err
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
	d := dec{b: v}
	n := d.uvarint()
	if d.err != nil || n > 1<<16 {
		return branchRec{}, errCorrupt
	}
	bs, err := decodeBranches(v)
	if err != nil {
		return branchRec{}, err
	}
	// Skip the branches (varint epoch, varint epoch, varint op, state byte each).
	for i := uint64(0); i < n && d.err == nil; i++ {
		d.uvarint()
		d.version()
		if len(d.b) == 0 {
			return branchRec{}, errCorrupt
		}
		d.b = d.b[1:]
	}
	r := branchRec{bs: bs}
	if d.err == nil && len(d.b) > 0 {
		r.corrections = d.uvarint()
	}
	return r, d.err
}
