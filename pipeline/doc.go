// Package pipeline is the counting pipeline of one region: the committed log
// contract, the cell store contract, and the aggregator that turns log events
// into fenced cell writes (DESIGN section 4).
//
// Exactly-once lives at the last write. Each cell (item, region, shard) has one
// writer, the aggregator of partition `shard` in `region`, and the cell records
// HWM, the log position it has applied through. An aggregator window reads the
// touched cells first and sums only events with Pos > cell.HWM, then commits each
// cell conditionally on its HWM being unchanged. So a window replayed after a crash
// (before or after its cells were written, before or after the position commit)
// adds nothing twice, and a window that covers more events than before adds only
// the new ones. A touched cell already at or past the window's end (written by
// a window that did not finish) is committed unchanged, not skipped, so a store
// that announces changed cells to replication (its cell-change feed) announces
// it before this window's watermark vouches for it. Dedupe by (edge, kind class, version) additionally drops
// duplicate events at different positions (a relay re-publishing after a crash).
//
// Watermark: after a window the partition is complete through the event time of
// its last applied event, or through the log head's CompleteThrough when the
// window reached the head. It never moves backwards.
//
// Bounded state (DESIGN section 10). The log below the aggregators' positions
// and every other consumer's cursor, once older than the retention horizon H
// (`--log-retention`, default 7 days), is truncated by the store; reading after
// a position below the truncation point fails with ErrTruncated, never by
// skipping. Dedupe state (Applied) whose newest applied event is older than H
// (Applied.At < now − H) is pruned. Why a replay never needs a pruned entry:
//
//  1. A replay re-reads only positions after the partition's committed
//     position (committed atomically with the cells and the dedupe state), and
//     the fence drops every event at or below a touched cell's HWM whatever the
//     dedupe state says. So an event already counted is never counted again by
//     a re-read of its own position: the fence, not the dedupe, guards it.
//  2. Truncation never passes the aggregators' committed positions, so every
//     position a replay reads still exists: a replay never reaches behind the
//     truncation point, hence never behind the horizon.
//  3. What dedupe adds is dropping a second copy of an event at another,
//     later position. Such a copy can only exist while its original is within
//     the window in which duplicates are produced (a relay re-publishing its
//     unacknowledged tail after a crash); the store's own log has none (every
//     event gets one position, in the write that creates it: versions grow per
//     edge, a correction's version is the edge's own correction sequence, a
//     reconcile's its position). A pruned entry's newest event is older than
//     H, so pruning is safe whenever duplicates appear within H of their
//     original, which the retention horizon bounds by construction: a log
//     (or a relay's outbox) keeps nothing older than H to re-publish. Not so
//     when the aggregators read Kafka: a relay paused for longer than H (a
//     zombie node) may still publish its batch, so there dedupe state is
//     never pruned (it holds one entry per edge, not per event), and the
//     store's log is cut below what the relay published to the topic
//     instead of below the aggregators' positions, which are topic offsets.
//  4. Without its entry, an edge's next event (a newer version) is counted as
//     it would have been with it: the entry only ever dropped versions at or
//     below the newest applied one.
//
// Beyond the horizon, reconciliation (`likectl reconcile`) stays the backstop.
//
// Concurrency: each Aggregator owns one goroutine loop; Group runs one per
// partition. Log and CellStore implementations must be safe for concurrent use.
package pipeline
