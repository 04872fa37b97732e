package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replica"
)

var (
	_ replica.Source    = (*Store)(nil)
	_ replica.Sink      = (*Store)(nil)
	_ replica.PartsSink = (*Store)(nil)
)

// feedPart is the outbox partition of the cell-change feed: beyond every log
// partition (at most 4096), appended and read with the log's machinery
// (gap-free positions, inflight slots), so CellChanges reads it by position.
const feedPart = uint32(1 << 30)

// cellsStream is the remote_cursors stream of a sender's cell changes.
const cellsStream = -1

// ErrRemote is wrapped by every refusal of a replicated run or merge.
var ErrRemote = errors.New("cassandra: refused replicated input")

// notifyCells appends one feed entry per cell of a committed window (after
// its cells were written, before the position moves). A crash in between
// leaves those cells unannounced until their next change or the next
// anti-entropy pass (ScanCells); never announced before they are written.
func (s *Store) notifyCells(ctx context.Context, w pipeline.Window) error {
	return parallel(len(w.Cells), func(i int) error {
		k := w.Cells[i].Key
		_, err := s.submit(ctx, feedPart, slot{Nonce: rand.Uint64() | 1, Event: edge.Event{Item: k.Item, Bucket: k.Shard}}, false)
		return err
	})
}

