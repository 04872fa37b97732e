package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/store/retain"
)

// ErrTruncated is pipeline.ErrTruncated, wrapped with the position asked for.
var ErrTruncated = pipeline.ErrTruncated

func truncatedErr(part uint32, after, through uint64) error {
	what := fmt.Sprintf("log partition %d", part)
	if part == feedPart {
		what = "cell-change feed"
	}
	return fmt.Errorf("%w: %s read after %d, truncated through %d", ErrTruncated, what, after, through)
}

// floorRow is an outbox partition's log_floors row.
type floorRow struct {
	through uint64 // reads after a position below it fail
	deleted uint64 // rows at or below it are deleted
}

func (s *Store) readFloor(ctx context.Context, part uint32) (floorRow, error) {
	var through, deleted int64
	err := s.read(ctx, s.q.floorGet, int(part)).Scan(&through, &deleted)
	if errors.Is(err, gocql.ErrNotFound) {
		return floorRow{}, nil
	}
	return floorRow{through: uint64(through), deleted: uint64(deleted)}, err
}

func (s *Store) logFloor(ctx context.Context, part uint32) (uint64, error) {
	f, err := s.readFloor(ctx, part)
	return f.through, err
}

// LogFloor is a log partition's truncation point: Read after a position
// below it fails with ErrTruncated.
func (s *Store) LogFloor(ctx context.Context, part uint32) (uint64, error) {
	if int(part) >= s.opts.Partitions {
		return 0, fmt.Errorf("cassandra: partition %d out of range", part)
	}
	return s.logFloor(ctx, part)
}

// FeedFloor is the cell-change feed's truncation point: CellChanges after a
// sequence below it fails with ErrTruncated.
func (s *Store) FeedFloor(ctx context.Context) (uint64, error) { return s.logFloor(ctx, feedPart) }

// RetentionRound is the input of one retention round: the embedded store's
// (retain.Round; Scan bounds the positions per partition and the dedupe rows
// one round reads).
type RetentionRound = retain.Round

// RetentionStats is what rounds did (retain.Stats): OutboxDeleted and
// OutboxFloor are the cell-change feed's; IdemDeleted stays 0 (records
// expire by their Cassandra TTL).
type RetentionStats = retain.Stats

// Retain runs one bounded retention round (see doc.go, "Retention"): it
// truncates each log partition below min(the aggregator's committed
// position, or what the relay published when the aggregators read Kafka
// (in.Relayed), every holding peer's cursor, the last event older than the
// horizon), the cell-change feed below min(every holding peer's cell cursor,
// the last entry older than the horizon), and prunes dedupe rows whose newest
// event is older than the horizon (not with in.Relayed). Safe beside every
// other call and other processes; not safe concurrently with itself (the
// Retainer's loop is its one caller in a process; two processes' rounds only
// repeat deletes).
func (s *Store) Retain(ctx context.Context, in RetentionRound) (RetentionStats, error) {
	var st RetentionStats
	if in.Horizon <= 0 {
		return st, fmt.Errorf("cassandra: retention horizon must be > 0, got %v", in.Horizon)
	}
	if in.Scan <= 0 {
		in.Scan = 4096
	}
	if s.isClosed() {
		return st, ErrClosed
	}
	cutoff := in.Now.Add(-in.Horizon).UnixMilli()
	st.LogFloors = make([]uint64, s.opts.Partitions)
	if !in.Log {
		for p := range st.LogFloors {
			f, err := s.logFloor(ctx, uint32(p))
			if err != nil {
				return st, err
			}
			st.LogFloors[p] = f
		}
		f, err := s.logFloor(ctx, feedPart)
		st.OutboxFloor = f
		return st, err
	}
	parts := s.opts.Partitions
	deleted := make([]uint64, parts+1)
	more := make([]bool, parts+1)
	floors := make([]uint64, parts+1)
	errs := make([]error, parts+2)
	_ = parallel(parts+1, func(i int) error {
		part, hi := uint32(i), uint64(0)
		if i == parts { // the cell-change feed: no aggregator reads it
			part = feedPart
			hi = ^uint64(0)
			for _, pc := range in.Peers {
				hi = min(hi, pc.Cursor.Cells)
			}
		} else {
			var agg uint64
			if in.Relayed == nil { // else the aggregators' positions are topic offsets, unused
				var err error
				if agg, _, err = s.Position(ctx, part); err != nil {
					errs[i] = err
					return nil
				}
			}
			hi = in.LogBound(i, agg)
			for _, pc := range in.Peers {
				c := uint64(0)
				if i < len(pc.Cursor.Log) {
					c = pc.Cursor.Log[i]
				}
				hi = min(hi, c)
			}
		}
		deleted[i], floors[i], more[i], errs[i] = s.truncateStream(ctx, part, hi, cutoff, in.Scan)
		return nil
	})
	for i := range parts {
		st.LogDeleted += deleted[i]
		st.LogFloors[i] = floors[i]
		st.More = st.More || more[i]
	}
	st.OutboxDeleted, st.OutboxFloor = deleted[parts], floors[parts]
	st.More = st.More || more[parts]
	if in.PruneDedupe() {
		n, m, err := s.pruneDedupe(ctx, in, cutoff)
		st.DedupeDeleted, st.More, errs[parts+1] = n, st.More || m, err
	}
	return st, errors.Join(errs...)
}

