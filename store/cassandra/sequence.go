package cassandra

import (
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
