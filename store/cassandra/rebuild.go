package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
)

// Rebuild (--bootstrap-from-peers; the argument is in doc.go, "Snapshots"):
// a region whose keyspace was lost starts on a fresh one and rebuilds from
// each peer, as the embedded store does (pebblestore's rebuild.go). Its own
// log is gone, but its peers hold what it had shipped: its edges and records
// (in their state), its cells (their copies) and how far they applied its
// log (their cursor for it). MarkRebuild names the peers; until each one's
// rebuild snapshot has finished, the store refuses that peer's pushes
// (WantsRebuild) and every client write (ErrRebuilding), because a new event
// would take a log position the peers have already passed. Finishing a
// peer's rebuild snapshot raises every log partition's sequence head, its
// truncation point and its aggregator's position past the peer's cursor for
// this region's log and past every adopted cell's HWM, and the cell-change
// feed past the peer's cell cursor.

// ErrRebuilding refuses client writes while a rebuild is pending; it wraps
// edge.ErrStorageUnavailable (503, retried later).
var ErrRebuilding = fmt.Errorf("cassandra: rebuilding from peers: %w", edge.ErrStorageUnavailable)

var _ replica.RebuildSink = (*Store)(nil)

// rebuildRefresh bounds how stale this process's copy of the pending
// rebuilds gets: another process of the region may mark or finish one. It
// is a cache lifetime on the wall clock, not a rule of the data, so it does
// not follow the injected clock (a fake clock that never moves would
// otherwise freeze the copy).
const rebuildRefresh = time.Second

// rebuildState is this process's copy of the rebuilds table.
type rebuildState struct {
	mu         sync.Mutex
	peers      map[string]bool
	loaded     time.Time
	refreshing bool
	// finish serializes this process's finishing of rebuild snapshots: two
	// peers' marks raise the same heads and positions, and a position read
	// and written by one must not go below what the other wrote.
	finish sync.Mutex
}

// MarkRebuild records that this store rebuilds from peers (its own region
// and "" are skipped). The keyspace's aggregators must have folded its whole
// log first: its positions are about to rise past what its peers hold, and
// no event below may be left unfolded (a fresh keyspace has none). With the
// aggregators on another log (ForeignPositions) their positions are not this
// log's, so that is not checked here: only an empty log rises then
// (RaiseRebuildBase, raiseStream).
func (s *Store) MarkRebuild(ctx context.Context, peers []string) error {
	if s.isClosed() {
		return ErrClosed
	}
	if !s.opts.ForeignPositions {
		if err := s.foldedToHeads(ctx); err != nil {
			return err
		}
	}
	now := s.opts.Clock.Now().UnixMilli()
	for _, p := range peers {
		if p == s.opts.Region || p == "" {
			continue
		}
		if err := s.write(ctx, s.q.rebuildPut, p, now).Exec(); err != nil {
			return fmt.Errorf("cassandra: mark rebuild from %q: %w", p, err)
		}
	}
	_, err := s.loadRebuild(ctx)
	return err
}

// foldedToHeads refuses a log partition whose aggregator has not folded it
// through its head.
func (s *Store) foldedToHeads(ctx context.Context) error {
	for p := 0; p < s.opts.Partitions; p++ {
		seq, err := s.readSeq(ctx, uint32(p), true)
		if err != nil {
			return err
		}
		pos, err := s.committedPosition(ctx, uint32(p))
		if err != nil {
			return err
		}
		if pos < seq.head {
			return fmt.Errorf("cassandra: MarkRebuild: partition %d is folded through %d of %d: run the aggregators to the log head first", p, pos, seq.head)
		}
	}
	return nil
}

// loadRebuild reads the pending rebuilds (at Open, after a change, and when
// the copy is stale) into this process's copy.
func (s *Store) loadRebuild(ctx context.Context) (map[string]bool, error) {
	it := s.read(ctx, s.q.rebuildsAll).PageSize(1000).Iter()
	m := map[string]bool{}
	var p string
	for it.Scan(&p) {
		m[p] = true
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("cassandra: read pending rebuilds: %w", err)
	}
	s.rb.mu.Lock()
	s.rb.peers, s.rb.loaded = m, time.Now()
	s.rb.mu.Unlock()
	return m, nil
}

