package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/retain"
)

// Retention keys: t part(4) → the log's truncation point (events at or below
// it are deleted) and the event time of the last event deleted; T → the cell
// outbox's truncation point; h time(8) → the cell outbox sequence at that
// time (checkpoints that date outbox entries, which carry no time).
func floorKey(part uint32) []byte { return binary.BigEndian.AppendUint32([]byte{'t'}, part) }

var outboxFloorKey = []byte{'T'}

func checkpointKey(ms int64) []byte { return binary.BigEndian.AppendUint64([]byte{'h'}, uint64(ms)) }

// ErrTruncated is pipeline.ErrTruncated, wrapped with the position asked for.
var ErrTruncated = pipeline.ErrTruncated

// idemGrace is how long past its expiry an idempotency record stays on disk:
// a request stamped just before the sweep's clock reading still finds it.
const idemGrace = time.Minute

// PeerCursor is replica.PeerCursor (one peer's acknowledged cursor).
type PeerCursor = replica.PeerCursor

// RetentionRound is the input of one retention round (retain.Round).
type RetentionRound = retain.Round

// RetentionStats is what rounds did (retain.Stats; cumulative in a Retainer).
type RetentionStats = retain.Stats

// LogFloor is partition's truncation point: Read after a position below it
// fails with ErrTruncated. (The signature is Cassandra's too: the Kafka relay
// resumes at the floor, kafkalog's relay.go.)
func (s *Store) LogFloor(_ context.Context, part uint32) (uint64, error) {
	return s.logFloor(part), nil
}

func (s *Store) logFloor(part uint32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(part) >= len(s.floors) {
		return 0
	}
	return s.floors[part]
}

// OutboxFloor is the cell outbox's truncation point: CellChanges after a
// sequence below it fails with ErrTruncated.
func (s *Store) OutboxFloor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outboxFloor
}

// truncatedBelow reports whether a read after `after` of partition part would
// skip deleted events. Callers check it AFTER opening their iterator: the
// floor is raised before the deletion commits, so an iterator that misses
// deleted events always sees the raised floor here.
func (s *Store) truncatedBelow(part uint32, after uint64) error {
	s.mu.Lock()
	fl := s.floors[part]
	s.mu.Unlock()
	if after < fl {
		return fmt.Errorf("%w: partition %d read after %d, truncated through %d", ErrTruncated, part, after, fl)
	}
	return nil
}

func (s *Store) outboxTruncatedBelow(after uint64) error {
	s.mu.Lock()
	fl := s.outboxFloor
	s.mu.Unlock()
	if after < fl {
		return fmt.Errorf("%w: cell outbox read after %d, truncated through %d", ErrTruncated, after, fl)
	}
	return nil
}

func encodeFloor(pos uint64, lastTime int64) []byte {
	return binary.AppendVarint(binary.AppendUvarint(nil, pos), lastTime)
}

// loadFloors reads the truncation points and outbox checkpoints (at Open and
// after a reopen). It returns each partition's floor and the event time of
// the last event deleted there.
func (s *Store) loadFloors() (floors []uint64, times []int64, err error) {
	floors = make([]uint64, s.opts.Partitions)
	times = make([]int64, s.opts.Partitions)
	for p := range floors {
		v, closer, err := s.db.Get(floorKey(uint32(p)))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		floors[p], times[p], err = decodePos(v)
		closer.Close()
		if err != nil {
			return nil, nil, wrapCorrupt("log floor", floorKey(uint32(p)), err)
		}
	}
	ofl, _, err := getInto(s.db, outboxFloorKey, decodeUvarint)
	if err != nil {
		return nil, nil, err
	}
	cps, err := s.loadCheckpoints()
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.outboxFloor = ofl
	s.checkpoints = cps
	s.mu.Unlock()
	return floors, times, nil
}

type checkpoint struct {
	at  int64 // Unix ms
	seq uint64
}

func (s *Store) loadCheckpoints() ([]checkpoint, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'h'}, UpperBound: []byte{'h' + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []checkpoint
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			return nil, wrapCorrupt("outbox checkpoint", k, errCorrupt)
		}
		seq, err := decodeUvarint(it.Value())
		if err != nil {
			return nil, wrapCorrupt("outbox checkpoint", k, err)
		}
		out = append(out, checkpoint{at: int64(binary.BigEndian.Uint64(k[1:])), seq: seq})
	}
	return out, it.Error()
}

