package pebblestore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/replica"
)

// Rebuild (--bootstrap-from-peers): a region that lost its data folder starts
// on an empty store and rebuilds from each peer. Its own log is gone, but its
// peers hold what it had shipped: its edges and records (in their state), its
// cells (their copies), and how far they applied its log (their cursor for
// it). MarkRebuild names the peers to rebuild from: until each one's rebuild
// snapshot has finished, the store refuses that peer's pushes (WantsRebuild;
// the replication Server answers FailedPrecondition and the peer sends the
// snapshot) and refuses client writes (ErrRebuilding), because a new event
// would take a log position the peers have already passed. A rebuild snapshot
// carries, besides the peer's state, this region's cells as the peer holds
// them (adopted by max HWM, as any cell merge) and the peer's cursor for this
// region's log: finishing it raises this store's log heads, floors and
// aggregator positions past that cursor and past every adopted cell's HWM, so
// new events take positions no peer has passed and no fence hides. With the
// aggregators on another log (Options.ForeignPositions: Kafka) positions and
// HWMs are that log's: RaiseRebuildBase lifts the empty log and the
// positions above the lost data set's before the store serves, and a finish
// raises the log past the cursor alone (cassandra's doc.go, "Snapshots",
// gives the argument for both stores).
//
// Keys: R peer → a rebuild from that peer is pending; Q → the store was
// restored from a backup (MarkRestored).
func rebuildKey(peer string) []byte { return cat('R', peer) }

var restoredKey = []byte{'Q'}

// MarkRestored records that this store was restored from a backup (likectl
// restore): its log holds events of its data set from before the backup, so
// only a rebuild that can raise a log holding events suits it (the
// aggregators on the store's log, not Kafka: region's raiseRebuildBase).
func (s *Store) MarkRestored() error {
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(restoredKey, nil, nil)
	return b.Commit(pebble.Sync)
}

// Restored reports whether MarkRestored was ever called on this store.
func (s *Store) Restored() (bool, error) {
	_, ok, err := getInto(s.db, restoredKey, func([]byte) (struct{}, error) { return struct{}{}, nil })
	return ok, err
}

// ErrRebuilding refuses client writes while a rebuild is pending; it wraps
// edge.ErrStorageUnavailable (503, retried later).
var ErrRebuilding = fmt.Errorf("pebblestore: rebuilding from peers: %w", edge.ErrStorageUnavailable)

var _ replica.RebuildSink = (*Store)(nil)

// MarkRebuild records that this store rebuilds from peers: an empty one
// (--bootstrap-from-peers), or one restored from a backup, whose aggregators
// must have folded its whole log first (its positions are about to rise past
// what its peers hold, and no event below may be left unfolded). With the
// aggregators on another log (ForeignPositions) their positions are not this
// log's, so that is not checked here: only an empty log rises then
// (RaiseRebuildBase).
func (s *Store) MarkRebuild(peers []string) error {
	if !s.opts.ForeignPositions {
		if err := s.foldedToHeads(); err != nil {
			return err
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, p := range peers {
		if p == s.opts.Region || p == "" {
			continue
		}
		_ = b.Set(rebuildKey(p), nil, nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	return s.loadRebuild()
}

// foldedToHeads refuses a log partition whose aggregator has not folded it
// through its head.
func (s *Store) foldedToHeads() error {
	for p := 0; p < s.opts.Partitions; p++ {
		pos, _, err := s.Position(context.Background(), uint32(p))
		if err != nil {
			return err
		}
		s.mu.Lock()
		h := s.heads[p]
		s.mu.Unlock()
		if pos < h {
			return fmt.Errorf("pebblestore: MarkRebuild: partition %d is folded through %d of %d: run the aggregators to the log head first", p, pos, h)
		}
	}
	return nil
}

// loadRebuild reads the pending rebuilds (at Open and after MarkRebuild).
func (s *Store) loadRebuild() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'R'}, UpperBound: []byte{'R' + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	m := map[string]bool{}
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key()[1:])] = true
	}
	if err := it.Error(); err != nil {
		return err
	}
	s.mu.Lock()
	s.rebuild = m
	s.mu.Unlock()
	return nil
}

// Rebuilding lists the peers a rebuild still waits for.
func (s *Store) Rebuilding() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for p := range s.rebuild {
		out = append(out, p)
	}
	return out
}

func (s *Store) rebuilding(from string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from == "" {
		return len(s.rebuild) > 0
	}
	return s.rebuild[from]
}

// WantsRebuild implements replica.RebuildSink.
func (s *Store) WantsRebuild(_ context.Context, from string) (bool, error) {
	return s.rebuilding(from), nil
}