// ReloadRebuild reads the pending rebuilds now, not at most rebuildRefresh
// later: a process that adopted a keyspace identity another process of its
// region just created (that one marked its rebuilds before it wrote the
// identity) must refuse writes from the start.
func (s *Store) ReloadRebuild(ctx context.Context) error {
	_, err := s.loadRebuild(ctx)
	return err
}

// Rebuilding lists the peers a rebuild still waits for, as this process
// last read them (at most rebuildRefresh old; a stale copy is refreshed in
// the background, so a call never waits on Cassandra).
func (s *Store) Rebuilding() []string {
	m := s.rebuildCopy()
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (s *Store) rebuildCopy() map[string]bool {
	s.rb.mu.Lock()
	defer s.rb.mu.Unlock()
	if time.Since(s.rb.loaded) > rebuildRefresh && !s.rb.refreshing && !s.isClosed() {
		s.rb.refreshing = true
		// Not in s.wg: Close may be waiting on it already; the read ends
		// with s.ctx, which Close cancels.
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			defer cancel()
			if _, err := s.loadRebuild(ctx); err != nil && s.ctx.Err() == nil {
				s.opts.OnError(err)
			}
			s.rb.mu.Lock()
			s.rb.refreshing = false
			s.rb.mu.Unlock()
		}()
	}
	return s.rb.peers
}

// rebuilding reports whether a rebuild from `from` ("" : from anyone) is
// pending, by this process's copy.
func (s *Store) rebuilding(from string) bool {
	m := s.rebuildCopy()
	if from == "" {
		return len(m) > 0
	}
	return m[from]
}

// rebuildingNow is rebuilding read from Cassandra ("" : from anyone): a
// peer's rebuild may have been finished by another process of the region.
func (s *Store) rebuildingNow(ctx context.Context, from string) (bool, error) {
	if !s.rebuilding(from) {
		return false, nil
	}
	m, err := s.loadRebuild(ctx)
	if from == "" {
		return len(m) > 0, err
	}
	return m[from], err
}

// WantsRebuild implements replica.RebuildSink. A copy saying "none" is
// believed (it is at most rebuildRefresh old, and MarkRebuild runs before
// the region serves); one saying "pending" is checked against Cassandra.
func (s *Store) WantsRebuild(ctx context.Context, from string) (bool, error) {
	if s.isClosed() {
		return false, ErrClosed
	}
	return s.rebuildingNow(ctx, from)
}

// adoptOwnCells merges a peer's copies of this region's cells into them, by
// max HWM, during that peer's rebuild only (outside one a peer never writes
// this region's cells). A cell through HWM h is the state of this region's
// log prefix through h, so it is written as a window through h writes it
// (USING TIMESTAMP ownCellStamp(h), cells.go): the higher HWM wins against
// another peer's copy or an aggregator's window in any order of arrival.
func (s *Store) adoptOwnCells(ctx context.Context, from string, cells []replica.CellState) error {
	if ok, err := s.rebuildingNow(ctx, from); err != nil || !ok {
		return err
	}
	for _, cs := range cells {
		if cs.Key.Region != s.opts.Region {
			return fmt.Errorf("%w: peer %q sent cell %v as this region's", ErrRemote, from, cs.Key)
		}
	}
	return parallel(len(cells), func(i int) error {
		k, c := cells[i].Key, cells[i].Cell
		if c.HWM == 0 {
			return nil // no state a writer produced
		}
		if err := s.write(ctx, s.q.cellPut, k.Item, k.Region, int(k.Shard), int64(c.P), int64(c.N), int64(c.HWM), c.Watermark,
			ownCellStamp(c.HWM)).Exec(); err != nil {
			return fmt.Errorf("cassandra: adopt cell %v from %q: %w", k, from, err)
		}
		return nil
	})
}