// Retain runs one bounded retention round (see RetentionRound): it truncates
// each log partition below min(the aggregator's committed position, or what
// the relay published when the aggregators read Kafka (in.Relayed), every
// holding peer's cursor, the last event older than the horizon), the cell
// outbox below min(every holding peer's cell cursor, the outbox sequence as
// of the horizon), prunes dedupe entries whose newest event is older than the
// horizon (not with in.Relayed), and deletes idempotency records expired for
// longer than a minute.
// Safe to call concurrently with everything but itself (the Retainer's loop
// is its one caller).
func (s *Store) Retain(ctx context.Context, in RetentionRound) (RetentionStats, error) {
	var st RetentionStats
	if in.Horizon <= 0 {
		return st, fmt.Errorf("pebblestore: retention horizon must be > 0, got %v", in.Horizon)
	}
	if in.Scan <= 0 {
		in.Scan = 4096
	}
	if err := s.fatalErr(); err != nil {
		return st, err
	}
	cutoff := in.Now.Add(-in.Horizon).UnixMilli()
	var errs []error
	if in.Log {
		for p := 0; p < s.opts.Partitions; p++ {
			n, more, err := s.truncatePartition(ctx, uint32(p), in, cutoff)
			st.LogDeleted += n
			st.More = st.More || more
			errs = append(errs, err)
		}
		n, err := s.truncateOutbox(in, cutoff)
		st.OutboxDeleted += n
		errs = append(errs, err)
		if in.PruneDedupe() {
			n, more, err := s.pruneDedupe(in, cutoff)
			st.DedupeDeleted += n
			st.More = st.More || more
			errs = append(errs, err)
		}
	}
	n, scanned, more, err := s.sweepIdem(ctx, in)
	st.IdemDeleted += n
	st.IdemScanned += scanned
	st.More = st.More || more
	errs = append(errs, err)
	s.mu.Lock()
	st.LogFloors = append([]uint64(nil), s.floors...)
	st.OutboxFloor = s.outboxFloor
	s.mu.Unlock()
	return st, errors.Join(errs...)
}

// truncatePartition deletes partition p's events at or below
// min(aggregator position, holding peers' cursors, head) that are older than
// cutoff, scanning at most in.Scan of them.
func (s *Store) truncatePartition(ctx context.Context, p uint32, in RetentionRound, cutoff int64) (uint64, bool, error) {
	agg, _, err := s.Position(ctx, p)
	if err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	hi := min(in.LogBound(int(p), agg), s.heads[p])
	fl := s.floors[p]
	s.mu.Unlock()
	for _, pc := range in.Peers {
		c := uint64(0)
		if int(p) < len(pc.Cursor.Log) {
			c = pc.Cursor.Log[p]
		}
		hi = min(hi, c)
	}
	if hi <= fl {
		return 0, false, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(p, fl+1), UpperBound: logKey(p, hi+1)})
	if err != nil {
		return 0, false, err
	}
	through, lastTime := fl, int64(0)
	scanned := 0
	more := false
	for ok := it.First(); ok; ok = it.Next() {
		if scanned == in.Scan {
			more = true
			break
		}
		scanned++
		pos := binary.BigEndian.Uint64(it.Key()[5:])
		ev, err := decodeEvent(p, pos, it.Value())
		if err != nil {
			_ = it.Close()
			return 0, false, wrapCorrupt("log event", it.Key(), err)
		}
		if ev.EventTime >= cutoff {
			break // event times grow with positions: the rest are younger
		}
		through, lastTime = pos, ev.EventTime
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, false, err
	}
	if through == fl {
		return 0, false, nil
	}
	// Raise the floor before the deletion commits (see truncatedBelow).
	s.mu.Lock()
	s.floors[p] = max(s.floors[p], through)
	s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(logKey(p, fl+1), logKey(p, through+1), nil)
	_ = b.Set(floorKey(p), encodeFloor(through, lastTime), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, false, err
	}
	return through - fl, more, nil
}