// truncateStream raises outbox partition part's truncation point to the last
// position at or below min(hi, head) whose event is older than cutoff (at
// most scan positions further), then deletes the rows below it. It returns
// the positions deleted, the truncation point, and whether it stopped at its
// bound.
func (s *Store) truncateStream(ctx context.Context, part uint32, hi uint64, cutoff int64, scan int) (uint64, uint64, bool, error) {
	fl, err := s.readFloor(ctx, part)
	if err != nil {
		return 0, 0, false, err
	}
	seq, err := s.readSeq(ctx, part, false)
	if err != nil {
		return 0, fl.through, false, err
	}
	hi = min(hi, seq.head)
	through, lastTime, more := fl.through, int64(0), false
	if hi > fl.through {
		upper := min(hi, fl.through+uint64(scan))
		evs, _, err := s.readRows(ctx, part, fl.through, upper)
		if err != nil {
			return 0, fl.through, false, err
		}
		for _, ev := range evs {
			if ev.Pos != through+1 || ev.EventTime >= cutoff {
				break // event times grow with positions: the rest are younger
			}
			through, lastTime = ev.Pos, ev.EventTime
		}
		more = through == upper && upper < hi
	}
	if through > fl.through {
		// The floor first, then the rows (see readLog): a reader that misses
		// a deleted row always finds the raised floor.
		if err := s.write(ctx, s.q.floorPut, int(part), int64(through), lastTime, int64(through)).Exec(); err != nil {
			return 0, fl.through, false, fmt.Errorf("cassandra: truncation point of outbox partition %d: %w", part, err)
		}
	}
	if fl.deleted >= through {
		return 0, through, more, nil
	}
	if err := s.deleteRows(ctx, part, fl.deleted, through); err != nil {
		return 0, through, false, err
	}
	if err := s.write(ctx, s.q.floorDeleted, int64(through), int64(through), int(part)).Exec(); err != nil {
		return 0, through, false, err
	}
	return through - fl.deleted, through, more, nil
}

