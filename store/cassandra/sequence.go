package cassandra

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gocql/gocql"
)

// Sequence rows: where each log partition's head, last event time, issued
// time and inflight slots live (doc.go, "Write path and outbox order").
//
// Two layouts, fixed when a keyspace's store row is created (meta.seq_groups):
//
//   - 0 (keyspaces created before schema 10): one Cassandra partition per
//     log partition (outbox_seq). Each append is one transaction on its own
//     row, so a group commit only folds the events of one log partition; at
//     tens of likes per second per partition it rarely finds a second one,
//     and the sequence costs about one Paxos round per like.
//   - n >= 1: the rows of log partitions p with the same p % n are rows of
//     one Cassandra partition (outbox_seqs, (grp, partition)). A conditional
//     batch on one partition is one Paxos round, atomic and isolated, so one
//     transaction moves the heads of every log partition a batch touches,
//     each conditioned on its own head and issued exactly as before: the
//     outbox argument is per row and unchanged. One appender per group folds
//     the events of all its partitions (and of the cell-change feed, which
//     lives in a group too), so the sequence's share of Paxos per like is one
//     over the batch size. The price: appends of one group serialize on one
//     Paxos partition, and several processes of a region contend there (a
//     lost condition fails the whole batch, which re-reads and retries);
//     more groups spread that.
//
// Every statement below takes the row's key arguments (seqKey) right after
// its SET values, so one code path serves both layouts.
type seqStmts struct {
	grouped  bool
	sel      string // SELECT head, last_time, issued, inflight WHERE key
	selGroup string // grouped only: every row of a group (partition first)
	create   string // INSERT head, last_time, inflight, key… IF NOT EXISTS (issued 0)
	append   string // SET head, last_time, inflight WHERE key IF head = ? AND issued = ?
	issue    string // SET issued WHERE key IF head = ? AND issued = ?
	issueNew string // INSERT issued, key… IF NOT EXISTS (head 0)
	any      string // is there any sequence row (an append ever happened)?
	put      string // Regroup: INSERT head, last_time, issued, inflight, key… IF NOT EXISTS
	mark     string // Regroup: SET issued, inflight WHERE key IF head = ? AND issued = ?
	revive   string // Regroup: SET head, last_time, issued, inflight null WHERE key IF inflight = ?
}

func newSeqStmts(ks string, grouped bool) seqStmts {
	table, where, cols, marks := "outbox_seq", "partition = ?", "partition", "?"
	if grouped {
		table, where, cols, marks = "outbox_seqs", "grp = ? AND partition = ?", "grp, partition", "?, ?"
	}
	r := strings.NewReplacer("KS.T", ks+"."+table, "WHERE_KEY", where, "KEY_COLS", cols, "KEY_MARKS", marks)
	q := func(s string) string { return r.Replace(s) }
	st := seqStmts{
		grouped:  grouped,
		sel:      q(`SELECT head, last_time, issued, inflight FROM KS.T WHERE WHERE_KEY`),
		create:   q(`INSERT INTO KS.T (head, last_time, issued, inflight, KEY_COLS) VALUES (?, ?, 0, ?, KEY_MARKS) IF NOT EXISTS`),
		append:   q(`UPDATE KS.T SET head = ?, last_time = ?, inflight = ? WHERE WHERE_KEY IF head = ? AND issued = ?`),
		issue:    q(`UPDATE KS.T SET issued = ? WHERE WHERE_KEY IF head = ? AND issued = ?`),
		issueNew: q(`INSERT INTO KS.T (head, last_time, issued, KEY_COLS) VALUES (0, 0, ?, KEY_MARKS) IF NOT EXISTS`),
		any:      q(`SELECT partition FROM KS.T LIMIT 1`),
		put:      q(`INSERT INTO KS.T (head, last_time, issued, inflight, KEY_COLS) VALUES (?, ?, ?, ?, KEY_MARKS) IF NOT EXISTS`),
		mark:     q(`UPDATE KS.T SET issued = ?, inflight = ? WHERE WHERE_KEY IF head = ? AND issued = ?`),
		revive:   q(`UPDATE KS.T SET head = ?, last_time = ?, issued = ?, inflight = null WHERE WHERE_KEY IF inflight = ?`),
	}
	if grouped {
		st.selGroup = q(`SELECT partition, head, last_time, issued, inflight FROM KS.T WHERE grp = ?`)
	}
	return st
}

