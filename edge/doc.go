// Package edge is the source of truth of likes: one edge per (item, user) holding a
// target state and a version, the write path that flips it, idempotency records,
// the session overlay and the store contract every backend implements.
//
// Invariants:
//   - An edge is never created twice: stores key it by (item, user) and change it
//     only through Decide inside one atomic conditional write.
//   - Every write that changes an edge's version appends exactly one Event to the
//     committed log in the same atomic write; the event carries the delta the write
//     contributes to the item's count (+1, −1 or 0), so summing all events of an
//     edge telescopes to its current state's contribution.
//   - Same (user, idempotency key) and same request replays the stored answer and
//     writes nothing; same key with a different request is ErrKeyConflict.
//   - A write is only attempted under the epoch the Authority grants for the user's
//     range; an edge already at a higher epoch makes the write fail closed
//     (ErrStaleEpoch): another region owns it now.
//   - Once a user's erasure has started, no edge of the user ends LIKED: the
//     Eraser tombstones what the region holds, and an edge that arrives later by
//     replication re-opens the job (ReopenLate) and is tombstoned through the
//     same write path at the range's owner, whose write (or branch correction)
//     cancels the late +1 exactly once.
//   - Every event replicated from another region is applied through
//     ApplyRemoteEvent, the pure remote-apply rule (last-writer-wins by
//     (epoch, op), branch corrections renumbered per edge, erasure marks,
//     purges, re-opened erasures, idempotency records): a store reads the
//     state, calls it and writes what it says (edgetest.RunReplica checks it).
//   - Everything that arrives from outside the region (a peer's events, a
//     forwarded request) passes ValidateEvent / ValidateID, the same rules as
//     the public API.
//
// Keying (one fixed hash everywhere: 64-bit FNV-1a): bucket = h(user) % 64,
// range = h(user) % ranges, partition = h(item "#" bucket) % partitions.
//
// Concurrency: Service is safe for concurrent use; it relies on the Store for the
// atomicity of each Apply.
package edge