// truncateOutbox deletes outbox entries at or below min(holding peers' cell
// cursors, the sequence as of the cutoff), and keeps the checkpoints that
// date the outbox: one at least every Horizon/64, none older than needed.
func (s *Store) truncateOutbox(in RetentionRound, cutoff int64) (uint64, error) {
	s.cellMu.Lock()
	seq := s.cellSeq
	s.cellMu.Unlock()
	now := in.Now.UnixMilli()
	s.mu.Lock()
	cps := s.checkpoints
	fl := s.outboxFloor
	s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	if len(cps) == 0 || now-cps[len(cps)-1].at >= in.Horizon.Milliseconds()/64 {
		cps = append(cps[:len(cps):len(cps)], checkpoint{at: now, seq: seq})
		_ = b.Set(checkpointKey(now), binary.AppendUvarint(nil, seq), nil)
	}
	// The horizon's sequence: the newest checkpoint at or before the cutoff.
	horizon, keep := uint64(0), 0
	for i, c := range cps {
		if c.at <= cutoff {
			horizon, keep = c.seq, i
		}
	}
	for _, c := range cps[:keep] {
		_ = b.Delete(checkpointKey(c.at), nil)
	}
	cps = cps[keep:]
	hi := min(seq, horizon)
	for _, pc := range in.Peers {
		hi = min(hi, pc.Cursor.Cells)
	}
	deleted := uint64(0)
	if hi > fl {
		s.mu.Lock()
		s.outboxFloor = max(s.outboxFloor, hi)
		s.mu.Unlock()
		_ = b.DeleteRange(outboxKey(fl+1), outboxKey(hi+1), nil)
		_ = b.Set(outboxFloorKey, binary.AppendUvarint(nil, hi), nil)
		deleted = hi - fl
	}
	if b.Empty() {
		return 0, nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.checkpoints = cps
	s.mu.Unlock()
	return deleted, nil
}

// pruneDedupe deletes up to in.Scan dedupe entries (resuming where the last
// round stopped, wrapping around) whose newest applied event is older than
// cutoff (pipeline's package documentation says why that is safe). Entries
// without an event time (written before it existed) are stamped with now, so
// they expire one horizon later. It runs under cellMu, the lock of the
// aggregators' commits, so an entry rewritten meanwhile is never deleted.
func (s *Store) pruneDedupe(in RetentionRound, cutoff int64) (uint64, bool, error) {
	s.cellMu.Lock()
	defer s.cellMu.Unlock()
	start := s.dedupeResume
	if start == nil {
		start = []byte{'d'}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: []byte{'e'}})
	if err != nil {
		return 0, false, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	n, deleted := 0, uint64(0)
	var next []byte
	for ok := it.First(); ok; ok = it.Next() {
		if n == in.Scan {
			next = append([]byte(nil), it.Key()...)
			break
		}
		n++
		a, err := decodeApplied(it.Value())
		if err != nil {
			_ = it.Close()
			return 0, false, wrapCorrupt("dedupe", it.Key(), err)
		}
		switch {
		case a.At == 0:
			a.At = in.Now.UnixMilli()
			_ = b.Set(it.Key(), encodeApplied(a), nil)
		case a.At < cutoff:
			_ = b.Delete(it.Key(), nil)
			deleted++
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, false, err
	}
	if !b.Empty() {
		if err := b.Commit(pebble.NoSync); err != nil {
			return 0, false, err
		}
	}
	s.dedupeResume = next
	return deleted, next != nil, nil
}

// sweepIdem deletes up to in.Scan idempotency records (resuming, wrapping
// around) expired for longer than idemGrace, own and replicated alike. The
// candidates are found outside the writer; the deletion runs in the writer
// loop, ordered with Apply, and checks each record again there, so a record
// rewritten meanwhile stays.
func (s *Store) sweepIdem(ctx context.Context, in RetentionRound) (deleted, scanned uint64, more bool, err error) {
	start := s.idemResume
	if start == nil {
		start = []byte{'i'}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: []byte{'j'}})
	if err != nil {
		return 0, 0, false, err
	}
	limit := in.Now.Add(-idemGrace).UnixMilli()
	var cands [][]byte
	var next []byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n == in.Scan {
			next = append([]byte(nil), it.Key()...)
			break
		}
		n++
		r, err := decodeIdem("", "", it.Value())
		if err != nil {
			_ = it.Close()
			return 0, 0, false, wrapCorrupt("idempotency record", it.Key(), err)
		}
		if r.ExpiresAt <= limit {
			cands = append(cands, append([]byte(nil), it.Key()...))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, 0, false, err
	}
	if len(cands) > 0 {
		_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, _ *batchWriter) error {
			deleted = 0
			for _, k := range cands {
				r, ok, err := getInto(b, k, func(v []byte) (edge.IdemRecord, error) { return decodeIdem("", "", v) })
				if err != nil {
					return err
				}
				if ok && r.ExpiresAt <= limit {
					_ = b.Delete(k, nil)
					deleted++
				}
			}
			return nil
		}})
		if err != nil {
			return 0, 0, false, err
		}
	}
	s.idemResume = next
	s.idemPassKeys += int64(n)
	if next == nil { // wrapped: the pass is complete
		s.idemLastPass, s.idemPassKeys = s.idemPassKeys, 0
	}
	return deleted, uint64(n), next != nil, nil
}