// useSequence fixes the layout read from (or written to) the meta row.
func (s *Store) useSequence(groups int) error {
	if groups < 0 || groups > s.opts.Partitions {
		return fmt.Errorf("cassandra: keyspace %s: meta.seq_groups is %d, outside [0, %d]", s.opts.Keyspace, groups, s.opts.Partitions)
	}
	s.seqGroups = groups
	s.sq = newSeqStmts(s.opts.Keyspace, groups > 0)
	return nil
}

// seqGroup is the appender (and, grouped, the Cassandra partition) of a log
// partition's sequence row.
func (s *Store) seqGroup(part uint32) uint32 {
	if s.seqGroups == 0 {
		return part
	}
	return part % uint32(s.seqGroups)
}

// seqArgs is vals, then the key of part's sequence row, then conds: the
// argument order of every seqStmts statement.
func (s *Store) seqArgs(part uint32, vals []any, conds ...any) []any {
	args := append([]any(nil), vals...)
	if s.seqGroups > 0 {
		args = append(args, int(s.seqGroup(part)))
	}
	args = append(args, int(part))
	return append(args, conds...)
}

// seqAppendArgs are the arguments of the transaction that moves part's row
// from seq to head (with slots' blob and event time t): an update of an
// existing row conditioned on its head and issued, or the row's creation.
func (s *Store) seqAppendArgs(part uint32, seq seqRow, head uint64, t int64, blob []byte) (string, []any) {
	if seq.exists {
		return s.sq.append, s.seqArgs(part, []any{int64(head), t, blob}, int64(seq.head), seq.issued)
	}
	return s.sq.create, s.seqArgs(part, []any{int64(head), t, blob})
}

// readSeq reads one log partition's sequence row (serial: at the serial
// consistency, completing any transaction half done on it).
func (s *Store) readSeq(ctx context.Context, part uint32, serial bool) (seqRow, error) {
	q := s.read
	if serial {
		q = s.serial
	}
	var head, lastTime, issued int64
	var inflight []byte
	err := q(ctx, s.sq.sel, s.seqArgs(part, nil)...).Scan(&head, &lastTime, &issued, &inflight)
	if errors.Is(err, gocql.ErrNotFound) {
		return seqRow{}, nil
	}
	if err != nil {
		return seqRow{}, err
	}
	return decodeSeq(part, head, lastTime, issued, inflight)
}

func decodeSeq(part uint32, head, lastTime, issued int64, inflight []byte) (seqRow, error) {
	r := seqRow{exists: true, head: uint64(head), lastTime: lastTime, issued: issued}
	if bytes.Equal(inflight, movedMarker) {
		return r, fmt.Errorf("%w (log partition %d)", ErrSequenceMoved, part)
	}
	var err error
	if r.inflight, err = decodeInflight(part, inflight); err != nil {
		return r, wrapCorrupt(fmt.Sprintf("inflight of log partition %d", part), err)
	}
	return r, nil
}

