package cassandra

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

// DefaultReplication is the keyspace replication Migrate uses when given none:
// one copy, for a single test node. Production passes its own, e.g.
// {'class': 'NetworkTopologyStrategy', 'dc1': 3}.
const DefaultReplication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"

// Step is one schema migration: idempotent statements (CREATE … IF NOT EXISTS)
// applied in order, then recorded in schema_version.
type Step struct {
	Version     int
	Description string
	Statements  []string // "%[1]s" is the keyspace
}

// Steps is the schema history. A step, once released, is never edited: a
// change is a new step.
var Steps = []Step{
	{1, "edges, idempotency records, user index, erasure jobs, store meta", []string{
		// meta: the region and partition count the keyspace was created for.
		`CREATE TABLE IF NOT EXISTS %[1]s.meta (
			name text PRIMARY KEY,
			region text,
			partitions int,
			created_ms bigint)`,
		// edges: one row per (item, user), partitioned by (item, bucket) so a
		// viral item's writes spread over 64 partitions. Every write is a
		// lightweight transaction conditioned on eseq (the edge's event
		// counter); pending carries the event between that transaction and its
		// outbox append; branches are the edge's failover branch records, in
		// the same row so they change atomically with the edge.
		`CREATE TABLE IF NOT EXISTS %[1]s.edges (
			item text,
			bucket int,
			user text,
			state tinyint,
			epoch bigint,
			op bigint,
			updated_at bigint,
			eseq bigint,
			pending blob,
			branches blob,
			last_nonce bigint,
			relayed_eseq bigint,
			relayed_pos bigint,
			relayed_time bigint,
			PRIMARY KEY ((item, bucket), user))`,
		// idem: (user, key) → the stored answer; rows carry a Cassandra TTL
		// (garbage collection only: replay is decided on expires_at).
		`CREATE TABLE IF NOT EXISTS %[1]s.idem (
			user text,
			key text,
			fingerprint text,
			liked boolean,
			changed boolean,
			expires_at bigint,
			PRIMARY KEY ((user), key))`,
		`CREATE TABLE IF NOT EXISTS %[1]s.user_items (
			user text,
			item text,
			PRIMARY KEY ((user), item))`,
		// erasures: a row is both the job and the user's erasure marker.
		`CREATE TABLE IF NOT EXISTS %[1]s.erasures (
			user text PRIMARY KEY,
			state text,
			edges int,
			unliked int,
			started_at bigint,
			finished_at bigint,
			cursor text)`,
	}},
	{2, "committed log: outbox, per-partition sequence, relay intents", []string{
		// outbox: the committed log, partition by (log partition, pos/1024).
		`CREATE TABLE IF NOT EXISTS %[1]s.outbox (
			partition int,
			chunk bigint,
			pos bigint,
			event blob,
			PRIMARY KEY ((partition, chunk), pos))`,
		// outbox_seq: per log partition, the head position, the event time of
		// the last append, the highest CompleteThrough handed to a reader, and
		// the last append's slots (until the next append replaces them).
		`CREATE TABLE IF NOT EXISTS %[1]s.outbox_seq (
			partition int PRIMARY KEY,
			head bigint,
			last_time bigint,
			issued bigint,
			inflight blob)`,
		// relay_intents: written before an edge transaction that leaves a
		// pending event, deleted once it is relayed; the sweeper finishes the
		// relays of writers that died in between. Partitioned by minute so a
		// sweep reads only the recent buckets and no partition collects
		// more than a minute of delete tombstones; a resurrected intent is
		// harmless (the sweeper re-checks its edge), hence the short grace.
		`CREATE TABLE IF NOT EXISTS %[1]s.relay_intents (
			partition int,
			minute bigint,
			item text,
			user text,
			eseq bigint,
			nonce bigint,
			created_at bigint,
			PRIMARY KEY ((partition, minute), item, user, eseq, nonce))
			WITH gc_grace_seconds = 3600`,
		// sweep_cursors: per log partition, the first minute bucket of
		// relay_intents not yet known to be clean.
		`CREATE TABLE IF NOT EXISTS %[1]s.sweep_cursors (
			partition int PRIMARY KEY,
			minute bigint)`,
	}},
	{3, "cells with dedupe state, consumer positions, peer watermarks", []string{
		// cells: partitioned by item. kind 0 rows are cells (item, region,
		// shard) with ORDINARY columns p, n, hwm, watermark (never counters:
		// a counter increment is not idempotent and cannot carry a chosen
		// write timestamp); kind 1 rows are the aggregator's dedupe state for
		// (item, user), in the same partition so one single-partition batch
		// commits a cell and its edges' dedupe state together (doc.go, "Cells").
		`CREATE TABLE IF NOT EXISTS %[1]s.cells (
			item text,
			kind tinyint,
			region text,
			shard int,
			user text,
			p bigint,
			n bigint,
			hwm bigint,
			watermark bigint,
			w_epoch bigint,
			w_op bigint,
			c_epoch bigint,
			c_op bigint,
			PRIMARY KEY ((item), kind, region, shard, user))`,
		`CREATE TABLE IF NOT EXISTS %[1]s.positions (
			partition int PRIMARY KEY,
			pos bigint,
			watermark bigint)`,
		`CREATE TABLE IF NOT EXISTS %[1]s.watermarks (
			region text PRIMARY KEY,
			watermark bigint)`,
	}},
	{4, "edge relay records written with fencing timestamps (no lightweight transaction to clear a pending event)", []string{
		// edge_relays: per edge, the last of its events that reached the
		// outbox (event sequence, attempt nonce, position, event time). Plain
		// writes only, each USING TIMESTAMP = its eseq, so the record of the
		// highest event wins whatever order relays land in, and two writes of
		// one event (same contents) agree. Never written by a lightweight
		// transaction, never deleted: no Paxos timestamp or tombstone can mix
		// with the logical ones.
		`CREATE TABLE IF NOT EXISTS %[1]s.edge_relays (
			item text,
			bucket int,
			user text,
			eseq bigint,
			nonce bigint,
			pos bigint,
			event_time bigint,
			PRIMARY KEY ((item, bucket), user))`,
	}},
	{5, "replication: peers' cursors, erasure marks of other regions, re-opened erasures", []string{
		// remote_cursors: per sender region, how far its streams are applied
		// here: stream p >= 0 is log partition p, stream -1 the cell-change
		// feed. Plain writes USING TIMESTAMP pos, so a cursor never moves
		// back whatever order writes land in; never deleted.
		`CREATE TABLE IF NOT EXISTS %[1]s.remote_cursors (
			region text,
			stream int,
			pos bigint,
			PRIMARY KEY ((region), stream))`,
		// erasures.remote: the row marks another region's erasure of the user
		// (edge.ErasureJob.Remote); erasures.late: late edges that re-opened
		// this region's own job (edge.ReopenLate).
		`ALTER TABLE %[1]s.erasures ADD IF NOT EXISTS (remote boolean, late int)`,
	}},
	{6, "retention: truncation points of the log and the cell-change feed, dedupe event times", []string{
		// log_floors: per outbox partition (a log partition, or the
		// cell-change feed's), the truncation point: reads after a position
		// below through fail with ErrTruncated, and its rows are deleted
		// (retention.go); last_time is the event time at through; deleted
		// is how far the deletion of rows has completed (at most through).
		// Plain writes USING TIMESTAMP through (deleted: USING TIMESTAMP
		// deleted), so neither moves back whatever order writes land in;
		// never deleted.
		`CREATE TABLE IF NOT EXISTS %[1]s.log_floors (
			partition int PRIMARY KEY,
			through bigint,
			last_time bigint,
			deleted bigint)`,
		// cells.d_at: on a dedupe row (kind 1), the event time of the newest
		// event it applied (pipeline.Applied.At), what pruning reads.
		`ALTER TABLE %[1]s.cells ADD IF NOT EXISTS d_at bigint`,
	}},
	{7, "rebuild from peers: pending rebuilds, the keyspace's identity", []string{
		// rebuilds: one row per peer a rebuild (--bootstrap-from-peers)
		// still waits for: until that peer's rebuild snapshot has finished,
		// its pushes and every client write are refused (rebuild.go).
		// Written by MarkRebuild, deleted when the peer's snapshot
		// finished; plain writes, so several processes of the region agree
		// by reading it.
		`CREATE TABLE IF NOT EXISTS %[1]s.rebuilds (
			peer text PRIMARY KEY,
			marked_ms bigint)`,
		// meta.cluster, meta.data_set: the keyspace's identity (the region's
		// data folder identity on Pebble): the cluster id and the data set
		// registered for the region in etcd, written once by a lightweight
		// transaction on the "store" row (which Open's transaction created).
		`ALTER TABLE %[1]s.meta ADD IF NOT EXISTS (cluster text, data_set text)`,
	}},
	{8, "erasure starts announced after their row (snapshots see every mark their heads cover)", []string{
		// erasures.announced: false while a job starting here has its row
		// written but its KindErasing event not yet appended; a later
		// PutErasure of that job appends it (null, as every row before
		// schema 8 has: announced before the row was written).
		`ALTER TABLE %[1]s.erasures ADD IF NOT EXISTS announced boolean`,
	}},
	{9, "the keyspace's position base (a rebuilt data set's positions in the Kafka topic)", []string{
		// meta.position_base: added to every position of the Kafka topic
		// the aggregators read (kafkalog's Config.PositionBase), fixed by
		// the identity's transaction; null (0) for an original data set.
		`ALTER TABLE %[1]s.meta ADD IF NOT EXISTS position_base bigint`,
	}},
	{10, "sequence rows grouped in one partition (one transaction issues positions to several log partitions)", []string{
		// outbox_seqs: the sequence rows of a keyspace created from this
		// version on (meta.seq_groups >= 1): log partition p's row is
		// (p % seq_groups, p), so one conditional batch on a group moves
		// the heads of every partition it touches in one Paxos round
		// (sequence.go). Columns as outbox_seq's, which keyspaces created
		// before keep using (meta.seq_groups null).
		`CREATE TABLE IF NOT EXISTS %[1]s.outbox_seqs (
			grp int,
			partition int,
			head bigint,
			last_time bigint,
			issued bigint,
			inflight blob,
			PRIMARY KEY ((grp), partition))`,
		// meta.seq_groups: written once, with the "store" row by Open's
		// transaction; null on a keyspace whose store row is older.
		`ALTER TABLE %[1]s.meta ADD IF NOT EXISTS seq_groups int`,
	}},
}

