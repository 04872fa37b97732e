// Package edgetest is the contract suite every edge.Store and edge.JobStore
// implementation must pass. It is written once and run against each backend
// (the embedded Pebble store today, a Cassandra store later): a backend's test
// calls RunStore and RunJobStore with a function that opens a fresh, empty
// store and registers its cleanup on t.
//
// What the suite proves about a Store, observed only through the edge.Store
// interface:
//
//   - Apply is edge.Decide applied atomically: a random model-based sequence of
//     likes, unlikes, erasures, retries, reused keys, epochs and expiring
//     idempotency records yields exactly the decisions, answers, edges and events
//     a pure in-memory model computes with edge.Decide.
//   - Refusals (replay, conflict, erased, stale epoch) write nothing.
//   - One edge per (item, user), never duplicated; concurrent writes to one edge
//     serialize (versions 1..n, no lost update, deltas telescope).
//   - Concurrent duplicates of one request (same key) produce exactly one write.
//   - Idempotency records replay until Request.Now reaches ExpiresAt, not after.
//   - Likers pages are in (bucket, user) order, stable, complete, free of
//     duplicates, exclude UNLIKED and ERASED, and reject a bad cursor; UserItems
//     pages in item order.
//   - PurgeUser removes the user's idempotency records and item index, not other
//     users' (even ones whose id extends the purged id), and leaves edges in place.
//   - Unicode ids round-trip exactly.
//
// And about a JobStore: jobs round-trip, and PutErasure of a running job is
// ordered with Apply (later non-erasure writes are refused).
//
// RunReplica is the replica contract for a store that is a replication peer
// (replica.Source and replica.Sink): events shipped from one store to another
// leave the receiver as edge.ApplyRemoteEvent says, through duplicates,
// overlapping and reordered runs, stale versions, a chain of failovers whose
// corrections telescope, erasure marks, purges and late edges that re-open an
// erasure, with cursors that never move back. RunReplicaCells ships cells
// (CellChanges → MergeCells) and checks counts == LIKED edges everywhere.
//
// Invariants of the suite itself: deterministic seeds, no sleeps, no wall-clock
// dependence (every Request carries its own Now).
package edgetest
