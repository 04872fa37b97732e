// Package cassandra is the production storage backend of one region on Apache
// Cassandra (gocql): edges, idempotency records, the user index, erasure jobs,
// the committed log (an outbox), cells with the aggregators' dedupe state, and
// consumer positions. It implements edge.Store, edge.JobStore, pipeline.Log,
// pipeline.CellStore, counts.CountStore, replica.Source, replica.Sink,
// replica.SnapshotSource, replica.RebuildSource, replica.SnapshotSink and
// replica.RebuildSink with
// the semantics of the embedded store (store/pebblestore), and passes the same
// contract suites (edge/edgetest, including its replica contract, and
// pipeline/pipelinetest). Migrate creates and upgrades the
// schema; MigrateCommand is `likectl migrate`.
//
// A region owns one keyspace. Every table name is qualified with it, so one
// session serves any number of stores. Ordinary reads and writes use
// LOCAL_QUORUM, lightweight transactions (LWTs) and the reads that decide them
// use SERIAL (Options; LOCAL_SERIAL keeps Paxos inside one datacenter).
//
// # Keyspace layouts and consistency
//
// Supported: (1) one keyspace per region in one Cassandra cluster (what the
// tests run: likes_us, likes_eu, likes_ap on one server), and (2) one region
// per Cassandra datacenter, its keyspace replicated in that datacenter only
// (NetworkTopologyStrategy {'dc-us': 3}), with --cassandra-dc naming it, LOCAL_QUORUM
// and LOCAL_SERIAL. Not supported: one keyspace written by two regions (the
// meta row names the keyspace's region and Open refuses another), or a
// region's keyspace written from two datacenters.
//
// Why the local levels are safe: a keyspace has exactly one writer region,
// whose processes all reach it through one datacenter, so every read and
// transaction that must see another's (the edge LWT and the read that decides
// it, the outbox sequence, the cell fences) meets it in that datacenter's
// quorum; LOCAL_SERIAL serializes them there. Regions never share rows: what
// one region wrote reaches another only by replication (the log and cells,
// applied by the receiver's own store), and who may write a user's edges is
// decided by the pins in etcd, not by Cassandra. A keyspace replicated to other
// datacenters for disaster recovery is fine to read there, but a region must
// not fail over onto such a copy while its owner may still write: that is the
// pins' job (a region lost with its datacenter is rebuilt from its peers,
// likesd run --bootstrap-from-peers).
//
// # Schema (Migrate, versions recorded in schema_version)
//
//	edges        ((item, bucket), user)  state, epoch, op, updated_at, eseq, pending, branches,
//	                                     last_nonce, relayed_eseq, relayed_pos, relayed_time (before schema 4)
//	edge_relays  ((item, bucket), user)  eseq, nonce, pos, event_time   USING TIMESTAMP eseq (schema 4)
//	idem         ((user), key)           fingerprint, liked, changed, expires_at   USING TTL
//	user_items   ((user), item)
//	erasures     ((user))                the job, and the user's erasure marker; remote, late (schema 5);
//	                                     announced (schema 8: false while a start's event is owed)
//	outbox       ((partition, chunk), pos)  event          chunk = pos / 1024; partition 2^30
//	                                     is the cell-change feed (replication)
//	outbox_seqs  ((grp), partition)      head, last_time, issued, inflight: log partition p's
//	                                     sequence row in group p % meta.seq_groups (schema 10)
//	outbox_seq   ((partition))           the same, one partition each: keyspaces whose store
//	                                     row predates schema 10 (meta.seq_groups null)
//	relay_intents ((partition, minute), item, user, eseq, nonce)  created_at
//	sweep_cursors ((partition))          minute: first intent bucket not known clean
//	cells        ((item), kind, region, shard, user)
//	             kind 0, user '': a cell, ORDINARY columns p, n, hwm, watermark
//	             kind 1: dedupe state of edge (item, user): w_epoch, w_op, c_epoch, c_op,
//	             d_at (schema 6: the newest applied event's time)
//	positions    ((partition))           pos, watermark
//	watermarks   ((region))              peers' watermarks (replication), USING TIMESTAMP watermark
//	remote_cursors ((region), stream)    pos: how far a peer's log partition (stream >= 0) or
//	                                     cell feed (stream -1) is applied, USING TIMESTAMP pos (schema 5)
//	meta         ((name))                region, partition count, creation time (fixed);
//	                                     cluster, data_set: the keyspace's identity (schema 7);
//	                                     position_base (schema 9); seq_groups (schema 10, fixed)
//	log_floors   ((partition))           through, last_time USING TIMESTAMP through; deleted
//	                                     USING TIMESTAMP deleted: truncation points (schema 6)
//	rebuilds     ((peer))                marked_ms: a rebuild from that peer is pending (schema 7)
//
// Cells are never counter columns: a counter increment is not idempotent (a
// retried one applies twice) and cannot carry a chosen write timestamp.
//
// # Write path and outbox order
//
// A Cassandra LWT is confined to one partition, so the edge flip and its log
// event cannot be one transaction across the edges and outbox tables. Instead
// the edge row itself carries its event:
//
//  1. Apply reads the edge with its relay record, the idempotency record and
//     the erasure marker (all LOCAL_QUORUM, in parallel), and calls
//     edge.Decide. If the edge row still holds a pending
//     event of an earlier write, that event is relayed first (step 3) and the
//     read repeated. The record and the marker are plain LOCAL_QUORUM writes,
//     never LWTs, so a LOCAL_QUORUM read sees every one that completed (a
//     SERIAL read would add nothing); the record of a write still in flight
//     is covered by the edge's pending column. The edge itself is read at
//     LOCAL_QUORUM first: that sees every edge LWT that completed, and a
//     decision taken on a stale row (an LWT still in flight, not yet visible)
//     fails its condition in step 2, because Paxos finishes the in-flight
//     proposal before it evaluates ours. After a lost condition or an unknown
//     outcome the retry reads the edge at SERIAL, which completes whatever is
//     in flight, so the loop makes progress. (Difference from a SERIAL first
//     read: a no-op answer, which writes nothing, may be given while an
//     unacknowledged write of another request is still in flight; that write
//     was never acknowledged, so it is concurrent with the no-op.)
//  2. One LWT on the edge row writes the new version (or, for a no-op that
//     leaves a record, only the event) together with the event in the pending
//     column and eseq+1 (eseq counts the edge's events): INSERT … IF NOT EXISTS
//     for a new edge, UPDATE … IF eseq = ? AND epoch = ? AND op = ? otherwise.
//     Losing the condition (another writer got there) restarts at step 1, at
//     most Options.MaxAttempts times with jittered backoff. The branch record
//     of a first touch in an epoch is a column of the same row, so it changes
//     in the same transaction. A relay intent row is written just before.
//  3. The relay: the event's effects outside the row, both idempotent (the
//     idempotency record it carries, USING TTL; the user index row), then the
//     append to the outbox, which assigns the position, then the relay record
//     (edge_relays) is written and the intent deleted (in the background, a
//     share of a batch per intent bucket: intents.go). The pending column is
//     never cleared: a pending event is relayed when the edge's relay record
//     has its eseq (or a later one), so clearing it needs no LWT. The record
//     is a plain write USING TIMESTAMP eseq: the record of a later event
//     always wins over a straggling write of an earlier one, and two writes
//     of one event carry the same contents (its position is assigned once).
//     The table is never written by an LWT nor deleted from, so logical and
//     Paxos timestamps never meet on one cell. Pending blobs are written in
//     format 2: a release from before schema 4 (which took a pending column
//     for not relayed) cannot decode them and refuses the edge rather than
//     appending its event twice, so a rolling upgrade stays exact.
//
// Appends to a log partition go through its sequence row: read it (SERIAL,
// or take the state this process's own last append left, see below), then
// LWT `SET head = head+k, last_time = t, inflight = <the k slots>
// IF head = ? AND issued = ?`; then the k outbox rows are written and the
// relay records written. Every position up to head is therefore either an
// outbox row or one of head's inflight slots, which any reader writes out
// itself (same event, same position), so positions become visible in order
// with no gaps and a tailing reader never finds one behind its cursor. Event
// times are max(now, last_time, issued+1), so they never decrease along a
// partition. One append goroutine per sequence group folds concurrent events
// into one transaction (group commit): the rows of a group's log partitions
// are rows of one Cassandra partition (sequence.go), so that transaction is
// one conditional batch (atomic, isolated, one Paxos round) with one
// statement per partition it touches, each conditioned on that row's own
// head and issued; everything below argues per row and holds unchanged. A
// keyspace created before schema 10 has one group per log partition (the
// outbox_seq table): the same code with one statement per transaction.
//
// Exactly once. Several relays of one pending event may run at once (the
// writer, a later Apply on the edge, the sweeper, other processes). An append
// takes the sequence row first, then reads its events' relay records
// (LOCAL_QUORUM; for a pending event of format 1, from an earlier release,
// the edge row too, where that release recorded its relays), then transacts
// on the head it took. A format-2 event is relayed only by releases that
// record it in edge_relays, and its edge's next event is written only once
// that record is, so the record alone says whether it was relayed. Inflight
// slots are replaced only after they were written and their relay records
// written (a completed LOCAL_QUORUM write, hence visible to a later
// LOCAL_QUORUM read; older releases cleared the edge's pending column with a
// completed LWT, equally visible). So an event appended before our sequence
// state is in the inflight slots we took, or its relay record shows it when we
// read it afterwards; an event appended after our
// sequence read moved the head, and our transaction fails and starts over. A
// pending event is never appended twice, and an edge's events reach the log in
// version order because a new one is written only once the last is relayed.
//
// Crashes (P1: a retry, a duplicate, a crash or a replay never changes what a
// count converges to):
//
//   - before the edge LWT: nothing happened; the retry decides afresh.
//   - after the edge LWT, before the relay finished: the flip and its event
//     are durable together in the edge row. The retry (same key) relays the
//     pending event first, which writes the idempotency record, and then
//     replays the recorded answer; any other Apply on the edge does the same;
//     the sweeper (Sweep, every SweepEvery) finishes it from the relay intents
//     otherwise. The event reaches the log exactly once, so the cell counts the
//     flip once.
//   - after the sequence LWT, before the outbox rows: readers and the next
//     append write the rows from the inflight slots.
//
// A caller that gives up (a client that hung up, a request deadline) does
// not stop an Apply: it runs detached from the caller's cancellation, bounded
// by Options.ApplyTimeout, so a committed edge transaction is relayed at
// once rather than by the sweeper later. Planned moves: the catch-up
// barrier's Heads answer (catchup.Fencer) first waits for the writes in
// flight and then calls FinishPending, which relays every pending event
// however young; so the heads the new owner waits for include every edge
// transaction this region committed under the old epoch, even one whose
// writer failed before its relay (the embedded store has no such state: its
// flip and event are one batch).
//
// Idempotency records are written after the edge LWT, from the event the edge
// row carries, and always before the relay record is written and before any
// later decision on that edge. A retry therefore never sees the new edge
// without the record (it finishes the relay first) and never re-executes the
// request. What this does not give, unlike the embedded store's single writer:
// the same key used at the same moment for different requests on different
// edges of one user (a client bug) may execute both, because the record lives
// in the user's partition, not the edge's. Same key, same request is exact.
//
// An LWT whose outcome is unknown (timeout) is settled by a SERIAL read of the
// row: each write attempt carries a random nonce in its pending event, and the
// row's pending (or last relayed) nonce says whether the write that happened
// was ours.
//
// Erasure. PutErasure is a plain LOCAL_QUORUM write of the job row, which is
// the erasure marker; every Apply that starts after it returns reads it and is
// refused. An Apply that read the marker just before it was written may commit
// its flip after the eraser listed the user's items, so after every relayed
// flip or retraction the relay re-reads the marker and, if the user is being
// erased, erases that edge itself (and purges the user's records again if the
// job already finished). The count sees +1 then −1. A job starting here is
// announced to the peers by a KindErasing event in the log, written after
// its row (announced = false, in the same write) and followed by
// announced = true; a PutErasure that finds announced = false appends the
// event again (a failure in between; a duplicate marks nothing more). Row
// before event is what snapshots need (see "Snapshots").
//
// # Cells, dedupe state and positions (pipeline.CellStore)
//
// A window's cells are in different partitions (one per item), so a window is
// not atomic. Commit orders its writes so a crash between any two is safe:
// first every fence is checked with LOCAL_QUORUM reads, which see every cell
// batch that completed (a stale window fails with ErrFenced having written
// nothing); then, per item, one single-partition batch (atomic and isolated)
// writes the item's cells together with the dedupe rows of its edges, so a
// cell and the dedupe state of the events it holds always commit together
// (the items' batches run in parallel, since any subset of them may be what a
// crash leaves); then dedupe rows without a cell; the position and watermark
// last, only after every batch succeeded. After a crash mid-window the
// aggregator replays from the old position, and its per-cell filter (skip
// events with Pos <= cell.HWM, skip cells with Through <= HWM) adds nothing to
// the cells already written and writes the rest. Dedupe rows being in the
// cell's batch answers DESIGN's open question for a log with duplicates (a
// Kafka relay republishing): dedupe state can never lag the fence.
//
// No lightweight transaction (since this release; earlier ones conditioned
// each batch on IF hwm = Expect): every write of a window through position T
// is stamped USING TIMESTAMP ownCellStamp(T) = 2^56 + T, so of two writes of
// one row the one of the longer log prefix wins, in any order of arrival.
// That is exact because of what a window writes and when it may write:
//
//   - A determined state. The log partition is one immutable sequence and the
//     fold is deterministic (pipeline: per-cell filter, per-edge dedupe), so
//     a cell row and a dedupe row written by a window through T hold the state
//     of that row after the log prefix through T, provided the window started
//     from a consistent base. Two writers (the live aggregator and a zombie:
//     a paused process, a node whose partitions moved) that both fold to T
//     write the same values; the one that folded further writes a later
//     state with a higher timestamp. A row a window does not write has no
//     event in it since the row's last write, so that write's state is still
//     current. (Watermark, the one column a window claims from the clock, not
//     the prefix: equal timestamps keep the larger value, which is still a
//     true claim for that prefix.)
//   - A consistent base, or no write. A window's base is what it read of the
//     cells and dedupe rows before folding; another writer's batch seen by
//     one of those reads but not another would be an inconsistent base. The
//     aggregator reads it with Base (pipeline.BaseReader): one read per item
//     of the item's partition, the cell and its edges' dedupe rows together
//     (a viral item's edges in reads of 100, each with the cell: reads that
//     disagree on its hwm fail the window with ErrFenced, and the
//     aggregator starts it again). Each batch is isolated within its item's partition,
//     so one read sees all of another writer's batch or none of it: the
//     base of an item is one state of its rows, the state after some log
//     prefix (the cell's hwm), and the fold from it is deterministic. The
//     fold of an item reads nothing of another item, so the items' reads
//     need not agree with each other. Such a window (Window.BaseRead) is
//     committed without the fence check (a window's cell changes with
//     every batch that changes its state, so equal hwms in an item's reads
//     mean one state). A window whose base came from separate Cells and
//     Applied reads is checked: LOCAL_QUORUM reads are
//     monotonic (blocking read repair), and the fence check runs after the
//     base reads: if any base read saw a batch of another writer that changed
//     one of this window's cells, the check sees that cell's new hwm and the
//     window fails with ErrFenced having written nothing. A batch that
//     changed only dedupe rows of edges whose events this window then skips
//     changed no cell, so skipping them is what applying them would do.
//   - The 2^56 era lifts every such timestamp above those the earlier
//     release's batches were stamped with (the Paxos ballot's time in
//     microseconds, about 2^50.6 today), so the first window of this release
//     supersedes them. The reverse (an earlier release writing after this
//     one) is not safe: its LWT would apply but lose to the higher timestamp.
//     A rolling upgrade of a region restarts each node once, on this release,
//     and never starts an earlier one again on that keyspace.
//
// Unlike the embedded store, a zombie whose fence check passed is not told it
// lost (its Commit succeeds; its writes are superseded or identical), and
// may move the partition's position back; the live aggregator's next fence
// check (the cell's hwm moved) or a replay (the per-cell filter) absorbs both.
// Dedupe rows share the item's partition: a viral item's partition grows by
// one small row per distinct liker (per region); at tens of millions of
// likers, dedupe state should move to (item, shard) partitions in a later
// migration. Retention deletes a dedupe row with its own write time as the
// delete's timestamp (retention.go), which under these timestamps still
// spares a row a later window rewrote.
//
// Count is SUM(p) − SUM(n) over the item's cell rows (one partition, kind 0
// only, every region). Watermarks: this region's is the min over its
// partitions' positions (a partition never committed counts as 0); peers' come
// from the watermarks table.
//
// # The log as a reader sees it (pipeline.Log)
//
// Head.CompleteThrough is max(last_time − 1, issued): every later event is
// stamped at or after last_time and after issued. So that an idle partition's
// watermark follows the clock, Read records issued = now with an LWT
// conditioned on the head and issued it read, at most once per IssueEvery.
//
// # Replication (replica.Source, replica.Sink)
//
// Source: Read is the outbox by position (the same log the aggregators
// read); OwnWatermark the min over the partitions' positions; CellChanges
// reads the cell-change feed, an outbox partition of its own (feedPart) that
// Commit appends one entry per cell to once the window's cells are written
// and before the position moves, and returns those cells' current states;
// never announced before it is written. A crash in between leaves a cell
// written but unannounced while the position is still behind it: the
// replaying window finds the cell ahead of it and rewrites it unchanged
// (pipeline's fold), so Commit announces it before that window's position
// and watermark move. Without that, the shipper sent the later watermark
// while a peer still held the cell's old state, and the peer's count claimed
// an asOf it did not have (found by the chaos suite: a node killed or paused
// between a window's cells and its feed). ScanCells (anti-entropy, a
// filtered scan of the cells table) is the backstop.
//
// Sink: ApplyRemote and ApplyRemoteParts run every event above the recorded
// cursor through edge.ApplyRemoteEvent, the pure rule the embedded store uses
// (one user's events in order, different users in parallel: all the rule
// reads and writes is one user's), and record the cursors last. No Cassandra write spans the edge row, the user's
// partitions and the cursor, so instead of one atomic write every step is
// idempotent and ordered so that a crash after any of them is safe to
// repeat:
//
//  1. Read the edge row with its relay record (an event still pending in the
//     row is relayed first, as Apply does), the user's erasure row and, when
//     the event carries one, the idempotency record; call the rule.
//  2. Write what lies outside the edge row: the idempotency record (USING
//     TTL), the user-index entry (added, or dropped for a tombstone after the
//     user's erasure finished), the erasure job (a peer's mark, or this
//     region's job re-opened by a late edge). Each is idempotent and is what
//     the change in step 3 implies, so a crash before step 3 leaves only
//     writes a repeat makes again (re-opening a job twice only counts Late
//     twice) or that step 3 then justifies.
//  3. One lightweight transaction on the edge row, conditioned on (eseq,
//     epoch, op) as a local write is: the merged edge, the branch records and,
//     when branches owed one, the correction as the row's pending event with
//     eseq+1. Every remote change moves eseq, so a local write that read the
//     row before loses its condition and decides again instead of
//     overwriting branches. The correction's version is {0, eseq}, which
//     grows with every event of the row: its dedupe identity at the
//     aggregator. Correction and branch move are therefore one atomic
//     write, and the pending machinery (relay, sweeper) appends the
//     correction to the outbox exactly once. A lost condition or an unknown
//     outcome reads again (at SERIAL) and decides again: the rule applied to
//     the state our own landed write left writes nothing more (it is
//     idempotent, edge.TestApplyRemoteEventIdempotent).
//  4. Relay the correction (as Apply relays a flip).
//  5. After the whole push, the cursors, plain writes USING TIMESTAMP through:
//     it never moves back whatever order writes land in. A crash before it
//     repeats the run from the old cursor; every event's application is
//     idempotent, so nothing is counted twice.
//
// Marks and purges (KindErasing, KindPurge) are the user's rows only: the
// purge (records, then the index entries edge.PurgeDrops drops) before the
// job, so a crash between them repeats the purge. A peer's mark is written
// over a job read just before (no transaction): an Eraser.Start taking the
// job over at that moment may lose to the mark, and is repeated by its
// caller. Every cursor, peer cell and peer watermark is a plain write with a
// logical timestamp and is never written by a lightweight transaction, so
// Paxos and logical timestamps never meet on one cell. MergeCells writes a
// peer's cell USING TIMESTAMP hwm (its single writer's order: the higher hwm
// wins in any order of arrival), then the cell cursor and the watermark.
//
// # Retention (retention.go, issue 14)
//
// The same rule as the embedded store (pebblestore.Retain, argued in
// pipeline's package doc), from the same inputs (RetentionRound: the
// horizon, replica.PeerCursor of every peer that acknowledged within it,
// from region.holdingPeers). A Retainer per process runs bounded rounds every
// minute on the injected clock (region's startRetention, --log-retention):
//
//   - Each log partition is truncated through the last position at or below
//     min(its aggregator's committed position, every holding peer's cursor,
//     its head) whose event is older than the horizon (event times never
//     decrease along a partition); the cell-change feed (feedPart) through
//     the last entry at or below every holding peer's cell cursor that is
//     older than the horizon. A peer far behind therefore keeps every row it
//     has not acknowledged for as long as it holds, i.e. until it has been
//     silent for the horizon; then it catches up from a snapshot.
//   - Order: the floor first (log_floors.through, a plain LOCAL_QUORUM write
//     USING TIMESTAMP through, so it never moves back), then the rows, then
//     log_floors.deleted. Read and CellChanges look at the floor only when
//     rows they expect are missing (nothing on the normal path): a read that
//     missed a deleted row finds the raised floor and fails with
//     ErrTruncated, never skips. A round that failed after the floor deletes
//     again from deleted.
//   - Deletes are by partition and range, never by row: every chunk
//     partition ((partition, chunk), 1024 positions) entirely at or below the
//     floor is one partition tombstone; the chunk holding the floor gets one
//     range tombstone (pos <= through) per round. Readers start above the
//     floor, so a slice read of that chunk never crosses its range
//     tombstones.
//   - Dedupe rows (kind 1 in the item's cells partition) carry d_at, the
//     newest applied event's time (pipeline.Applied.At); a round reads one
//     page of this region's dedupe rows (paging state kept between rounds,
//     wrapping) and deletes those older than the horizon. These are row
//     deletes: dedupe rows age one by one inside an item's partition. Each
//     delete carries the row's own write time as its timestamp, so a commit
//     that rewrote the row after the scan (a later timestamp) survives; a
//     row written before schema 6 (no d_at) is stamped with now in the same
//     way and goes one horizon later.
//
// TTLs. Idempotency records already carry one: every record (own: idemTTL;
// replicated and snapshot-applied: recordTTL) is written USING TTL = its
// logical expiry + IdemGrace (1h). That is provably safe: a record decides
// nothing after its expires_at (replay is decided on it), and the grace
// keeps it until the request clock says so. Cassandra's compaction is
// therefore the embedded store's expired-record sweep; there is none here.
// The log, the feed and dedupe rows get no TTL: a TTL runs from the write on
// the server's clock and knows no consumer, so an outbox row would expire
// under an aggregator stalled longer than the horizon (lost counts) or under
// a holding peer (which would skip events instead of getting ErrTruncated,
// since no floor rose). A dedupe TTL of the horizon would be safe by the
// pipeline argument (write time >= event time), but the horizon is a flag
// that may change while a TTL is fixed at the write, and dedupe must stay
// whole when the aggregators read Kafka (no pruning then); so pruning
// follows the rounds.
//
// Aggregators on Kafka (--log kafka, Options.ForeignPositions): their
// positions and the cells' HWMs are the topic's offsets, so Position answers
// the committed position alone (with the store's log it answers at least the
// floor, for the rebuild's raise: a floor in outbox positions would make an
// aggregator behind it in topic offsets jump ahead), and a partition is cut
// below what the relay published there instead (RetentionRound.Relayed,
// read from Kafka at every round: kafkalog.Log.Relayed), with the peers'
// cursors and the horizon as above; the feed is cut as above. Every event at or below that position has
// a copy in the topic, and a relay resumes after it, so no reader of this log
// but the holding peers needs it again. Dedupe rows are not pruned then: a
// zombie relay (a paused node) may publish a copy of an old event at any
// later time, and only the edge's dedupe row drops it; they hold one row per
// edge and item, not per event, so they do not grow with time.
//
// Left as they are: relay intents are deleted by their relay or by the
// sweeper once their event is relayed (the sweep cursor then passes their
// minute bucket; gc_grace 1h), so they hold only the relays in flight; the
// other tables hold one row per edge, user, item, cell or stream. Caveat: a
// straggler that writes an append's inflight slots after a round deleted
// them (a slow appender, a reader filling a gap) re-creates at most those
// slots below the floor; no read reaches them (reads start above the floor)
// and a later range delete removes them when they are in the floor's chunk.
// Several processes' rounds at once repeat the same deletes.
//
// # Snapshots (snapshot.go)
//
// Cassandra has no consistent snapshot. OpenSnapshot reads the mark first
// (every log partition's head and the feed's, LOCAL_QUORUM) and then scans
// the tables in pages: edges, idempotency records, erasure jobs, this
// region's cells (RebuildSource adds the receiver's cells and this store's
// cursors for its streams, read before them). Everything through the mark
// is in the scan: an edge event reaches the outbox only after its edge row
// was written and after its idempotency record and index entry (the relay's
// order), and a cell change reaches the feed only after its cell was
// written. What the scan reads may be newer than the mark (states written
// meanwhile); the receiver then applies those events again from the log
// after the mark, which the replicated-event rule makes harmless. Erasure
// starts: PutErasure writes a starting job's row before it appends the
// KindErasing event (see "Erasure"), so a start at or below the mark has its
// row in the scan. Erasure finishes are not ordered so: the eraser appends
// the purge, then writes the job done; a finish whose purge is at or below the
// mark and whose done row lands after the scan reaches the receiver as a
// running mark (the user's writes are refused there, as P5 needs), and the
// purge of that user's records there is left to their TTL (recordTTL: at
// most a day and IdemGrace).
//
// ApplySnapshot / FinishSnapshot (replica.SnapshotSink) apply the entries
// through the replicated-event path (edges as SnapEdgeEvent, marks as
// SnapErasureEvent, one user's in order), records if absent and unexpired
// (USING TTL), cells as MergeCells; the mark raises each cursor (USING
// TIMESTAMP pos: never down).
//
// Rebuild (rebuild.go, --bootstrap-from-peers). A region whose keyspace was
// lost starts on a freshly migrated one. The keyspace carries the region's
// identity (meta: cluster id and the data set registered in etcd, written
// once by an LWT; region's identity.go), so an empty keyspace for a region
// that has a data set is refused without the flag. With it the region marks
// a rebuild per peer (MarkRebuild: one row each in rebuilds) before it
// serves. While any row is pending Apply refuses with ErrRebuilding (wraps
// edge.ErrStorageUnavailable); WantsRebuild(peer) is true, so the
// replication server refuses that peer's pushes and the peer sends a
// rebuild snapshot: its state, this region's cells as it holds them
// (YourCells, adopted by max HWM: written as a window through that HWM
// writes them, USING TIMESTAMP ownCellStamp(HWM)) and its cursors for this
// region's log and cell feed
// (YourLog, YourCells). Every process reads the rows at Open and keeps a
// copy at most a second old; WantsRebuild and the finish read them again.
// FinishSnapshot of a rebuild mark, for each log partition p, raises the
// sequence head to T_p = max(YourLog[p], the highest HWM of this region's
// cells of shard p), then the truncation point to T_p, then the
// aggregator's position; the feed's head and floor rise to YourCells; then
// the peer's row goes.
//
// Why no log position a peer has passed is reused. Peer P skips every event
// of ours at or below its cursor c_P[p]. Until P's rebuild finishes no
// client event is appended (Apply is refused in every process: the rows are
// written before the region serves, and a process opened later reads them
// at Open). Positions are issued only by the sequence row's LWT, conditioned
// on the head it read. The raise reads the head (SERIAL), checks that the
// aggregator has folded through it (events the rebuild itself appends, a
// branch correction of a snapshot's edge, must be counted first: else it
// answers ErrRebuilding and the peer retries the snapshot), and moves the
// head to T_p by an LWT conditioned on that head: an append in between
// fails it and the check repeats; an appender that remembers the old head
// loses its condition and reads the new one. So every position issued
// afterwards is above T_p >= c_P[p], and P applies it. The feed rises past
// P's cell cursor the same way, so P skips no new cell change. A peer whose
// cursor is lower (it had applied less of the lost log) reads positions
// that have no rows below the raised floor: ErrTruncated, and it catches up
// from a snapshot, never by skipping.
//
// Why no cell fence hides a new event. The aggregator skips an event whose
// position is at or below its cell's HWM. The adopted cells carry HWMs of
// the lost log, possibly above any peer's cursor; T_p is at least every own
// cell's HWM in shard p when the mark arrives (the cells are scanned then,
// after the snapshot's YourCells chunks were applied), so every new event
// is above every fence. A later adoption (another peer's YourCells) happens
// only while that peer's rebuild is pending, and its finish raises past it
// again before writes resume.
//
// Order and crashes. The floor is written after the head's LWT: Position
// answers max(committed position, floor), and a floor raised first could
// let an aggregator that reloads its position jump over an event still to
// be appended below T_p; once the head moved, none can be. A reader between
// the two finds positions missing above the old head and fails until the
// floor is written; a crash in between is settled by the mark sent again
// (settleRaise: the head is past T_p and position T_p has no row, which
// only a raise leaves). The rows at or below the old head are folded, below
// the floor, and deleted with the floor's deleted mark set to T_p (so
// retention does not walk every chunk up to it). Every step only raises, so
// a mark applied again changes nothing. Finishes are serialized within a
// process; across processes the position row might go back, which Position's
// max with the floor makes harmless.
//
// With the aggregators on Kafka (--log kafka) the cells' HWMs and the
// positions are the topic's, so neither may be compared with or raised to
// this log's. The rebuilt data set has a fixed position base B (region's
// identity.go: its creation time in ms << 20, stored in the meta row,
// position_base), added by kafkalog to every topic position, and above
// every position of the lost data set in this log and in the topic (a
// partition takes fewer than 2^20 events a millisecond). Before the region
// serves, RaiseRebuildBase raises every log partition's head and floor to B
// (the log is empty: raiseStream refuses a log holding events here) and
// every aggregator position still below B to B + the topic's end, skipping
// the old records (the lost data set's: the adopted cells hold what of them
// was counted). Then every peer cursor (of the lost log) is below every new
// log position, every adopted HWM below every new topic position, and the
// relay, whose topic says it published the lost log's positions, resumes at
// the floor above them (kafkalog's relay.go; the floor never passes an
// unpublished event). A finish raises the log to YourLog alone (a no-op: B
// is above it) and leaves the positions alone. Peers, whose cursors for
// this log are all below B, catch up from a snapshot once (ErrTruncated).
// Several processes raise at once safely: every raise only moves up, and a
// position is raised only while below B, which it is until the first
// process raised it, before any process served.
//
// Several processes of a region bootstrapping one empty keyspace at once
// (region's identity.go): each marks the rebuilds (rebuilds rows) before it
// tries to write the identity, and one identity wins the LWT. A loser reads
// the winner's; if etcd does not record it yet (the winner is registering
// it, or died before it could), the loser, having the flag and finding the
// keyspace empty but for the identity, registers the same data set itself
// (idempotent) and rebuilds too. Every process then reads the rebuild rows
// again (ReloadRebuild) rather than trusting its copy from Open, which may
// predate them; since they were written before the identity it read, it
// refuses writes from its first request until the rebuild finishes.
//
// # LWT contention limits
//
// A Cassandra LWT is four round trips to a quorum (prepare, read, propose,
// commit) and serializes per partition; concurrent LWTs on one partition fail
// their conditions or back off inside Cassandra (cas_contention_timeout) and
// retry here. Expect a few milliseconds per LWT and at most a few hundred per
// second on one hot partition. Where they land:
//
//   - Edges: the row is per (item, user), and a user's writes go to one region
//     (pins), so contention is only a user racing themself; a per-edge lock in
//     the process removes even that within one process.
//   - Cells: no LWT (see "Cells"); a fence failure means a zombie writer.
//   - Sequence rows: every append transacts on the rows of the partitions it
//     touches, in their group's Cassandra partition. The
//     appender remembers each row as its own last applied and finished append
//     left it and conditions the next transaction on that, so an uncontended
//     append is one LWT and no SERIAL read; if anyone moved a row since (a
//     reader's issued, another process), the condition fails and the retry
//     reads it at SERIAL. This is safe because the dedupe argument needs only
//     a state of the row taken before the edge reads: our own commit is one.
//     Within a process one goroutine per group folds concurrent events into
//     one LWT (up to MaxBatch events, and at most maxSeqBatchBytes of slots
//     in one batch), so throughput is batches/s × batch size per group;
//     processes sharing a keyspace contend on a group's partition, and a lost
//     condition on any of its rows fails the whole batch, which re-reads the
//     rows (one SERIAL read of the group) and retries. Readers issuing
//     CompleteThrough add at most one LWT per IssueEvery per partition, on
//     its group's partition. One group (the default) makes the sequence's
//     share of Paxos per like one over the batch size whatever Partitions
//     is, for a region that is one process; nodes sharing a group contend
//     on it (two nodes on one group wrote 0.45–0.7 times as fast as on one group
//     per partition, BENCHMARKS.md), so a region that may run on several
//     nodes gets one group per partition (region's default with --node;
//     --cassandra-sequence-groups overrides; fixed when the keyspace's store
//     row is created). Regroup (likectl migrate --sequence-groups) changes a
//     keyspace's layout, the region's processes stopped: per partition it
//     writes out the old row's last slots, then marks the row moved with a
//     transaction conditioned on its head and issued that also changes
//     issued (so an append conditioned on the row as a running process
//     remembers it fails, and its re-read finds the marker: ErrSequenceMoved,
//     or a decode failure on a release before this one), then writes the new
//     row with the old head, last time and issued; meta.seq_groups last. A
//     process still running on the old layout therefore fails closed; none
//     issues a position twice.
//
// Per Apply without contention: one LWT on the edge row and one share of a
// sequence LWT (group commit over the group's partitions), no SERIAL read; plain reads and writes: the
// edge, its relay record, the idempotency record and the erasure marker, the
// relay intent (written; deleted in a background batch, about a tenth of a
// request), the idempotency record and user index (one batch)
// written, the relay record read and written by the append, the outbox row
// (one batch per append), and the erasure re-check. Schema 3 and earlier
// releases: two SERIAL reads and two LWTs on the edge row, one SERIAL read and
// a share of an LWT on the sequence row. Ops counts both kinds.
//
// # Paxos per like: what is taken, what is not, and why
//
//   - Taken: LOCAL_QUORUM reads wherever an LWT condition that follows
//     catches a stale read (first edge read, append dedupe, cell pre-check);
//     the relay record instead of the pending-clearing LWT; the appender's
//     remembered sequence row. Prepared statements and token-aware routing
//     were already in place (gocql prepares every statement with bind
//     markers; Connect sets TokenAwareHostPolicy, and every statement binds
//     all partition-key columns). Write coalescing is on (the driver's
//     200 µs, SessionConfig.WriteCoalesce): concurrent requests on one
//     connection share a write system call.
//   - Kept: the edge LWT. Several nodes of one region may serve one user at
//     once (a client retrying through another node), and nothing but the
//     edge row serializes them: one process serializes its own writes with
//     a per-edge mutex, different processes with the LWT's condition on
//     eseq. A fencing timestamp from (epoch, op) alone would let two nodes
//     of the same epoch both decide on the same old version and both
//     append; the pin fences other regions, not this region's nodes.
//   - Kept, and shared: the sequence LWT. The outbox positions must be
//     gap-free and in order (pipeline.Log), which needs one serialization
//     point per log partition; since schema 10 one transaction serves every
//     partition of a group, so a group commit folds the whole region's
//     concurrent appends (about 12 events per transaction at 700 likes/s,
//     BENCHMARKS.md) instead of one partition's (1.1).
//   - Taken: the cell batch LWT per item and window. Cell and dedupe writes
//     are stamped with their log prefix instead ("Cells"): a window built on
//     an inconsistent read never passes its fence check, and of two
//     consistent ones the longer prefix wins. A window costs one Paxos round
//     in all (the cell-change feed's append), not one per item.
//   - Not done: seed 003's shape (edge row and an outbox row in one
//     single-partition BATCH, Kafka offsets as positions, no sequence row
//     when the log is Kafka). It removes the sequence LWT but changes what
//     the relay reads (pending events across edge partitions instead of an
//     ordered outbox) and how watermarks are claimed; not attempted here.
//   - Paxos v2 is a server setting (scripts/servers.sh LIKES_CASSANDRA_PAXOS);
//     nothing in this package depends on the variant.
package cassandra
