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
// the new ones. Dedupe by (edge, kind class, version) additionally drops
// duplicate events at different positions (a relay re-publishing after a crash).
//
// Watermark: after a window the partition is complete through the event time of
// its last applied event, or through the log head's CompleteThrough when the
// window reached the head. It never moves backwards.
//
// Concurrency: each Aggregator owns one goroutine loop; Group runs one per
// partition. Log and CellStore implementations must be safe for concurrent use.
package pipeline