// deleteRows deletes outbox partition part's positions (from, through]: a
// partition delete per chunk entirely at or below through, one range delete
// (pos <= through) in the chunk holding through otherwise.
func (s *Store) deleteRows(ctx context.Context, part uint32, from, through uint64) error {
	first, last := chunkOf(from+1), chunkOf(through)
	return parallel(int(last-first+1), func(i int) error {
		c := first + int64(i)
		var err error
		if uint64(c+1)*chunkSize-1 <= through {
			err = s.write(ctx, s.q.outboxDropPart, int(part), c).Exec()
		} else {
			err = s.write(ctx, s.q.outboxDropTo, int(part), c, int64(through)).Exec()
		}
		if err != nil {
			return fmt.Errorf("cassandra: delete outbox rows of partition %d chunk %d: %w", part, c, err)
		}
		return nil
	})
}

// pruneDedupe reads one page of at most in.Scan of this region's dedupe rows
// (resuming where the last round stopped, wrapping around) and deletes those
// whose newest applied event is older than cutoff (pipeline's package
// documentation says why that is safe). A row without an event time (written
// before schema 6) is stamped with now, so it goes one horizon later. Both
// writes carry the row's own write time as their timestamp: a commit that
// rewrote the row meanwhile (a later timestamp) is neither deleted nor
// re-stamped.
func (s *Store) pruneDedupe(ctx context.Context, in RetentionRound, cutoff int64) (uint64, bool, error) {
	s.retMu.Lock()
	defer s.retMu.Unlock()
	type row struct {
		item, user string
		shard      int
		at, wt     int64
	}
	var rows []row
	it, next := s.pageOf(ctx, in.Scan, s.dedupeResume, s.q.dedupeScan, s.opts.Region)
	for r := (row{}); it.Scan(&r.item, &r.shard, &r.user, &r.at, &r.wt); {
		rows = append(rows, r)
	}
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("cassandra: scan dedupe rows: %w", err)
	}
	now := in.Now.UnixMilli()
	var deleted atomic.Uint64
	if err := parallel(len(rows), func(i int) error {
		r := rows[i]
		switch {
		case r.at == 0:
			return s.write(ctx, s.q.dedupeStamp, r.wt, now, r.item, s.opts.Region, r.shard, r.user).Exec()
		case r.at < cutoff:
			deleted.Add(1)
			return s.write(ctx, s.q.dedupeDrop, r.wt, r.item, s.opts.Region, r.shard, r.user).Exec()
		}
		return nil
	}); err != nil {
		return deleted.Load(), false, fmt.Errorf("cassandra: prune dedupe rows: %w", err)
	}
	s.dedupeResume = next
	return deleted.Load(), len(next) > 0, nil
}

// pageOf reads one page of at most size rows of a scan, resuming at state
// (nil: from the start). next is the state of the following page, empty after
// the last one.
func (s *Store) pageOf(ctx context.Context, size int, state []byte, stmt string, args ...any) (it *gocql.Iter, next []byte) {
	it = s.read(ctx, stmt, args...).PageSize(size).PageState(state).Iter()
	return it, it.PageState()
}

// Retainer owns the retention loop of one store (retain.Loop: one goroutine
// running rounds every Interval on the injected clock; Step, Interval,
// Stats, Close). Close is idempotent.
type Retainer struct{ *retain.Loop }

// NewRetainer runs s's rounds (Retain) as cfg says (its Retain and Enough
// are set here: the embedded store's loop without the idempotency sweep's
// budget, records expiring by their Cassandra TTL; Interval defaults to 1
// minute) and starts the loop, its first round one Interval away. manual: no
// loop; Step and Interval run rounds (tests).
func NewRetainer(s *Store, cfg retain.Config, manual bool) (*Retainer, error) {
	if s == nil {
		return nil, errors.New("cassandra: NewRetainer needs a store")
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Retention <= 0 || cfg.Interval < 0 || cfg.Scan < 0 {
		return nil, fmt.Errorf("cassandra: retainer: Retention (%v) must be > 0, Interval (%v) and Scan (%d) not negative",
			cfg.Retention, cfg.Interval, cfg.Scan)
	}
	cfg.Retain, cfg.Enough = s.Retain, nil
	return &Retainer{retain.New(cfg, manual)}, nil
}
