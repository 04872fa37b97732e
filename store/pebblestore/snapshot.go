package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
)

var (
	_ replica.SnapshotSource = (*Store)(nil)
	_ replica.SnapshotSink   = (*Store)(nil)
)

// snapPhases are the key ranges a snapshot reads, in order: edges, then
// idempotency records, then erasure marks (a purge applied after the edges
// it tombstoned), then this region's own cells.
var snapPhases = []byte{'e', 'i', 'x', 'c'}

// snapReader reads one Pebble snapshot in chunks (replica.SnapshotReader).
type snapReader struct {
	s         *Store
	forRegion string // a rebuild's receiver: its cells go to YourCells
	g         *gen
	snap      *pebble.Snapshot
	mark      replica.SnapshotMark
	phase     int
	resume    []byte
	closed    bool
}

// OpenSnapshot implements replica.SnapshotSource: one consistent Pebble
// snapshot of this region's state, with the mark read just before it (so the
// snapshot holds the effect of every event and cell change through the mark).
// The caller must Close it: it pins the database's state until then.
func (s *Store) OpenSnapshot(_ context.Context) (replica.SnapshotReader, error) {
	s.mu.Lock()
	heads := append([]uint64(nil), s.heads...)
	s.mu.Unlock()
	s.cellMu.Lock()
	seq := s.cellSeq
	s.cellMu.Unlock()
	g, err := s.db.acquire()
	if err != nil {
		return nil, err
	}
	return &snapReader{s: s, g: g, snap: g.db.NewSnapshot(), mark: replica.SnapshotMark{Log: heads, Cells: seq}}, nil
}

// OpenRebuildSnapshot implements replica.RebuildSource: a snapshot that also
// carries forRegion's cells as held here and this store's cursor for
// forRegion's log (from the same Pebble snapshot).
func (s *Store) OpenRebuildSnapshot(ctx context.Context, forRegion string) (replica.SnapshotReader, error) {
	if forRegion == s.opts.Region || forRegion == "" {
		return nil, fmt.Errorf("pebblestore: a rebuild snapshot for region %q", forRegion)
	}
	rd, err := s.OpenSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	r := rd.(*snapReader)
	r.forRegion = forRegion
	r.mark.YourLog = make([]uint64, s.opts.Partitions)
	for p := range r.mark.YourLog {
		v, _, err := getInto(r.snap, remotePosKey(forRegion, uint32(p)), decodeUvarint)
		if err != nil {
			_ = r.Close()
			return nil, err
		}
		r.mark.YourLog[p] = v
	}
	v, _, err := getInto(r.snap, remoteCellKey(forRegion), decodeUvarint)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	r.mark.YourCells = v
	return r, nil
}

func (r *snapReader) Mark() replica.SnapshotMark { return r.mark.Clone() }

func (r *snapReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.snap.Close()
	r.g.refs.Done()
	return err
}

// Next implements replica.SnapshotReader.
func (r *snapReader) Next(ctx context.Context, max int) (replica.SnapshotChunk, bool, error) {
	var c replica.SnapshotChunk
	if r.closed {
		return c, false, ErrClosed
	}
	if max <= 0 {
		return c, false, fmt.Errorf("pebblestore: snapshot chunk size must be > 0, got %d", max)
	}
	for r.phase < len(snapPhases) && c.Len() < max {
		if err := ctx.Err(); err != nil {
			return c, false, err
		}
		p := snapPhases[r.phase]
		lower := r.resume
		if lower == nil {
			lower = []byte{p}
		}
		it, err := r.snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte{p + 1}})
		if err != nil {
			return c, false, err
		}
		finished := true
		for ok := it.First(); ok; ok = it.Next() {
			if c.Len() >= max {
				r.resume = append([]byte(nil), it.Key()...)
				finished = false
				break
			}
			if err := r.s.snapEntry(&c, p, it.Key(), it.Value(), r.forRegion); err != nil {
				_ = it.Close()
				return c, false, err
			}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return c, false, err
		}
		if finished {
			r.phase++
			r.resume = nil
		}
	}
	return c, r.phase < len(snapPhases), nil
}

