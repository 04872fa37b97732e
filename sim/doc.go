// Package sim is a deterministic multi-region simulation of the likes service
// that drives the real code: each region is a real pebblestore.Store on its own
// crashable in-memory filesystem, a real edge.Service (with forwarding), real
// pipeline.Aggregators stepped by hand and a real replication.Server receiving
// pushes; only time (clock.Fake), the network (per-link message queues), etcd
// (a global pin table with per-region lagging views fed to epoch.Decide) and
// the clients are simulated.
//
// One goroutine schedules everything from a seeded PCG generator, so a seed
// replays exactly (the stores' own goroutines only ever serve one request at a
// time). Each seed also draws its own fault mix (swarm testing): how often it
// writes, steps aggregators, ships, loses, duplicates or reorders messages,
// partitions links, cuts regions off from etcd, moves pins (planned drains and
// unplanned failovers), crashes regions (a CrashClone of the region's MemFS:
// acknowledged writes are synced, aggregator windows and merged cells may roll
// back) and advances the clock.
//
// After the scheduled steps the simulation heals everything, delivers every
// message and ships and steps until quiescent, then asserts:
//
//   - every region holds the same register for every edge, equal to the
//     newest version any region wrote, whose state is the target of the last
//     request (in real time) that a region accepted for that edge;
//   - every region's Count(item) equals the number of LIKED edges, and the
//     cells of every source region sum to the same value everywhere;
//   - watermarks are honest (at any region, for every region r with watermark
//     T there, every counted event of r's log with event time <= T is inside
//     the local copy of r's cell) and live (after healing, asOf passes every
//     event);
//   - no write was accepted under a stale epoch: the writer was the pin's
//     region for that epoch, no newer epoch had started (now < its notBefore)
//     and, per range, accepted epochs never go back in time;
//   - idempotency: a request whose key's record is present at the owner
//     replays (same request, same answer, edge unchanged) or conflicts
//     (different request); a record the owner has not yet received (the
//     unplanned-failover window of DESIGN section 5) is counted, not failed;
//   - acknowledged edge writes survive crashes.
//
// Invariants checked continuously (epoch safety, idempotency, durability after
// a crash, read-your-writes at the ingress) fail the step that breaks them;
// the others are checked after healing and, for watermark honesty, also at
// random points. A failure reports the seed and the step; Run with Verbose
// replays the seed with a trace.
package sim