// readSeqs reads the sequence rows of parts (all of one group) at the serial
// consistency: one read of the group's partition when grouped and more than
// one row is wanted, else one read per row. A row never written has exists
// false.
func (s *Store) readSeqs(ctx context.Context, parts []uint32) (map[uint32]seqRow, error) {
	out := make(map[uint32]seqRow, len(parts))
	if !s.sq.grouped || len(parts) == 1 {
		for _, p := range parts {
			r, err := s.readSeq(ctx, p, true)
			if err != nil {
				return nil, err
			}
			out[p] = r
		}
		return out, nil
	}
	want := make(map[uint32]bool, len(parts))
	for _, p := range parts {
		want[p] = true
		out[p] = seqRow{}
	}
	it := s.serial(ctx, s.sq.selGroup, int(s.seqGroup(parts[0]))).PageSize(5000).Iter()
	var part int
	var head, lastTime, issued int64
	var inflight []byte
	for it.Scan(&part, &head, &lastTime, &issued, &inflight) {
		p := uint32(part)
		if !want[p] {
			continue
		}
		r, err := decodeSeq(p, head, lastTime, issued, inflight)
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		out[p] = r
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// movedMarker is the inflight blob of a sequence row whose partition moved to
// another layout (Regroup). It is not an inflight encoding (blobV1), so a
// release that predates Regroup fails to decode it and refuses the row: no
// process still on the old layout can append or read there.
var movedMarker = []byte{0xfe, 'm', 'o', 'v', 'e', 'd'}

// ErrSequenceMoved is returned for a log partition whose sequence row was
// moved to another layout (likectl migrate --sequence-groups) after this
// store opened: every process of the region must be restarted.
var ErrSequenceMoved = errors.New("cassandra: the log's sequence rows moved to another layout (likectl migrate --sequence-groups): restart this process")

// Regroup moves keyspace ks's sequence rows to the layout of groups groups
// (1..partitions; 0 is refused: the per-partition table is only what older
// keyspaces keep) and records it in meta.seq_groups. Run it with the
// region's processes stopped: a process still running on the old layout
// fails closed (ErrSequenceMoved, or a decode error on an older release) on
// every partition moved, never issuing a position twice. Idempotent and safe
// to repeat after a failure at any point; progress reports each step.
func Regroup(ctx context.Context, session *gocql.Session, ks string, groups int, progress func(string)) error {
	if !ValidKeyspace(ks) {
		return fmt.Errorf("cassandra: invalid keyspace name %q", ks)
	}
	if err := checkSchema(ctx, session, ks); err != nil {
		return err
	}
	var region string
	var parts int64
	var old *int
	err := session.Query(fmt.Sprintf(`SELECT region, partitions, seq_groups FROM %s.meta WHERE name = 'store'`, ks)).
		WithContext(ctx).Consistency(gocql.Quorum).Scan(&region, &parts, &old)
	if errors.Is(err, gocql.ErrNotFound) {
		return fmt.Errorf("cassandra: keyspace %s has no store row yet: a region creates it on its first start (likesd --cassandra-sequence-groups chooses its layout then)", ks)
	}
	if err != nil {
		return fmt.Errorf("cassandra: read %s.meta: %w", ks, err)
	}
	from := 0
	if old != nil {
		from = *old
	}
	if groups < 1 || groups > int(parts) {
		return fmt.Errorf("cassandra: sequence groups must be in [1, %d] (the keyspace's partitions), got %d", parts, groups)
	}
	if from == groups {
		progress(fmt.Sprintf("%s: already %d sequence group(s)", ks, groups))
		return nil
	}
	mk := func(g int) (*Store, error) {
		s := &Store{
			opts: Options{Session: session, Keyspace: ks, Region: region, Partitions: int(parts), Consistency: gocql.Quorum,
				Serial: gocql.Serial, MaxAttempts: 64, OnError: func(error) {}},
			s: session, q: newStmts(ks),
		}
		return s, s.useSequence(g)
	}
	src, err := mk(from)
	if err != nil {
		return err
	}
	dst, err := mk(groups)
	if err != nil {
		return err
	}
	all := make([]uint32, 0, parts+1)
	for p := range uint32(parts) {
		all = append(all, p)
	}
	all = append(all, feedPart)
	moved := 0
	for _, p := range all {
		if from > 0 && src.seqGroup(p) == dst.seqGroup(p) {
			continue // the same row in both layouts
		}
		if err := regroupPartition(ctx, src, dst, p); err != nil {
			return fmt.Errorf("cassandra: regroup log partition %d: %w", p, err)
		}
		moved++
	}
	cond, args := "null", []any{groups}
	if old != nil {
		cond, args = "?", append(args, from)
	}
	applied, err := session.Query(fmt.Sprintf(`UPDATE %s.meta SET seq_groups = ? WHERE name = 'store' IF seq_groups = %s`, ks, cond), args...).
		WithContext(ctx).SerialConsistency(gocql.Serial).MapScanCAS(map[string]any{})
	if err != nil {
		return fmt.Errorf("cassandra: record %s.meta.seq_groups: %w", ks, err)
	}
	if !applied {
		return fmt.Errorf("cassandra: %s.meta.seq_groups changed while the rows moved (another likectl migrate --sequence-groups?): run it again", ks)
	}
	progress(fmt.Sprintf("%s: %d sequence row(s) moved from %d to %d group(s)", ks, moved, from, groups))
	return nil
}

// markIssued is the issued time a moved row keeps: -issued-1, never a time
// a live row holds, and its own inverse.
func markIssued(issued int64) int64 { return -issued - 1 }

// retryLWT runs step until it reports done, backing off between attempts,
// at most attempts times; a step's retryable error is one more attempt.
func retryLWT(ctx context.Context, attempts int, what string, step func() (bool, error)) error {
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
		done, err := step()
		if err != nil && !retryable(err) {
			return err
		}
		if err == nil && done {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrContention, what)
}

// regroupPartition moves one partition's sequence row from src's layout to
// dst's: the old row's last slots are written out, then the row is marked
// moved by a transaction conditioned on its head (an append that got there
// first makes it retry), then the new row takes its head, last time and
// issued time.
func regroupPartition(ctx context.Context, src, dst *Store, p uint32) error {
	var head, lastTime, issued int64
	err := retryLWT(ctx, src.opts.MaxAttempts, "its old row kept changing", func() (bool, error) {
		var inflight []byte
		err := src.serial(ctx, src.sq.sel, src.seqArgs(p, nil)...).Scan(&head, &lastTime, &issued, &inflight)
		switch {
		case errors.Is(err, gocql.ErrNotFound):
			head, lastTime, issued = 0, 0, 0
			return src.cas(ctx, src.sq.put, src.seqArgs(p, []any{int64(0), int64(0), markIssued(0), movedMarker})...).MapScanCAS(map[string]any{})
		case err != nil:
			return false, err
		case bytes.Equal(inflight, movedMarker):
			issued = markIssued(issued) // an earlier run marked it
			return true, nil
		}
		seq, err := decodeSeq(p, head, lastTime, issued, inflight)
		if err != nil {
			return false, err
		}
		if err := src.finishSlots(ctx, p, seq.inflight); err != nil {
			return false, err
		}
		// issued changes too, so that an append conditioned on the row as a
		// process remembers it (head and issued) fails and reads the marker.
		return src.cas(ctx, src.sq.mark, src.seqArgs(p, []any{markIssued(issued), movedMarker}, head, issued)...).MapScanCAS(map[string]any{})
	})
	if err != nil {
		return err
	}
	// The new row: created, or a marker a layout before that one left,
	// replaced; a row already holding this head is an earlier run's.
	return retryLWT(ctx, dst.opts.MaxAttempts, "its new row kept changing", func() (bool, error) {
		var h, lt, is int64
		var inflight []byte
		err := dst.serial(ctx, dst.sq.sel, dst.seqArgs(p, nil)...).Scan(&h, &lt, &is, &inflight)
		switch {
		case errors.Is(err, gocql.ErrNotFound):
			return dst.cas(ctx, dst.sq.put, dst.seqArgs(p, []any{head, lastTime, issued, []byte(nil)})...).MapScanCAS(map[string]any{})
		case err != nil:
			return false, err
		case bytes.Equal(inflight, movedMarker):
			return dst.cas(ctx, dst.sq.revive, dst.seqArgs(p, []any{head, lastTime, issued}, movedMarker)...).MapScanCAS(map[string]any{})
		case h == head && is >= issued:
			return true, nil
		default:
			return false, fmt.Errorf("its new row already holds head %d, not %d: it was written by a process on the new layout before the move finished", h, head)
		}
	})
}
