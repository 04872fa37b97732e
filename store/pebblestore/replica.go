package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
)

var (
	_ replica.Source    = (*Store)(nil)
	_ replica.Sink      = (*Store)(nil)
	_ replica.PartsSink = (*Store)(nil)
)

func (s *Store) loadCellSeq() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'o'}, UpperBound: []byte{'p'}})
	if err != nil {
		return err
	}
	defer it.Close()
	if it.Last() {
		s.cellSeq = binary.BigEndian.Uint64(it.Key()[1:])
	}
	return it.Error()
}

// purgeUser removes the user's idempotency records and the item-index entries
// edge.PurgeDrops says go (edges ERASED here).
func purgeUser(b *pebble.Batch, user string) error {
	_ = b.DeleteRange(idemPrefix(user), prefixEnd(idemPrefix(user)), nil)
	p := userIdxPrefix(user)
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return err
	}
	var items []string
	for ok := it.First(); ok; ok = it.Next() {
		items = append(items, string(it.Key()[len(p):]))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	for _, item := range items {
		e, ok, err := getInto(b, edgeKey(item, user), func(v []byte) (edge.Edge, error) { return decodeEdge(item, user, v) })
		if err != nil {
			return err
		}
		if edge.PurgeDrops(e, ok) {
			_ = b.Delete(userIdxKey(user, item), nil)
		}
	}
	return nil
}

// OwnWatermark implements replica.Source: the min over this region's
// partitions (a partition never committed counts as 0).
func (s *Store) OwnWatermark(ctx context.Context) (int64, error) {
	min := int64(-1)
	for p := 0; p < s.opts.Partitions; p++ {
		_, wm, err := s.Position(ctx, uint32(p))
		if err != nil {
			return 0, err
		}
		if min < 0 || wm < min {
			min = wm
		}
	}
	return min, nil
}

// CellChanges implements replica.Source. It syncs the WAL before
// returning, so every change and watermark it lets the caller ship is durable.
func (s *Store) CellChanges(_ context.Context, after uint64, limit int) ([]replica.CellState, uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: outboxKey(after + 1), UpperBound: []byte{'p'}})
	if err != nil {
		return nil, after, err
	}
	defer it.Close()
	if err := s.outboxTruncatedBelow(after); err != nil {
		return nil, after, err // retention deleted changes after `after`
	}
	through := after
	seen := map[string]bool{}
	var out []replica.CellState
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		through = binary.BigEndian.Uint64(it.Key()[1:])
		ck := string(it.Value())
		if seen[ck] {
			continue
		}
		seen[ck] = true
		key, ok := parseCellKey(it.Value())
		if !ok {
			return nil, after, wrapCorrupt("outbox", it.Key(), errCorrupt)
		}
		c, found, err := getInto(s.db, it.Value(), decodeCell)
		if err != nil {
			return nil, after, err
		}
		if found {
			out = append(out, replica.CellState{Key: key, Cell: c})
		}
	}
	if err := it.Error(); err != nil {
		return nil, after, err
	}
	// Watermark-only aggregator windows are not synced (windows that change
	// cells are), so a crash may roll back the watermark the shipper read just
	// before this call (OwnWatermark) and is about to ship. A peer would then
	// hold a watermark the restarted store no longer knows it handed out: its
	// stamping floor comes from the durable positions, so a new event could be
	// stamped at or below it and the peer's asOf would claim an event it does
	// not have. One WAL sync per batch makes everything committed so far,
	// hence everything this batch vouches for, durable.
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return nil, after, err
	}
	return out, through, nil
}

// ScanCells implements replica.Source and replica.Sink.
func (s *Store) ScanCells(ctx context.Context, region string, fn func(replica.CellState) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		key, ok := parseCellKey(it.Key())
		if !ok {
			return wrapCorrupt("cell key", it.Key(), errCorrupt)
		}
		if key.Region != region {
			continue
		}
		c, err := decodeCell(it.Value())
		if err != nil {
			return wrapCorrupt("cell", it.Key(), err)
		}
		if err := fn(replica.CellState{Key: key, Cell: c}); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return it.Error()
}

// ApplyRemote implements replica.Sink. It runs in the writer loop, so it is
// ordered with local writes, and commits the events' effects with the cursor.
func (s *Store) ApplyRemote(ctx context.Context, from string, part uint32, evs []edge.Event, through uint64) error {
	return s.ApplyRemoteParts(ctx, from, []replica.RemotePart{{Partition: part, Events: evs, Through: through}})
}

// ApplyRemoteParts implements replica.PartsSink: the runs of several
// partitions in one commit (one sync per push instead of one per partition).
func (s *Store) ApplyRemoteParts(ctx context.Context, from string, parts []replica.RemotePart) error {
	if from == s.opts.Region {
		return fmt.Errorf("pebblestore: refusing to apply region %q's own events as remote", from)
	}
	for _, p := range parts {
		if int(p.Partition) >= s.opts.Partitions {
			return fmt.Errorf("pebblestore: partition %d out of range", p.Partition)
		}
	}
	_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, w *batchWriter) error {
		for _, p := range parts {
			if err := s.applyRemotePart(b, w, from, p); err != nil {
				return err
			}
		}
		return nil
	}})
	return err
}