// SchemaVersion is the version Migrate brings a keyspace to.
var SchemaVersion = Steps[len(Steps)-1].Version

var keyspaceRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,47}$`)

// ValidKeyspace reports whether name is a keyspace name this package accepts
// (unquoted CQL identifier, at most 48 characters).
func ValidKeyspace(name string) bool { return keyspaceRE.MatchString(name) }

// Migrate creates keyspace (with the given replication map, DefaultReplication
// when empty) if it does not exist and applies every step of Steps not yet
// recorded in its schema_version table, in order. It is idempotent and safe to
// re-run after a failure at any point: every statement is IF NOT EXISTS, and a
// step is recorded only after all of its statements succeeded. It returns the
// versions it applied now.
func Migrate(ctx context.Context, session *gocql.Session, keyspace, replication string) ([]int, error) {
	if !ValidKeyspace(keyspace) {
		return nil, fmt.Errorf("cassandra: invalid keyspace name %q", keyspace)
	}
	if replication == "" {
		replication = DefaultReplication
	}
	replication = strings.TrimSpace(replication)
	if !strings.HasPrefix(replication, "{") || !strings.HasSuffix(replication, "}") || strings.ContainsAny(replication, ";") {
		return nil, fmt.Errorf("cassandra: replication must be a CQL map literal like %s", DefaultReplication)
	}
	// Every statement is idempotent, so one that timed out (schema changes
	// are slow on a loaded node, and may still complete after the timeout) is
	// retried, a bounded number of times.
	exec := func(stmt string) error {
		var err error
		for attempt := range 6 {
			if attempt > 0 {
				if berr := backoff(ctx, attempt+4); berr != nil {
					return errors.Join(err, berr)
				}
				_ = session.AwaitSchemaAgreement(ctx)
			}
			if err = session.Query(stmt).WithContext(ctx).Exec(); err == nil || !retryable(err) {
				return err
			}
		}
		return err
	}
	if err := exec(fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = %s", keyspace, replication)); err != nil {
		return nil, fmt.Errorf("cassandra: create keyspace %s: %w", keyspace, err)
	}
	if err := exec(fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.schema_version (
		version int PRIMARY KEY,
		description text,
		applied_at timestamp)`, keyspace)); err != nil {
		return nil, fmt.Errorf("cassandra: create %s.schema_version: %w", keyspace, err)
	}
	done, err := AppliedVersions(ctx, session, keyspace)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, st := range Steps {
		if done[st.Version] {
			continue
		}
		for _, stmt := range st.Statements {
			if err := exec(fmt.Sprintf(stmt, keyspace)); err != nil {
				return applied, fmt.Errorf("cassandra: migration %d (%s): %w", st.Version, st.Description, err)
			}
		}
		// IF NOT EXISTS: two migrators racing (or a retry) record a step once.
		var err error
		for attempt := range 6 {
			if attempt > 0 {
				if berr := backoff(ctx, attempt+4); berr != nil {
					break
				}
			}
			_, err = session.Query(fmt.Sprintf(
				"INSERT INTO %s.schema_version (version, description, applied_at) VALUES (?, ?, ?) IF NOT EXISTS", keyspace),
				st.Version, st.Description, time.Now().UTC()).WithContext(ctx).
				SerialConsistency(gocql.Serial).MapScanCAS(map[string]any{})
			if err == nil || !retryable(err) {
				break
			}
		}
		if err != nil {
			return applied, fmt.Errorf("cassandra: record migration %d: %w", st.Version, err)
		}
		applied = append(applied, st.Version)
	}
	if err := session.AwaitSchemaAgreement(ctx); err != nil {
		return applied, fmt.Errorf("cassandra: schema agreement: %w", err)
	}
	return applied, nil
}

// AppliedVersions reads keyspace's schema_version table.
func AppliedVersions(ctx context.Context, session *gocql.Session, keyspace string) (map[int]bool, error) {
	if !ValidKeyspace(keyspace) {
		return nil, fmt.Errorf("cassandra: invalid keyspace name %q", keyspace)
	}
	it := session.Query(fmt.Sprintf("SELECT version FROM %s.schema_version", keyspace)).
		WithContext(ctx).Consistency(gocql.Quorum).Iter()
	done := map[int]bool{}
	var v int
	for it.Scan(&v) {
		done[v] = true
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("cassandra: read %s.schema_version: %w", keyspace, err)
	}
	return done, nil
}

// checkSchema fails unless keyspace has every migration step applied.
func checkSchema(ctx context.Context, session *gocql.Session, keyspace string) error {
	done, err := AppliedVersions(ctx, session, keyspace)
	if err != nil {
		return err
	}
	for _, st := range Steps {
		if !done[st.Version] {
			return fmt.Errorf("cassandra: keyspace %s lacks schema version %d (%s): run likectl migrate", keyspace, st.Version, st.Description)
		}
	}
	return nil
}

// errNoSession is returned when Options.Session is missing.
var errNoSession = errors.New("cassandra: Options.Session is required")