// adoptOwnCells merges a peer's copies of this region's cells into them, by
// max HWM, during that peer's rebuild only (outside one a peer never writes
// this region's cells).
func (s *Store) adoptOwnCells(from string, cells []replica.CellState) error {
	if !s.rebuilding(from) {
		return nil
	}
	s.cellMu.Lock()
	defer s.cellMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for _, cs := range cells {
		if cs.Key.Region != s.opts.Region {
			return fmt.Errorf("pebblestore: peer %q sent cell %v as this region's", from, cs.Key)
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
	return b.Commit(pebble.Sync)
}

// finishRebuild ends the rebuild from `from`: the log heads, floors and
// aggregator positions rise past yourLog and every own cell's HWM.
func (s *Store) finishRebuild(ctx context.Context, from string, yourLog []uint64, yourCells uint64) error {
	if !s.rebuilding(from) {
		return nil
	}
	if len(yourLog) != s.opts.Partitions {
		return fmt.Errorf("pebblestore: rebuild mark has %d partitions, want %d", len(yourLog), s.opts.Partitions)
	}
	target := append([]uint64(nil), yourLog...)
	// With the aggregators on another log (Kafka) the cells' HWMs and the
	// positions are that log's: the log rises past the peer's cursor alone,
	// which RaiseRebuildBase's raise already passed, and the positions stay.
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
	_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, w *batchWriter) error {
		for p, t := range target {
			if t <= w.next[p] {
				continue
			}
			if foreign {
				// Whether the events below are counted is the other log's
				// business: only an empty log rises.
				if err := s.emptyLog(uint32(p), w.next[p], t); err != nil {
					return err
				}
			} else if pos, _, err := s.Position(ctx, uint32(p)); err != nil {
				// Events below the raise must be folded first (a branch
				// correction a snapshot's edge appended here): the
				// aggregator's position jumps to the raised floor.
				return err
			} else if pos < w.next[p] {
				return fmt.Errorf("%w: partition %d is folded through %d of %d; the peer retries", ErrRebuilding, p, pos, w.next[p])
			}
			s.raiseLog(b, w, p, t)
		}
		return nil
	}})
	if err != nil {
		return err
	}
	// The aggregators' positions follow, under their commit lock; a window
	// still committing a position below the raised floor is refused (Commit).
	s.cellMu.Lock()
	defer s.cellMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for p, t := range target {
		if foreign {
			break // the positions are the other log's
		}
		if err := s.raisePosition(b, p, t, t); err != nil {
			return err
		}
	}
	// The cell outbox sequence likewise rises past the peer's cell cursor
	// (kept across restarts as the outbox floor).
	raised := false
	if yourCells > s.cellSeq {
		s.mu.Lock()
		s.outboxFloor = max(s.outboxFloor, yourCells)
		s.mu.Unlock()
		_ = b.Set(outboxFloorKey, binary.AppendUvarint(nil, yourCells), nil)
		raised = true
	}
	_ = b.Delete(rebuildKey(from), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if raised {
		s.cellSeq = max(s.cellSeq, yourCells)
	}
	s.mu.Lock()
	delete(s.rebuild, from)
	s.mu.Unlock()
	return nil
}

// raiseLog moves log partition p's head and floor up to t, in the writer's
// batch (no position up to t is issued again).
func (s *Store) raiseLog(b *pebble.Batch, w *batchWriter, p int, t uint64) {
	w.next[p] = t
	s.mu.Lock()
	s.floors[p] = max(s.floors[p], t)
	s.mu.Unlock()
	_ = b.Set(floorKey(uint32(p)), encodeFloor(t, w.now), nil)
}

// emptyLog refuses a raise of partition p (head: its last position) to
// target while it holds events above its floor, with the aggregators on
// another log (ForeignPositions).
func (s *Store) emptyLog(p uint32, head, target uint64) error {
	if fl := s.logFloor(p); head > fl {
		return fmt.Errorf("pebblestore: raise log partition %d to %d: it holds events %d..%d, and with the aggregators on another log (Kafka) only an empty log is raised (a rebuild raises it first: RaiseRebuildBase)",
			p, target, fl+1, head)
	}
	return nil
}

// RaiseRebuildBase starts a rebuild whose aggregators read another log
// (Options.ForeignPositions: Kafka), before the store serves: every log
// partition's head and floor rise to base, and every aggregator position
// still below base to positions[p]. base is the data set's fixed position
// base (above every position of the lost data set, in this log and in the
// topic: region's identity.go), positions[p] the topic's end in those
// positions (its old records are the lost data set's: the adopted cells hold
// what of them was counted). So no new event takes a log position a peer
// has passed, the relay publishes every new one (it resumes at the floor,
// above what the topic says it published), the aggregators skip the old
// records, and every new record's position is above every adopted cell's
// HWM. Idempotent; a no-op once no rebuild is pending.
func (s *Store) RaiseRebuildBase(ctx context.Context, base uint64, positions []uint64) error {
	if len(positions) != s.opts.Partitions {
		return fmt.Errorf("pebblestore: RaiseRebuildBase: %d positions for %d partitions", len(positions), s.opts.Partitions)
	}
	for p, pos := range positions {
		if pos < base {
			return fmt.Errorf("pebblestore: RaiseRebuildBase: partition %d's position %d is below the base %d", p, pos, base)
		}
	}
	if !s.rebuilding("") {
		return nil
	}
	_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, w *batchWriter) error {
		for p := range w.next {
			if w.next[p] >= base {
				continue
			}
			if err := s.emptyLog(uint32(p), w.next[p], base); err != nil {
				return err
			}
			s.raiseLog(b, w, p, base)
		}
		return nil
	}})
	if err != nil {
		return err
	}
	s.cellMu.Lock()
	defer s.cellMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for p, t := range positions {
		if err := s.raisePosition(b, p, base, t); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// raisePosition sets, in b, partition p's aggregator position to `to` if it
// is below `below`, keeping its watermark (under cellMu).
func (s *Store) raisePosition(b *batch, p int, below, to uint64) error {
	pos, wm, err := s.Position(context.Background(), uint32(p))
	if err != nil || pos >= below {
		return err
	}
	return b.Set(posKey(uint32(p)), encodePos(to, wm), nil)
}

// Checkpoint writes a consistent copy of the database to dir (a backup:
// Pebble hard-links the sstables when it can and copies the rest); dir must
// not exist. A store opened on the copy and marked for rebuild catches up
// from its peers (MarkRebuild).
func (s *Store) Checkpoint(dir string) error {
	g, err := s.db.acquire()
	if err != nil {
		return err
	}
	defer g.refs.Done()
	if err := g.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("pebblestore: checkpoint to %s: %w", dir, err)
	}
	return nil
}