// IdemEstimate estimates how many idempotency records the store holds, for
// the Retainer's sweep budget: the last complete pass's count (or the
// current pass's, when larger); during the first pass, the keys seen so far
// scaled by the share of the records' disk space they cover. Only Retain's
// caller may call it.
func (s *Store) IdemEstimate() int64 {
	if s.idemLastPass > 0 {
		return max(s.idemLastPass, s.idemPassKeys)
	}
	db := s.db.raw()
	if db == nil || s.idemPassKeys == 0 || s.idemResume == nil {
		return s.idemPassKeys
	}
	total, err1 := db.EstimateDiskUsage([]byte{'i'}, []byte{'j'})
	covered, err2 := db.EstimateDiskUsage([]byte{'i'}, s.idemResume)
	if err1 != nil || err2 != nil || covered == 0 || total <= covered {
		return s.idemPassKeys
	}
	return int64(float64(s.idemPassKeys) * float64(total) / float64(covered))
}

// KeyCounts counts the database's keys by kind (for tests, the simulation and
// measurements; it scans everything).
func (s *Store) KeyCounts() (map[string]int, error) {
	names := map[byte]string{
		'e': "edges", 'b': "branches", 'i': "idempotency", 'u': "user-index", 'l': "log",
		'c': "cells", 'd': "dedupe", 'p': "positions", 'x': "erasures", 'm': "meta",
		'o': "outbox", 'r': "remote-cursors", 'k': "remote-cell-cursors", 'w': "watermarks",
		't': "log-floors", 'T': "outbox-floor", 'h': "outbox-checkpoints",
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string]int{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		name, ok := names[k[0]]
		if !ok {
			name = fmt.Sprintf("other-%q", k[:1])
		}
		out[name]++
	}
	return out, it.Error()
}

// DiskBytes is what a database holds on disk, by file kind.
type DiskBytes struct {
	Total  uint64 // every file (Pebble's DiskSpaceUsage)
	Tables uint64 // live sstables: the data
	WAL    uint64 // write-ahead log, live and recycled
}

// DiskUsage is the size of the database's files (Pebble's metrics).
func (s *Store) DiskUsage() (DiskBytes, error) {
	db := s.db.raw()
	if db == nil {
		return DiskBytes{}, errReopening
	}
	m := db.Metrics()
	return DiskBytes{Total: m.DiskSpaceUsage(), Tables: m.Table.Local.LiveSize,
		WAL: m.WAL.PhysicalSize + m.WAL.ObsoletePhysicalSize}, nil
}

// CompactAll compacts the whole key space (measurements: what the disk holds
// once deletions are compacted away, not when Pebble gets to them).
func (s *Store) CompactAll(ctx context.Context) error {
	db := s.db.raw()
	if db == nil {
		return errReopening
	}
	return db.Compact(ctx, []byte{0}, bytes.Repeat([]byte{0xff}, 16), false)
}

// DiskUsageByKind estimates the bytes on disk of the key kinds retention
// bounds (log, outbox, dedupe, idempotency) and of the rest (edges, cells,
// indexes: the state itself), from Pebble's sstable estimates (memtables not
// included: measure after a flush or CompactAll).
func (s *Store) DiskUsageByKind() (map[string]uint64, error) {
	db := s.db.raw()
	if db == nil {
		return nil, errReopening
	}
	out := map[string]uint64{}
	var bounded uint64
	for _, k := range []struct {
		name string
		p    byte
	}{{"log", 'l'}, {"outbox", 'o'}, {"dedupe", 'd'}, {"idempotency", 'i'}} {
		n, err := db.EstimateDiskUsage([]byte{k.p}, []byte{k.p + 1})
		if err != nil {
			return nil, err
		}
		out[k.name] = n
		bounded += n
	}
	all, err := db.EstimateDiskUsage([]byte{0}, bytes.Repeat([]byte{0xff}, 16))
	if err != nil {
		return nil, err
	}
	out["state"] = all - min(all, bounded)
	return out, nil
}