// finishRebuild ends the rebuild from `from`: every log partition's head,
// truncation point and aggregator position rise past yourLog and every own
// cell's HWM, the cell-change feed's past yourCells; then the pending row
// goes. Idempotent: a finished peer's mark changes nothing, and every raise
// only moves up.
func (s *Store) finishRebuild(ctx context.Context, from string, yourLog []uint64, yourCells uint64) error {
	s.rb.finish.Lock()
	defer s.rb.finish.Unlock()
	if ok, err := s.rebuildingNow(ctx, from); err != nil || !ok {
		return err
	}
	if len(yourLog) != s.opts.Partitions {
		return fmt.Errorf("%w: rebuild mark from %q has %d partitions, want %d", ErrRemote, from, len(yourLog), s.opts.Partitions)
	}
	target := append([]uint64(nil), yourLog...)
	// With the aggregators on another log (Kafka) the cells' HWMs and the
	// positions are that log's: the log rises past the peer's cursor alone,
	// which RaiseRebuildBase's raise already passed (raiseStream refuses a
	// raise of a log holding events), and the positions stay.
	foreign := s.opts.ForeignPositions
	if !foreign {
		err := s.ScanCells(ctx, s.opts.Region, func(cs replica.CellState) error {
			if int(cs.Key.Shard) < len(target) {
				target[cs.Key.Shard] = max(target[cs.Key.Shard], cs.Cell.HWM)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := parallel(len(target), func(p int) error { return s.raiseStream(ctx, uint32(p), target[p]) }); err != nil {
		return err
	}
	if err := s.raiseStream(ctx, feedPart, yourCells); err != nil {
		return err
	}
	// The aggregators' positions follow (Position never answers below the
	// truncation point anyway; the row is raised so that it says so too).
	if !foreign {
		if err := parallel(len(target), func(p int) error { return s.raisePosition(ctx, p, target[p], target[p]) }); err != nil {
			return err
		}
	}
	if err := s.write(ctx, s.q.rebuildDrop, from).Exec(); err != nil {
		return fmt.Errorf("cassandra: finish rebuild from %q: %w", from, err)
	}
	_, err := s.loadRebuild(ctx)
	return err
}

// RaiseRebuildBase starts a rebuild whose aggregators read another log
// (Options.ForeignPositions: Kafka), before the region serves: every log
// partition's head and truncation point rise to base, and every aggregator
// position still below base (not yet moved into this data set's positions)
// to positions[p]. base is the data set's fixed position base (above every
// position of the lost data set, in this log and in the topic: region's
// identity.go), positions[p] the topic's end in those positions (its old
// records are the lost data set's: the adopted cells hold what of them was
// counted). So no new event takes a log position a peer has passed, the
// relay publishes every new one (it resumes at the floor, above what the
// topic says it published), the aggregators skip the old records, and every
// new record's position is above every adopted cell's HWM. Idempotent, and
// safe for several processes of the region at once: each raise only moves
// up, and a position is raised only while below base, which it is until the
// first process raised it, before any process served (a process raising it
// again later from an older end only moves it back, which replays, and the
// per-cell filter makes harmless). No-op once no rebuild is pending.
func (s *Store) RaiseRebuildBase(ctx context.Context, base uint64, positions []uint64) error {
	if len(positions) != s.opts.Partitions {
		return fmt.Errorf("cassandra: RaiseRebuildBase: %d positions for %d partitions", len(positions), s.opts.Partitions)
	}
	for p, pos := range positions {
		if pos < base {
			return fmt.Errorf("cassandra: RaiseRebuildBase: partition %d's position %d is below the base %d", p, pos, base)
		}
	}
	if ok, err := s.rebuildingNow(ctx, ""); err != nil || !ok {
		return err
	}
	if err := parallel(len(positions), func(p int) error { return s.raiseStream(ctx, uint32(p), base) }); err != nil {
		return err
	}
	return parallel(len(positions), func(p int) error { return s.raisePosition(ctx, p, base, positions[p]) })
}

// raisePosition moves partition p's aggregator position to `to` if it is
// below `below`, keeping its watermark.
func (s *Store) raisePosition(ctx context.Context, p int, below, to uint64) error {
	var pos, wm int64
	err := s.read(ctx, s.q.positionGet, p).Scan(&pos, &wm)
	if errors.Is(err, gocql.ErrNotFound) {
		err = nil
	}
	if err != nil || uint64(pos) >= below {
		return err
	}
	if err := s.write(ctx, s.q.positionPut, p, int64(to), wm).Exec(); err != nil {
		return fmt.Errorf("cassandra: raise the position of partition %d to %d: %w", p, to, err)
	}
	return nil
}

// raiseStream moves outbox partition part (a log partition, or the
// cell-change feed) so that its next position is above target: the sequence
// head by a lightweight transaction on the head it read, then the truncation
// point, then the rows the rebuild left below (those its aggregator folded)
// are deleted. A log partition whose aggregator has not folded its head yet
// (a branch correction a snapshot's edge appended here) is refused with
// ErrRebuilding: the peer sends the snapshot again, by then it is folded.
// No-op when the head is at or above target (and its floor is in place).
//
// Why the floor comes after the head: Position answers at least the floor,
// so a floor raised while an event below target could still be appended
// (the head's transaction not yet won) could make an aggregator that reloads
// its position jump over that event. Once the head moved, no position up to
// target is ever issued again. A reader between the two finds the positions
// above the old head missing and below the floor, and fails (and retries)
// until the floor is written; it never skips.
func (s *Store) raiseStream(ctx context.Context, part uint32, target uint64) error {
	var lastErr error
	for attempt := 0; attempt < s.opts.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
		seq, err := s.readSeq(ctx, part, true)
		if err != nil {
			if retryable(err) {
				lastErr = err
				continue
			}
			return err
		}
		fl, err := s.readFloor(ctx, part)
		if err != nil {
			return err
		}
		if seq.head >= target {
			return s.settleRaise(ctx, part, target, seq, fl)
		}
		switch {
		case part == feedPart:
		case s.opts.ForeignPositions:
			// The aggregators' positions are another log's, so whether
			// the events below are counted is not known here (only
			// whether the relay published them): only an empty log rises.
			if seq.head > fl.through {
				return fmt.Errorf("cassandra: raise outbox partition %d to %d: it holds events %d..%d, and with the aggregators on another log (Kafka) only an empty log is raised (a rebuild raises it first: RaiseRebuildBase)",
					part, target, fl.through+1, seq.head)
			}
		default:
			pos, err := s.committedPosition(ctx, part)
			if err != nil {
				return err
			}
			if pos < seq.head {
				return fmt.Errorf("%w: partition %d is folded through %d of %d; the peer retries", ErrRebuilding, part, pos, seq.head)
			}
		}
		// The last append's slots are written and recorded before they are
		// replaced (the outbox order's rule: an event in them is then known
		// relayed to every later append).
		if len(seq.inflight) > 0 {
			if err := s.finishSlots(ctx, part, seq.inflight); err != nil {
				return err
			}
		}
		stmt, args := s.seqAppendArgs(part, seq, target, seq.lastTime, nil)
		applied, err := s.cas(ctx, stmt, args...).MapScanCAS(map[string]any{})
		if err != nil {
			if !retryable(err) {
				return err
			}
			lastErr = err
			continue // outcome unknown: the next read of the head tells
		}
		if !applied {
			lastErr = errLostRace
			continue
		}
		if err := s.write(ctx, s.q.floorPut, int(part), int64(target), seq.lastTime, int64(target)).Exec(); err != nil {
			return fmt.Errorf("cassandra: raise the truncation point of outbox partition %d: %w", part, err)
		}
		// Rows at or below the old head are folded and below the floor: no
		// reader reaches them. Delete them now, so retention's next round
		// does not walk every chunk up to the raised floor.
		if fl.deleted < seq.head {
			if err := s.deleteRows(ctx, part, fl.deleted, seq.head); err != nil {
				return err
			}
		}
		return s.write(ctx, s.q.floorDeleted, int64(target), int64(target), int(part)).Exec()
	}
	return fmt.Errorf("%w: raise outbox partition %d to %d: %v", ErrContention, part, target, lastErr)
}

// settleRaise finishes a raise whose head transaction landed but whose floor
// was not written (a crash, a lost answer): the head is at or above target
// and the position target has no row, which only a raise leaves (every
// position an append issued is a row or one of the head's inflight slots).
// The rows below are left to no reader; the floor's deleted mark skips them
// rather than make retention walk every chunk up to target.
func (s *Store) settleRaise(ctx context.Context, part uint32, target uint64, seq seqRow, fl floorRow) error {
	if target == 0 || fl.through >= target {
		return nil
	}
	for _, sl := range seq.inflight {
		if sl.Pos == target {
			return nil
		}
	}
	_, missing, err := s.readRows(ctx, part, target-1, target)
	if err != nil || len(missing) == 0 {
		return err
	}
	if err := s.write(ctx, s.q.floorPut, int(part), int64(target), seq.lastTime, int64(target)).Exec(); err != nil {
		return fmt.Errorf("cassandra: raise the truncation point of outbox partition %d: %w", part, err)
	}
	return s.write(ctx, s.q.floorDeleted, int64(target), int64(target), int(part)).Exec()
}

// committedPosition is the position the partition's aggregator committed
// (Position without the floor).
func (s *Store) committedPosition(ctx context.Context, part uint32) (uint64, error) {
	var pos, wm int64
	err := s.read(ctx, s.q.positionGet, int(part)).Scan(&pos, &wm)
	if errors.Is(err, gocql.ErrNotFound) {
		return 0, nil
	}
	return uint64(pos), err
}

// --- the keyspace's identity ---------------------------------------------------

// KeyspaceIdentity is what the keyspace's meta row says it holds: the region
// and creation time fixed by the first Open, and the cluster id and data set
// (region's identity.go) once recorded; DataSet "" means none yet.
type KeyspaceIdentity struct {
	Region, Cluster, DataSet string
	CreatedMs                int64
	// PositionBase is the data set's base in the Kafka topic's positions
	// (0: an original data set; region's identity.go).
	PositionBase uint64
}

// ErrIdentityChanged is returned by SetIdentity when the keyspace's data set
// is no longer the one expected (another process recorded one meanwhile).
var ErrIdentityChanged = errors.New("cassandra: the keyspace's identity changed concurrently")

// Identity reads the keyspace's identity (LOCAL_QUORUM after the lightweight
// transaction that wrote it, hence SERIAL: it is only ever written by one).
func (s *Store) Identity(ctx context.Context) (KeyspaceIdentity, error) {
	var id KeyspaceIdentity
	var base int64
	// A null column scans as "" (no identity recorded yet) or 0.
	if err := s.serial(ctx, s.q.identityGet).Scan(&id.Region, &id.CreatedMs, &id.Cluster, &id.DataSet, &base); err != nil {
		return id, fmt.Errorf("cassandra: read the keyspace's identity: %w", err)
	}
	if base < 0 {
		return id, fmt.Errorf("cassandra: the keyspace's identity has a negative position base %d", base)
	}
	id.PositionBase = uint64(base)
	return id, nil
}

// SetIdentity records the keyspace's cluster id, data set and position base,
// if its data set is still prev ("" : none): one lightweight transaction, so
// two processes creating an identity at once cannot both succeed.
func (s *Store) SetIdentity(ctx context.Context, cluster, dataSet string, positionBase uint64, prev string) error {
	var want any
	if prev != "" {
		want = prev
	}
	if positionBase > math.MaxInt64 {
		return fmt.Errorf("cassandra: position base %d is beyond a bigint", positionBase)
	}
	applied, err := s.cas(ctx, s.q.identityPut, cluster, dataSet, int64(positionBase), want).MapScanCAS(map[string]any{})
	if err != nil {
		return fmt.Errorf("cassandra: record the keyspace's identity: %w", err)
	}
	if !applied {
		return fmt.Errorf("%w: expected data set %q", ErrIdentityChanged, prev)
	}
	return nil
}

// HoldsData reports whether the keyspace holds anything of a region: an
// append to its log, an edge, or a peer's applied stream. A freshly migrated
// keyspace holds none of these (Open writes only the meta row).
func (s *Store) HoldsData(ctx context.Context) (bool, error) {
	for _, stmt := range []string{s.sq.any, s.q.anyEdge, s.q.anyPeerCursor} {
		it := s.read(ctx, stmt).Iter()
		found := it.NumRows() > 0
		if err := it.Close(); err != nil {
			return false, fmt.Errorf("cassandra: look for data in the keyspace: %w", err)
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}
