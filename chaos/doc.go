// Package chaos is the fault-injection suite of likes: it runs etcd and three
// likesd regions as real processes on loopback, sends every region's peer
// links (replication and forwarding gRPC) and its etcd link through
// fault-injecting proxies (package chaos/proxy), drives a concurrent client
// load while a seeded nemesis schedule partitions, pauses, kills and fails
// regions over and fills their disks (disk-full: the test-only environment
// knob LIKES_TESTONLY_DISK_FULL_FILE, set only for the processes the suite
// launches, makes a region's store refuse writes as on a full disk), and then, after healing and quiescing, checks the promises of
// DESIGN.md against everything observable:
//
//   - every region reports the same count and the same who-liked set for
//     every item, each count equals its number of LIKED edges and the sum of
//     the deltas in all regions' committed logs (P1, P6);
//   - the final state of every edge is allowed by its acknowledged operations
//     (a retry, a duplicate or a stale retry is never a new operation; an
//     operation with an indeterminate outcome may land either way; operations
//     the old owner acknowledged inside an unplanned failover window are
//     judged as concurrent, DESIGN section 5), and every acknowledged write's
//     Idempotency-Key is in some region's log (P1, P3);
//   - an erased user has no LIKED edge (P5);
//   - every user write in every region's log was made under a valid pin: the
//     pin of the user's range named that region at the event's epoch, and the
//     event time lies in [notBefore of that epoch, notBefore of the next) (P7);
//   - a planned move is clean (DESIGN section 5): the new owner's first write
//     of an edge in its epoch builds on the old owner's last write of it;
//   - every count sampled during the run is honest about its asOf: it holds
//     every logged delta with event time <= asOf and, of the later ones, at
//     most a prefix of each (region, partition) log (P2).
//
// Invariants of the suite itself: every process runs in its own process group
// and is killed (SIGKILL to the group) before Run returns, also on failure or
// interruption; every goroutine it starts is stopped; every wait is a poll with
// a deadline; every loop is bounded in count and time. The schedule and the
// workload's choices derive from the seed; timing does not, so a replay
// repeats the faults and the shape of the load, not the exact interleaving.
package chaos
