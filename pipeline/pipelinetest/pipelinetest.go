// Package pipelinetest is the contract suite for a region's counting backend:
// pipeline.Log fed through an edge.Store, pipeline.CellStore and
// counts.CountStore. It is written once and run against each backend (the
// embedded Pebble store; later Kafka + Cassandra): a backend's test calls Run
// with a function that opens a fresh, empty Harness and registers its cleanup.
//
// What the suite proves:
//
//   - Log: the log holds exactly the Decision.LogEvent of every Apply (each
//     write's event, and each no-op's idempotency record event), once each, in
//     the partition PartitionOf(item, bucket) names; each partition reads in
//     strictly increasing Pos order; a tailing reader never finds an event
//     appear behind its cursor (no gap filled out of order), so what it saw
//     equals a fresh full read; an edge's counted events are in version order;
//     event times never decrease along a partition (the aggregator's watermark
//     relies on it).
//   - Head: every event with EventTime <= Head.CompleteThrough has Pos <= Head.Pos,
//     for heads taken while writers run.
//   - CellStore: Commit is fenced per cell (errors.Is(err, pipeline.ErrFenced),
//     and nothing of the window written: no cell, no dedupe state, no position);
//     positions, watermarks, cells and dedupe state round-trip per partition.
//   - CountStore: Count sums an item's cells (and only its cells); a region's
//     watermark is the min over its partitions.
//   - End to end: aggregators stepped over a random workload of likes, unlikes,
//     retries, retractions, erasures, purges and epoch bumps keep every committed
//     watermark honest (every event with EventTime <= watermark is at or before
//     the committed position), and once caught up every item's Count equals its
//     number of LIKED edges; a replay of the whole log changes no count.
//
// Helpers (ReadAll, CatchUp, NewAggregators, WatermarkChecker, CheckCounts) are
// exported for backend-specific tests such as crash tests.
//
// The suite never sleeps; when the Harness has a fake clock it advances it.
package pipelinetest