// CellChanges implements replica.Source: the own cells named by the feed
// after position `after` (up to max entries), in their current state.
func (s *Store) CellChanges(ctx context.Context, after uint64, limit int) ([]replica.CellState, uint64, error) {
	evs, _, err := s.readLog(ctx, feedPart, after, limit, false)
	if err != nil || len(evs) == 0 {
		return nil, after, err
	}
	seen := map[crdt.CellKey]bool{}
	var keys []crdt.CellKey
	for _, ev := range evs {
		k := crdt.CellKey{Item: ev.Item, Region: s.opts.Region, Shard: ev.Bucket}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	cells, err := s.Cells(ctx, keys)
	if err != nil {
		return nil, after, err
	}
	out := make([]replica.CellState, 0, len(keys))
	for _, k := range keys {
		if c, ok := cells[k]; ok {
			out = append(out, replica.CellState{Key: k, Cell: c})
		}
	}
	return out, evs[len(evs)-1].Pos, nil
}

// ScanCells implements replica.Source and replica.Sink: every cell of region
// held here. A scan of the cells table (anti-entropy runs it rarely).
func (s *Store) ScanCells(ctx context.Context, region string, fn func(replica.CellState) error) error {
	it := s.read(ctx, s.q.cellsOfRegion, region).PageSize(1000).Iter()
	var item string
	var shard int
	var p, n, hwm, wm int64
	for it.Scan(&item, &shard, &p, &n, &hwm, &wm) {
		c := replica.CellState{Key: crdt.CellKey{Item: item, Region: region, Shard: uint32(shard)},
			Cell: crdt.Cell{P: uint64(p), N: uint64(n), HWM: uint64(hwm), Watermark: wm}}
		if err := fn(c); err != nil {
			_ = it.Close()
			return err
		}
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// Cursor implements replica.Sink.
func (s *Store) Cursor(ctx context.Context, from string) (replica.Cursor, error) {
	c := replica.Cursor{Log: make([]uint64, s.opts.Partitions)}
	it := s.read(ctx, s.q.remoteCursors, from).Iter()
	var stream int
	var pos int64
	for it.Scan(&stream, &pos) {
		switch {
		case stream == cellsStream:
			c.Cells = uint64(pos)
		case stream >= 0 && stream < len(c.Log):
			c.Log[stream] = uint64(pos)
		}
	}
	return c, it.Close()
}

// putCursor records pos for (from, stream) USING TIMESTAMP pos: the highest
// position written wins, so a cursor never moves back.
func (s *Store) putCursor(ctx context.Context, from string, stream int, pos uint64) error {
	if pos == 0 {
		return nil
	}
	if err := s.write(ctx, s.q.remoteCursorPut, from, stream, int64(pos), int64(pos)).Exec(); err != nil {
		return fmt.Errorf("cassandra: cursor of %q stream %d: %w", from, stream, err)
	}
	return nil
}

// MergeCells implements replica.Sink. A peer's cell is written USING
// TIMESTAMP hwm (its single writer's history order), so the state with the
// higher hwm wins in any order of arrival and a resend changes nothing; own
// cells are written only by this region's aggregators (lightweight
// transactions), peers' only here (plain writes): the two never meet on one
// row. Cells first, then the cursor and the watermark (both USING TIMESTAMP
// their value, never moving back): a crash in between resends cells, which
// merge idempotently, and the watermark never claims cells not yet written.
func (s *Store) MergeCells(ctx context.Context, from string, cells []replica.CellState, cellsThrough uint64, watermark int64) error {
	if s.isClosed() {
		return ErrClosed
	}
	if from == s.opts.Region {
		return fmt.Errorf("%w: region %q's own cells as remote", ErrRemote, from)
	}
	for _, c := range cells {
		if c.Key.Region == s.opts.Region {
			return fmt.Errorf("%w: peer %q shipped a cell of this region (%v)", ErrRemote, from, c.Key)
		}
	}
	if err := parallel(len(cells), func(i int) error {
		c := cells[i]
		if c.Cell.HWM == 0 {
			return nil // no state a writer produced
		}
		return s.write(ctx, s.q.cellPut, c.Key.Item, c.Key.Region, int(c.Key.Shard), int64(c.Cell.P), int64(c.Cell.N),
			int64(c.Cell.HWM), c.Cell.Watermark, int64(c.Cell.HWM)).Exec()
	}); err != nil {
		return fmt.Errorf("cassandra: merge cells of %q: %w", from, err)
	}
	if err := s.putCursor(ctx, from, cellsStream, cellsThrough); err != nil {
		return err
	}
	if watermark > 0 {
		if err := s.write(ctx, s.q.watermarkPut, from, watermark, watermark).Exec(); err != nil {
			return fmt.Errorf("cassandra: watermark of %q: %w", from, err)
		}
	}
	return nil
}

// ApplyRemote implements replica.Sink: ApplyRemoteParts of one run.
func (s *Store) ApplyRemote(ctx context.Context, from string, part uint32, evs []edge.Event, through uint64) error {
	return s.ApplyRemoteParts(ctx, from, []replica.RemotePart{{Partition: part, Events: evs, Through: through}})
}

// ApplyRemoteParts implements replica.PartsSink: every event above its
// partition's recorded cursor goes through edge.ApplyRemoteEvent, one user's
// events in their order within each partition, different users in parallel
// (everything the rule reads and writes belongs to one user: its edges, its
// records, index and erasure row); then, once every event is applied, the
// cursors move to their runs' through. See doc.go ("Replication") for why a
// crash anywhere in between is safe to repeat.
func (s *Store) ApplyRemoteParts(ctx context.Context, from string, parts []replica.RemotePart) error {
	if s.isClosed() {
		return ErrClosed
	}
	if from == s.opts.Region {
		return fmt.Errorf("%w: region %q's own events as remote", ErrRemote, from)
	}
	for _, p := range parts {
		if int(p.Partition) >= s.opts.Partitions {
			return fmt.Errorf("%w: partition %d out of range", ErrRemote, p.Partition)
		}
	}
	cur, err := s.Cursor(ctx, from)
	if err != nil {
		return err
	}
	byUser := map[string][]edge.Event{}
	var users []string
	var advance []replica.RemotePart
	for _, p := range parts {
		at := cur.Log[p.Partition]
		if p.Through <= at {
			continue // already applied
		}
		advance = append(advance, p)
		for _, ev := range p.Events {
			if ev.Pos <= at || ev.Kind == edge.KindCorrection || ev.Kind == edge.KindReconcile {
				continue // applied, or nothing to apply (the sender's cells account for it)
			}
			if _, ok := byUser[ev.User]; !ok {
				users = append(users, ev.User)
			}
			byUser[ev.User] = append(byUser[ev.User], ev)
		}
	}
	if err := s.applyByUser(ctx, from, users, byUser); err != nil {
		return err
	}
	return parallel(len(advance), func(i int) error {
		return s.putCursor(ctx, from, int(advance[i].Partition), advance[i].Through)
	})
}

// applyRemoteEvent reads the state edge.ApplyRemoteEvent needs, calls it and
// writes what it says: first the writes outside the edge row (idempotent, and
// implied by the change about to be made), then the edge row's change in one
// lightweight transaction (edge, branches and a correction as the row's
// pending event), then the relay of that correction. A lost condition or an
// unknown outcome reads again and decides again, bounded by MaxAttempts.
func (s *Store) applyRemoteEvent(ctx context.Context, ev edge.Event) error {
	switch ev.Kind {
	case edge.KindCorrection, edge.KindReconcile:
		return nil
	case edge.KindErasing, edge.KindPurge:
		return s.applyUserEvent(ctx, ev)
	}
	mu := s.edgeLock(ev.Item, ev.User)
	mu.Lock()
	comps, err := s.applyRemoteEdge(ctx, ev)
	mu.Unlock()
	return errors.Join(err, s.compensate(ctx, comps))
}

// applyUserEvent applies an erasure mark or a purge.
func (s *Store) applyUserEvent(ctx context.Context, ev edge.Event) error {
	var l edge.RemoteLocal
	j, had, err := s.Erasure(ctx, ev.User)
	if err != nil {
		return err
	}
	if had {
		l.Job = &j
	}
	w := edge.ApplyRemoteEvent(l, ev)
	if w.Purge {
		if err := s.purgeRemote(ctx, ev.User); err != nil {
			return err
		}
	}
	if w.Job != nil {
		return s.writeJob(ctx, *w.Job)
	}
	return nil
}

// purgeRemote purges as a peer's purge says: the user's idempotency records,
// and the index entries edge.PurgeDrops drops (not those of edges still live
// here: their erasure has not replicated back, or they arrived late).
func (s *Store) purgeRemote(ctx context.Context, user string) error {
	if err := s.write(ctx, s.q.idemPurge, user).Exec(); err != nil {
		return fmt.Errorf("cassandra: purge records of %q: %w", user, err)
	}
	it := s.read(ctx, s.q.userItemsAll, user).PageSize(1000).Iter()
	var items []string
	var item string
	for it.Scan(&item) {
		items = append(items, item)
	}
	if err := it.Close(); err != nil {
		return err
	}
	return parallel(len(items), func(i int) error {
		e, ok, err := s.Edge(ctx, items[i], user)
		if err != nil || !edge.PurgeDrops(e, ok) {
			return err
		}
		return s.write(ctx, s.q.userItemDelete, user, items[i]).Exec()
	})
}

func (s *Store) applyRemoteEdge(ctx context.Context, ev edge.Event) ([]compensation, error) {
	var comps []compensation
	bucket := int(edge.BucketOf(ev.User))
	part := edge.PartitionOf(ev.Item, uint32(bucket), s.opts.Partitions)
	serial := false
	var lastErr error
	for attempt := 0; attempt < s.opts.MaxAttempts; attempt++ {
		if attempt > 0 && lastErr != nil {
			if err := backoff(ctx, attempt); err != nil {
				return comps, err
			}
		}
		lastErr = nil
		// The edge row, the erasure row and the record, read together; when
		// the row still holds a pending event, it is relayed first and all
		// three are read again (the relay writes the record it carries).
		var row edgeRow
		var job edge.ErasureJob
		var hasJob, hasRecord bool
		err := parallel(3, func(i int) error {
			var err error
			switch {
			case i == 0:
				row, err = s.readEdgeRelayed(ctx, ev.Item, ev.User, serial)
			case i == 1:
				job, hasJob, err = s.Erasure(ctx, ev.User)
			case ev.Idem != nil:
				_, hasRecord, err = s.readIdem(ctx, edge.Request{Item: ev.Item, User: ev.User, IdemKey: ev.Idem.Key})
			}
			return err
		})
		if err != nil {
			if retryable(err) {
				lastErr = err
				continue
			}
			return comps, err
		}
		if row.pending != nil { // an earlier event of the edge first (as Apply)
			_, c, err := s.relay(ctx, ev.Item, ev.User, row.eseq, *row.pending)
			comps = append(comps, c...)
			if err != nil && !retryable(err) && !errors.Is(err, ErrContention) {
				return comps, err
			}
			lastErr = err
			continue
		}
		// The correction sequence is the row's event counter: a correction
		// is the row's next event, so its version {0, eseq+1} grows with
		// every correction of the edge.
		l := edge.RemoteLocal{Edge: row.e, Branches: row.branches, Corrections: row.eseq, HasRecord: hasRecord}
		if hasJob {
			l.Job = &job
		}
		w := edge.ApplyRemoteEvent(l, ev)
		if err := s.remoteEffects(ctx, ev, w); err != nil {
			if retryable(err) {
				lastErr = err
				continue
			}
			return comps, err
		}
		if w.Edge == nil && !w.BranchesChanged && w.Correction == nil {
			return comps, nil
		}
		e := row.e
		if w.Edge != nil {
			e = *w.Edge
		}
		// Every change of the row moves eseq, so a local write that read the
		// row before loses its condition instead of overwriting the branches.
		eseq := row.eseq + 1
		var blob []byte
		var p pending
		var intent []any
		if w.Correction != nil {
			c := *w.Correction // its version is {0, eseq}: Corrections was row.eseq
			c.Partition = part
			now := s.opts.Clock.Now().UnixMilli()
			p = pending{Nonce: rand.Uint64() | 1, Minute: now / 60000, Event: c}
			blob = encodePending(p)
			intent = []any{int(part), p.Minute, ev.Item, ev.User, int64(eseq), int64(p.Nonce)}
			if err := s.write(ctx, s.q.intentInsert, append(intent, now)...).Exec(); err != nil {
				if retryable(err) {
					lastErr = err
					continue
				}
				return comps, err
			}
		}
		var applied bool
		m := map[string]any{}
		if !row.exists {
			applied, err = s.cas(ctx, s.q.edgeInsert, ev.Item, bucket, ev.User, int8(e.State), int64(e.Version.Epoch),
				int64(e.Version.Op), e.UpdatedAt, int64(eseq), blob, encodeBranches(w.Branches)).MapScanCAS(m)
		} else {
			applied, err = s.cas(ctx, s.q.edgeUpdate, int8(e.State), int64(e.Version.Epoch), int64(e.Version.Op), e.UpdatedAt,
				int64(eseq), blob, encodeBranches(w.Branches), ev.Item, bucket, ev.User,
				int64(row.eseq), int64(row.e.Version.Epoch), int64(row.e.Version.Op)).MapScanCAS(m)
		}
		if err != nil && !retryable(err) {
			return comps, err
		}
		if err != nil || !applied {
			// Lost to another writer, or unknown: read (at SERIAL, which
			// settles an in-flight transaction) and decide again; if ours
			// landed, the rule now finds nothing more to do, and a
			// correction it carried is pending in the row, relayed above.
			if intent != nil && err == nil {
				_ = s.write(ctx, s.q.intentDelete, intent...).Exec()
			}
			lastErr, serial = err, true
			if lastErr == nil {
				lastErr = errLostRace
			}
			continue
		}
		if err := s.crashPoint("remote-edge-written"); err != nil {
			return comps, err
		}
		if w.Correction != nil {
			_, c, err := s.relay(ctx, ev.Item, ev.User, eseq, p)
			comps = append(comps, c...)
			if err != nil {
				return comps, fmt.Errorf("cassandra: correction of (%q, %q) committed, relay failed (the next apply or the sweeper finishes it): %w", ev.Item, ev.User, err)
			}
		}
		return comps, nil
	}
	return comps, fmt.Errorf("%w: remote apply (%q, %q): %v", ErrContention, ev.Item, ev.User, lastErr)
}

// remoteEffects writes what the rule says outside the edge row. Each write is
// idempotent and is what the edge row's change (written after it) implies,
// so a crash between them leaves nothing a repeat does not redo or find done.
func (s *Store) remoteEffects(ctx context.Context, ev edge.Event, w edge.RemoteWrites) error {
	return parallel(3, func(i int) error {
		switch {
		case i == 0 && w.Record != nil:
			if ttl := s.recordTTL(w.Record.ExpiresAt); ttl > 0 {
				return s.write(ctx, s.q.idemInsert, ev.User, ev.Idem.Key, w.Record.Fingerprint, w.Record.Answer.Liked,
					w.Record.Answer.Changed, w.Record.ExpiresAt, int(ttl)).Exec()
			}
		case i == 1 && w.Index:
			return s.write(ctx, s.q.userItemsAdd, ev.User, ev.Item).Exec()
		case i == 1 && w.Unindex:
			return s.write(ctx, s.q.userItemDelete, ev.User, ev.Item).Exec()
		case i == 2 && w.Job != nil:
			return s.writeJob(ctx, *w.Job)
		}
		return nil
	})
}

// recordTTL is the Cassandra TTL of a replicated record expiring at
// expiresAt (0: already expired, not worth storing).
func (s *Store) recordTTL(expiresAt int64) int64 {
	ms := expiresAt - s.opts.Clock.Now().UnixMilli()
	if ms <= 0 {
		return 0
	}
	secs := (ms+999)/1000 + int64(s.opts.IdemGrace.Seconds())
	return min(max(secs, 1), maxTTLSeconds)
}