func (s *Store) applyRemotePart(b *pebble.Batch, w *batchWriter, from string, p replica.RemotePart) error {
	ck := remotePosKey(from, p.Partition)
	cur, _, err := getInto(b, ck, decodeUvarint)
	if err != nil {
		return err
	}
	if p.Through <= cur {
		return nil // already applied
	}
	for _, ev := range p.Events {
		if ev.Pos <= cur {
			continue
		}
		if err := s.applyRemoteEvent(b, w, ev); err != nil {
			return err
		}
	}
	return b.Set(ck, binary.AppendUvarint(nil, p.Through), nil)
}

// applyRemoteEvent reads what edge.ApplyRemoteEvent needs, in the batch
// (which sees the writes of the events before it), and writes what it says.
func (s *Store) applyRemoteEvent(b *pebble.Batch, w *batchWriter, ev edge.Event) error {
	if ev.Kind == edge.KindCorrection || ev.Kind == edge.KindReconcile {
		return nil // nothing to read: the rule writes nothing for them
	}
	var l edge.RemoteLocal
	job, had, err := getInto(b, erasureKey(ev.User), decodeJob)
	if err != nil {
		return err
	}
	if had {
		l.Job = &job
	}
	hasEdge := ev.Kind != edge.KindErasing && ev.Kind != edge.KindPurge
	ek, bk := edgeKey(ev.Item, ev.User), branchKey(ev.Item, ev.User)
	if hasEdge {
		if ev.Idem != nil {
			if l.HasRecord, err = exists(b, idemKey(ev.User, ev.Idem.Key)); err != nil {
				return err
			}
		}
		if l.Edge, _, err = getInto(b, ek, func(v []byte) (edge.Edge, error) { return decodeEdge(ev.Item, ev.User, v) }); err != nil {
			return err
		}
		rec, _, err := getInto(b, bk, decodeBranchRec)
		if err != nil {
			return err
		}
		l.Branches, l.Corrections = rec.bs, rec.corrections
	}
	wr := edge.ApplyRemoteEvent(l, ev)
	if wr.Purge {
		if err := purgeUser(b, ev.User); err != nil {
			return err
		}
	}
	if wr.Record != nil {
		_ = b.Set(idemKey(ev.User, ev.Idem.Key), encodeIdem(*wr.Record), nil)
	}
	if wr.Edge != nil {
		_ = b.Set(ek, encodeEdge(*wr.Edge), nil)
	}
	if wr.Index {
		_ = b.Set(userIdxKey(ev.User, ev.Item), nil, nil)
	}
	if wr.Unindex {
		_ = b.Delete(userIdxKey(ev.User, ev.Item), nil)
	}
	if wr.Job != nil {
		v, err := encodeJob(*wr.Job)
		if err != nil {
			return err
		}
		_ = b.Set(erasureKey(ev.User), v, nil)
	}
	if wr.Correction != nil {
		w.appendEvent(*wr.Correction)
	}
	if wr.BranchesChanged {
		_ = b.Set(bk, encodeBranchRec(branchRec{bs: wr.Branches, corrections: wr.Corrections}), nil)
	}
	return nil
}

// MergeCells implements replica.Sink.
func (s *Store) MergeCells(_ context.Context, from string, cells []replica.CellState, cellsThrough uint64, watermark int64) error {
	if from == s.opts.Region {
		return fmt.Errorf("pebblestore: refusing to merge region %q's own cells as remote", from)
	}
	s.cellMu.Lock()
	defer s.cellMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for _, cs := range cells {
		if cs.Key.Region == s.opts.Region {
			return fmt.Errorf("pebblestore: peer %q shipped a cell of this region (%v)", from, cs.Key)
		}
		k := cellKey(cs.Key)
		cur, _, err := getInto(s.db, k, decodeCell)
		if err != nil {
			return err
		}
		if m := crdt.MergeCell(cur, cs.Cell); m != cur {
			_ = b.Set(k, encodeCell(m), nil)
		}
	}
	rk := remoteCellKey(from)
	prev, _, err := getInto(s.db, rk, decodeUvarint)
	if err != nil {
		return err
	}
	if cellsThrough > prev {
		_ = b.Set(rk, binary.AppendUvarint(nil, cellsThrough), nil)
	}
	if watermark > 0 {
		wk := remoteWMKey(from)
		old, _, err := getInto(s.db, wk, decodeVarint)
		if err != nil {
			return err
		}
		if watermark > old {
			_ = b.Set(wk, binary.AppendVarint(nil, watermark), nil)
		}
	}
	return b.Commit(pebble.NoSync)
}

// Cursor implements replica.Sink.
func (s *Store) Cursor(_ context.Context, from string) (replica.Cursor, error) {
	c := replica.Cursor{Log: make([]uint64, s.opts.Partitions)}
	for p := range c.Log {
		v, _, err := getInto(s.db, remotePosKey(from, uint32(p)), decodeUvarint)
		if err != nil {
			return c, err
		}
		c.Log[p] = v
	}
	v, _, err := getInto(s.db, remoteCellKey(from), decodeUvarint)
	c.Cells = v
	return c, err
}