// snapEntry decodes one key of phase p into the chunk.
func (s *Store) snapEntry(c *replica.SnapshotChunk, p byte, k, v []byte, forRegion string) error {
	switch p {
	case 'e':
		i := bytes.IndexByte(k[1:], sep)
		if i < 0 || len(k) < 1+i+2 {
			return wrapCorrupt("edge key", k, errCorrupt)
		}
		item, user := string(k[1:1+i]), string(k[1+i+2:])
		e, err := decodeEdge(item, user, v)
		if err != nil {
			return wrapCorrupt("edge", k, err)
		}
		c.Edges = append(c.Edges, e)
	case 'i':
		i := bytes.IndexByte(k[1:], sep)
		if i < 0 {
			return wrapCorrupt("idempotency key", k, errCorrupt)
		}
		user, key := string(k[1:1+i]), string(k[1+i+1:])
		r, err := decodeIdem("", user, v)
		if err != nil {
			return wrapCorrupt("idempotency record", k, err)
		}
		c.Records = append(c.Records, replica.SnapRecord{User: user, Key: key, Fingerprint: r.Fingerprint,
			ExpiresAt: r.ExpiresAt, Liked: r.Answer.Liked, Changed: r.Answer.Changed})
	case 'x':
		j, err := decodeJob(v)
		if err != nil {
			return wrapCorrupt("erasure job", k, err)
		}
		x := replica.SnapErasure{User: j.User, At: j.StartedAt}
		if j.State == edge.ErasureDone {
			x.Done, x.At = true, j.FinishedAt
		}
		c.Erasures = append(c.Erasures, x)
	case 'c':
		key, ok := parseCellKey(k)
		if !ok {
			return wrapCorrupt("cell key", k, errCorrupt)
		}
		if key.Region != s.opts.Region && (forRegion == "" || key.Region != forRegion) {
			return nil // each region ships only its own cells (and a rebuild the receiver's)
		}
		cell, err := decodeCell(v)
		if err != nil {
			return wrapCorrupt("cell", k, err)
		}
		if key.Region == s.opts.Region {
			c.Cells = append(c.Cells, replica.CellState{Key: key, Cell: cell})
		} else {
			c.YourCells = append(c.YourCells, replica.CellState{Key: key, Cell: cell})
		}
	}
	return nil
}

// ApplySnapshot implements replica.SnapshotSink: edges and erasure marks go
// through the same apply as replicated events (applyRemoteEvent: last writer
// wins, branch corrections appended here, user index, erasure re-opening),
// records are stored if absent and unexpired, all in one write ordered with
// local writes; cells merge as a peer's cells do.
func (s *Store) ApplySnapshot(ctx context.Context, from string, c replica.SnapshotChunk) error {
	if from == s.opts.Region {
		return fmt.Errorf("pebblestore: refusing region %q's own snapshot", from)
	}
	now := s.opts.Clock.Now().UnixMilli()
	if len(c.Edges)+len(c.Records)+len(c.Erasures) > 0 {
		_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, w *batchWriter) error {
			for _, e := range c.Edges {
				if err := s.applyRemoteEvent(b, w, replica.SnapEdgeEvent(e, s.opts.Partitions)); err != nil {
					return err
				}
			}
			for _, r := range c.Records {
				if r.ExpiresAt <= now {
					continue
				}
				ik := idemKey(r.User, r.Key)
				if ok, err := exists(b, ik); err != nil {
					return err
				} else if !ok {
					rec := edge.IdemRecord{Fingerprint: r.Fingerprint, ExpiresAt: r.ExpiresAt,
						Answer: edge.Answer{User: r.User, Liked: r.Liked, Changed: r.Changed}}
					_ = b.Set(ik, encodeIdem(rec), nil)
				}
			}
			for _, x := range c.Erasures {
				if err := s.applyRemoteEvent(b, w, replica.SnapErasureEvent(x, s.opts.Partitions)); err != nil {
					return err
				}
			}
			return nil
		}})
		if err != nil {
			return err
		}
	}
	if len(c.YourCells) > 0 {
		if err := s.adoptOwnCells(from, c.YourCells); err != nil {
			return err
		}
	}
	if len(c.Cells) > 0 {
		cur, err := s.Cursor(ctx, from)
		if err != nil {
			return err
		}
		return s.MergeCells(ctx, from, c.Cells, cur.Cells, 0)
	}
	return nil
}

// FinishSnapshot implements replica.SnapshotSink: the cursor for `from`
// rises to the mark, partition by partition, never down.
func (s *Store) FinishSnapshot(ctx context.Context, from string, m replica.SnapshotMark) error {
	if from == s.opts.Region {
		return fmt.Errorf("pebblestore: refusing region %q's own snapshot", from)
	}
	if len(m.Log) != s.opts.Partitions {
		return fmt.Errorf("pebblestore: snapshot mark has %d partitions, want %d", len(m.Log), s.opts.Partitions)
	}
	if m.YourLog != nil {
		if err := s.finishRebuild(ctx, from, m.YourLog, m.YourCells); err != nil {
			return err
		}
	}
	_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, _ *batchWriter) error {
		for p, pos := range m.Log {
			ck := remotePosKey(from, uint32(p))
			cur, _, err := getInto(b, ck, decodeUvarint)
			if err != nil {
				return err
			}
			if pos > cur {
				_ = b.Set(ck, binary.AppendUvarint(nil, pos), nil)
			}
		}
		return nil
	}})
	if err != nil {
		return err
	}
	return s.MergeCells(ctx, from, nil, m.Cells, 0)
}
