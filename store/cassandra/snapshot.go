package cassandra

import (
	"context"
	"fmt"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
)

var (
	_ replica.SnapshotSource = (*Store)(nil)
	_ replica.RebuildSource  = (*Store)(nil)
	_ replica.SnapshotSink   = (*Store)(nil)
)

// Snapshot phases, in order: edges, idempotency records, erasure marks (a
// purge applied after the edges it tombstoned), this region's own cells and,
// in a rebuild, the receiver's cells as held here.
const (
	phaseEdges = iota
	phaseRecords
	phaseErasures
	phaseCells
	phaseYourCells
	phaseEnd
)

// snapReader reads a snapshot as table scans in pages (replica.SnapshotReader).
type snapReader struct {
	s         *Store
	forRegion string // a rebuild's receiver: its cells go to YourCells
	mark      replica.SnapshotMark
	phase     int
	page      []byte // the phase's next page (nil: its first)
	closed    bool
}

// OpenSnapshot implements replica.SnapshotSource. Cassandra has no
// consistent snapshot, so the mark is read first (every log partition's head
// and the cell-change feed's) and the tables are scanned after it: an event
// at or below a head has its effect in the edge row (written before its
// append), its idempotency record and user index (written before its
// append), a cell change in its cell (written before its feed entry), so the
// scan holds the effect of everything through the mark, and possibly later
// changes, which applying again from the log is harmless (see doc.go,
// "Snapshots").
func (s *Store) OpenSnapshot(ctx context.Context) (replica.SnapshotReader, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	m := replica.SnapshotMark{Log: make([]uint64, s.opts.Partitions)}
	if err := parallel(s.opts.Partitions+1, func(i int) error {
		part := uint32(i)
		if i == s.opts.Partitions {
			part = feedPart
		}
		seq, err := s.readSeq(ctx, part, false)
		if i == s.opts.Partitions {
			m.Cells = seq.head
		} else {
			m.Log[i] = seq.head
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("cassandra: snapshot mark: %w", err)
	}
	return &snapReader{s: s, mark: m, phase: phaseEdges}, nil
}

// OpenRebuildSnapshot implements replica.RebuildSource: a snapshot that also
// carries forRegion's cells as held here and this store's cursors for
// forRegion's streams (read before the cells: the receiver raises its log
// past both, so a cell merged later only raises it further).
func (s *Store) OpenRebuildSnapshot(ctx context.Context, forRegion string) (replica.SnapshotReader, error) {
	if forRegion == s.opts.Region || forRegion == "" {
		return nil, fmt.Errorf("cassandra: a rebuild snapshot for region %q", forRegion)
	}
	cur, err := s.Cursor(ctx, forRegion)
	if err != nil {
		return nil, err
	}
	rd, err := s.OpenSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	r := rd.(*snapReader)
	r.forRegion = forRegion
	r.mark.YourLog, r.mark.YourCells = cur.Log, cur.Cells
	return r, nil
}

func (r *snapReader) Mark() replica.SnapshotMark { return r.mark.Clone() }

func (r *snapReader) Close() error {
	r.closed = true
	return nil
}

// Next implements replica.SnapshotReader: pages of the phases' scans until
// the chunk holds max entries or the last phase ends.
func (r *snapReader) Next(ctx context.Context, max int) (replica.SnapshotChunk, bool, error) {
	var c replica.SnapshotChunk
	if r.closed {
		return c, false, ErrClosed
	}
	if max <= 0 {
		return c, false, fmt.Errorf("cassandra: snapshot chunk size must be > 0, got %d", max)
	}
	for r.phase < phaseEnd && c.Len() < max {
		if err := ctx.Err(); err != nil {
			return c, false, err
		}
		if r.phase == phaseYourCells && r.forRegion == "" {
			r.phase++
			continue
		}
		next, err := r.readPage(ctx, &c, max-c.Len())
		if err != nil {
			return c, false, err
		}
		r.page = next
		if len(next) == 0 {
			r.phase, r.page = r.phase+1, nil
		}
	}
	return c, r.phase < phaseEnd, nil
}

// readPage reads one page of at most n rows of the current phase into c and
// returns the next page's state.
func (r *snapReader) readPage(ctx context.Context, c *replica.SnapshotChunk, n int) ([]byte, error) {
	s := r.s
	switch r.phase {
	case phaseEdges:
		it, next := s.pageOf(ctx, n, r.page, s.q.edgesAll)
		var e edge.Edge
		var state int8
		var ep, op int64
		for it.Scan(&e.Item, &e.User, &state, &ep, &op, &e.UpdatedAt) {
			e.State, e.Version = crdt.State(state), crdt.Version{Epoch: uint64(ep), Op: uint64(op)}
			c.Edges = append(c.Edges, e)
		}
		return next, it.Close()
	case phaseRecords:
		it, next := s.pageOf(ctx, n, r.page, s.q.idemAll)
		var x replica.SnapRecord
		for it.Scan(&x.User, &x.Key, &x.Fingerprint, &x.Liked, &x.Changed, &x.ExpiresAt) {
			c.Records = append(c.Records, x)
		}
		return next, it.Close()
	case phaseErasures:
		it, next := s.pageOf(ctx, n, r.page, s.q.erasureAll)
		for {
			var j edge.ErasureJob
			if !scanJob(it, &j) {
				break
			}
			x := replica.SnapErasure{User: j.User, At: j.StartedAt}
			if j.State == edge.ErasureDone {
				x.Done, x.At = true, j.FinishedAt
			}
			c.Erasures = append(c.Erasures, x)
		}
		return next, it.Close()
	default: // phaseCells, phaseYourCells
		region, out := s.opts.Region, &c.Cells
		if r.phase == phaseYourCells {
			region, out = r.forRegion, &c.YourCells
		}
		it, next := s.pageOf(ctx, n, r.page, s.q.cellsOfRegion, region)
		var item string
		var shard int
		var p, nn, hwm, wm int64
		for it.Scan(&item, &shard, &p, &nn, &hwm, &wm) {
			*out = append(*out, replica.CellState{Key: crdt.CellKey{Item: item, Region: region, Shard: uint32(shard)},
				Cell: crdt.Cell{P: uint64(p), N: uint64(nn), HWM: uint64(hwm), Watermark: wm}})
		}
		return next, it.Close()
	}
}

// ApplySnapshot implements replica.SnapshotSink: edges and erasure marks go
// through the same apply as replicated events (applyRemoteEvent: last writer
// wins, branch corrections relayed here, user index, erasure re-opening; one
// user's entries in order, users in parallel), records are written (USING
// TTL) if absent and unexpired, cells merge as a peer's cells do. Every step
// is idempotent, so a chunk applied twice changes nothing more. A rebuild's
// cells of this region (YourCells) are adopted by max HWM while a rebuild
// from the sender is pending, and ignored otherwise (rebuild.go).
func (s *Store) ApplySnapshot(ctx context.Context, from string, c replica.SnapshotChunk) error {
	if s.isClosed() {
		return ErrClosed
	}
	if from == s.opts.Region {
		return fmt.Errorf("%w: region %q's own snapshot", ErrRemote, from)
	}
	byUser := map[string][]edge.Event{}
	var users []string
	add := func(ev edge.Event) {
		if _, ok := byUser[ev.User]; !ok {
			users = append(users, ev.User)
		}
		byUser[ev.User] = append(byUser[ev.User], ev)
	}
	for _, e := range c.Edges {
		add(replica.SnapEdgeEvent(e, s.opts.Partitions))
	}
	if err := s.applyByUser(ctx, from, users, byUser); err != nil {
		return err
	}
	now := s.opts.Clock.Now().UnixMilli()
	if err := parallel(len(c.Records), func(i int) error {
		r := c.Records[i]
		ttl := s.recordTTL(r.ExpiresAt)
		if r.ExpiresAt <= now || ttl == 0 {
			return nil
		}
		if _, ok, err := s.readIdem(ctx, edge.Request{User: r.User, IdemKey: r.Key}); err != nil || ok {
			return err
		}
		return s.write(ctx, s.q.idemInsert, r.User, r.Key, r.Fingerprint, r.Liked, r.Changed, r.ExpiresAt, int(ttl)).Exec()
	}); err != nil {
		return fmt.Errorf("cassandra: snapshot records of %q: %w", from, err)
	}
	byUser, users = map[string][]edge.Event{}, nil
	for _, x := range c.Erasures {
		add(replica.SnapErasureEvent(x, s.opts.Partitions))
	}
	if err := s.applyByUser(ctx, from, users, byUser); err != nil {
		return err
	}
	if len(c.YourCells) > 0 {
		if err := s.adoptOwnCells(ctx, from, c.YourCells); err != nil {
			return err
		}
	}
	if len(c.Cells) == 0 {
		return nil
	}
	cur, err := s.Cursor(ctx, from)
	if err != nil {
		return err
	}
	return s.MergeCells(ctx, from, c.Cells, cur.Cells, 0)
}

// applyByUser applies each user's events in order (replicated events, or a
// snapshot's entries as events), users in parallel: all the rule reads and
// writes is one user's.
func (s *Store) applyByUser(ctx context.Context, from string, users []string, byUser map[string][]edge.Event) error {
	return parallel(len(users), func(i int) error {
		for _, ev := range byUser[users[i]] {
			if err := s.applyRemoteEvent(ctx, ev); err != nil {
				return fmt.Errorf("cassandra: apply %s event of %q at %d/%d for (%q, %q): %w", ev.Kind, from, ev.Partition, ev.Pos, ev.Item, ev.User, err)
			}
		}
		return nil
	})
}

// FinishSnapshot implements replica.SnapshotSink: the cursors for `from`
// rise to the mark (plain writes USING TIMESTAMP the position: never down).
// A rebuild's mark (YourLog) first ends the rebuild from `from`, if one is
// pending: this region's log and feed rise past the peer's cursors for them
// (finishRebuild).
func (s *Store) FinishSnapshot(ctx context.Context, from string, m replica.SnapshotMark) error {
	if s.isClosed() {
		return ErrClosed
	}
	if from == s.opts.Region {
		return fmt.Errorf("%w: region %q's own snapshot", ErrRemote, from)
	}
	if len(m.Log) != s.opts.Partitions {
		return fmt.Errorf("%w: snapshot mark has %d partitions, want %d", ErrRemote, len(m.Log), s.opts.Partitions)
	}
	if m.YourLog != nil {
		if err := s.finishRebuild(ctx, from, m.YourLog, m.YourCells); err != nil {
			return err
		}
	}
	if err := parallel(len(m.Log), func(p int) error { return s.putCursor(ctx, from, p, m.Log[p]) }); err != nil {
		return err
	}
	return s.MergeCells(ctx, from, nil, m.Cells, 0)
}
