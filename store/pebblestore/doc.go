// Package pebblestore is the embedded default backend: one Pebble database per
// region holds edges, idempotency records, the committed log, cells, aggregator
// dedupe state and positions, and erasure jobs. It implements edge.Store,
// edge.JobStore, pipeline.Log, pipeline.CellStore and pipeline.CountStore.
//
// Write path: every Apply goes through one writer goroutine that gathers the
// requests waiting at that moment into one indexed batch (each request sees the
// ones before it), assigns log positions in order, and commits the batch with
// one fsync (group commit). Log positions are therefore assigned in commit
// order, and a reader never sees position n+1 before n.
//
// Aggregator commits (cells + dedupe + position + watermark + cell outbox) are a
// separate batch, atomic, fenced on each cell's HWM under a mutex. A crash
// recovers a prefix of batches, so cells and position always roll back together
// and the window is replayed. Windows that change cells are synced anyway,
// because their outbox sequence numbers reach peers (see Commit); windows that
// only move the watermark are not.
//
// Replication: the cell outbox (o seq → cell key) lists own cells in change
// order for shippers; ApplyRemote runs in the writer loop (ordered with local
// writes) and commits remote edges, idempotency records, branch corrections and
// the sender's cursor together; MergeCells merges peers' cells by crdt.MergeCell.
//
// Key layout (ids never contain control characters, so 0x00 separates them):
//
//	e item 00 bucket user   edge          b item 00 user         branches
//	i user 00 key           idem record   u user 00 item         user index
//	l part(4) pos(8)        log event     c item 00 region 00 shard(4)  cell
//	d item 00 user          dedupe        p part(4)              position, watermark
//	x user                  erasure job   m                      meta
package pebblestore
