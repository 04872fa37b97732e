// Package pebblestore is the embedded default backend: one Pebble database per
// region holds edges, idempotency records, the committed log, cells, aggregator
// dedupe state and positions, and erasure jobs. It implements edge.Store,
// edge.JobStore, pipeline.Log, pipeline.CellStore and counts.CountStore.
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
// Storage faults (health.go). A store that cannot write refuses writes at once
// with edge.ErrStorageUnavailable (the API answers 503 storage_unavailable
// with Retry-After), never by queueing them: submit checks one atomic
// pointer, no syscall and no lock per write. Reasons, most severe first:
//
//   - write-failed: a group commit's WAL write or fsync failed (or Pebble
//     called Fatalf under one of the store's writes). Every write of that
//     group fails, and so does every later one. The sync is never retried to
//     acknowledge them (the fsyncgate lesson, as PostgreSQL and etcd treat it:
//     after a failed fsync the kernel may have dropped the dirty pages, so a
//     later "successful" fsync proves nothing). Recovery: once free space is
//     above the watermark and a probe file can be written and synced, the
//     store closes the failed database and reopens it from disk, i.e. from
//     what was durable, reloading log heads and the cell outbox sequence;
//     writes then resume with no restart. We reopen in-process rather than
//     exit because `likesd dev` runs several regions in one process and one
//     region's disk must not take the others down; the result is the same
//     state a restart would recover. A refused write may still turn out
//     durable (its bytes reached the disk anyway): the client's retry with
//     its idempotency key then replays the stored answer, as for any 503.
//   - restart-required: Pebble called Fatalf in one of its own goroutines
//     (e.g. a MANIFEST write failing during a flush). Pebble would carry on
//     as if it had succeeded were Fatalf to return, and a panic there would
//     kill the whole process, so that goroutine is parked forever: the disk
//     is left as a crash would leave it, the database cannot be closed, and
//     the store asks for a process restart (`likesd run` exits for its
//     supervisor; `likesd dev` keeps its other regions serving).
//   - background-error: a flush or compaction failed (Pebble retries them);
//     cleared by the next that succeeds, or by a successful probe once none
//     has failed for a check interval.
//   - low-disk-space: free space of the data folder is below the watermark
//     (Options.MinFreeBytes/MinFreeFraction, `--min-free-space`), read every
//     SpaceCheckInterval on the store's clock, not per write. Client writes
//     and replicated log events are refused so the WAL, flushes and
//     compactions keep room and never meet ENOSPC; aggregator windows (bounded
//     by the log already written) and peers' cell merges (overwrites of a
//     bounded key set) still commit, so counts catch up. Writes resume above
//     the watermark plus an eighth (no flapping).
//   - write-stall: Pebble stalls writes (memtables or L0 over their limits).
//
// Reads keep serving from the open database in every state except during
// the few milliseconds of a reopen (they then fail with the same sentinel).
// One log line per change of state, not per request; Health() reports the
// state for readiness and metrics. All writes to Pebble are serialized
// (commitMu) so that after a failed one no other enters Pebble's broken
// commit pipeline, which panics inside its own lock and would leave the
// database impossible to close.
//
// Retention (retention.go, retainer.go; DESIGN section 10). A Retainer owns
// one goroutine that runs a bounded Retain round every interval on the
// injected clock: each log partition is truncated (one DeleteRange) below
// min(the aggregator's committed position, every live peer's acknowledged
// cursor, the last event older than the horizon); the cell outbox below
// min(every live peer's cell cursor, the outbox sequence as of the horizon,
// dated by checkpoints); dedupe entries whose newest event is older than the
// horizon are pruned under cellMu (pipeline's package doc has the safety
// argument); idempotency records expired for over a minute are deleted in
// the writer loop, re-checked there, own and replicated alike. A truncation
// point (floor) is stored with the deletion and raised in memory before it
// commits; Read and CellChanges check it after opening their iterator and
// fail with pipeline.ErrTruncated below it, so a reader never skips deleted
// events unknowingly. The floors keep a partition's head (and the outbox
// sequence) across restarts when everything below was deleted.
//
// Snapshots (snapshot.go): OpenSnapshot reads the heads and the outbox
// sequence, then takes a Pebble snapshot (so it holds every event through
// them, maybe more), and reads edges, idempotency records, erasure marks and
// own cells from it in bounded chunks; ApplySnapshot applies them as the
// replicated events they stand for (applyRemoteEvent), FinishSnapshot raises
// the sender's cursor to the mark.
//
// Rebuild (rebuild.go): a store started empty (--bootstrap-from-peers) or
// restored from a Checkpoint is marked to rebuild from its peers; it refuses
// client writes until each peer's rebuild snapshot (which also carries the
// peer's copies of this region's cells and its cursors for this region's
// streams) has raised its log heads, floors, aggregator positions and outbox
// sequence past what any peer has applied.
//
// Key layout (ids never contain control characters, so 0x00 separates them):
//
//	e item 00 bucket user   edge          b item 00 user         branches
//	i user 00 key           idem record   u user 00 item         user index
//	l part(4) pos(8)        log event     c item 00 region 00 shard(4)  cell
//	d item 00 user          dedupe        p part(4)              position, watermark
//	x user                  erasure job   m                      meta
//	o seq(8)                cell outbox   t part(4)              log floor
//	T                       outbox floor  h time(8)              outbox checkpoint
//	R peer                  rebuild pending from peer
package pebblestore
