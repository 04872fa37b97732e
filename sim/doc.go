// Package sim is a deterministic multi-region simulation of the likes service
// that drives the real code (in the style of etcd's rafttest interaction
// environment and pebble's seeded metamorphic tests).
//
// Real: per region a pebblestore.Store on its own vfs.NewCrashableMem, an
// edge.Service (with its forwarding path), an edge.Eraser stepped by hand
// (EraserConfig.Manual: Start runs its inline step, RunOnce is one tick of
// the background loop), one pipeline.Aggregator per log partition stepped by
// hand, and a replication.Server that applies pushes
// through the store's Sink methods (ApplyRemote per partition, then
// MergeCells) and answers digests; authority decisions are epoch.Decide.
// Simulated: time (one clock.Fake), the network (a message queue per directed
// link), etcd (a global pin table; each region has its own view of it and a
// proof time, which stop while the region is cut off from etcd), the
// shippers' goroutines and timers (each region drives the real
// replication.Sender per peer: its batches travel as messages, its answers
// come back as replies that may be lost, duplicated or reordered, and its
// anti-entropy rounds run synchronously), the clients, and the API's relay of an erasure request to the user's home
// (a region whose pin view says it is not the owner relays the request to the
// owner it names; 503 when that owner is unreachable, outcome unknown when the
// relay's answer is lost).
//
// One goroutine schedules everything from a seeded PCG generator, so a seed
// replays exactly (the stores' own goroutines only ever serve one call at a
// time; crashes keep exactly the synced data, never a random fraction). Each
// seed also draws its fault mix (swarm testing): how often it writes (new
// requests, retries, deep-dive-1 stale retries of an old like after an
// unlike, keys reused for other requests), retracts edges (the abuse
// system's unlike, mostly of liked edges), requests account erasures (of at
// most a few users per run, preferring users of the most recently moved range;
// retries too, which may take over another region's job), ticks erasers (with
// a small inline limit and per-tick budget, so jobs outlive Start and meet
// faults; a done job purges the user), steps aggregators, ships, loses,
// duplicates or reorders messages, cuts links, cuts regions off
// from etcd, moves pins (planned drains whose pin waits, CatchUp set, for
// the new owner's real catchup.Barrier, stepped by the schedule, to settle it
// through the simulated etcd and the asked regions' real Heads service and
// catchup.Fencer; unplanned
// failovers whose new owner starts at notBefore without the old owner's
// unreplicated tail, while the old owner is cut off from etcd, isolated from
// its peers or dead), runs anti-entropy rounds, syncs WALs, crashes and
// restarts regions (acknowledged writes are synced; aggregator windows and
// merged cells may roll back) and advances the clock. Clients reach the owner
// of the user's range, or the previous owner (stale geo-DNS, likelier while a
// failover is in progress), or any region, which forwards.
//
// Checked as it happens:
//
//   - epoch safety: every accepted write ran under the epoch of a pin naming
//     the writing region, before any newer epoch's notBefore, and per range
//     accepted epochs never go back;
//   - erasure: a write is refused as erased, or an edge erased, only once some
//     region has started erasing the user; an acknowledged erasure answer
//     comes with a job a region stored;
//   - idempotency: a region holding a key's record replays it (same answer,
//     nothing written) or refuses it as a conflict (another request); a record
//     the owner has not received yet (the unplanned-failover window of DESIGN
//     section 5) is counted as Overtaken, not failed;
//   - read-your-writes at the ingress region after a fresh write;
//   - durability: after a crash every write the region acknowledged is there;
//   - watermark freshness: no region already holds a watermark of a region at
//     or past the event time of an event that region just committed;
//   - watermark honesty at random points (below).
//
// Checked after healing (every fault ends, every message is delivered, the
// clock passes every current epoch's notBefore, then stepping, eraser ticks
// and shipping run until nothing changes):
//
//   - every region holds the same register for every edge, equal to the newest
//     version any region wrote, whose state is the target of the last request
//     (in real time) that a region accepted for the edge (a retraction is such
//     a request, with target UNLIKED), unless the user is erased;
//   - erasure: for every user whose erasure started at any region (every
//     acknowledged one did), every edge of the user that exists is ERASED
//     everywhere (none is LIKED), every region holds the user's erasure mark
//     and no job is still running, no job reports more likes removed than
//     edges erased, and the user's jobs together report at most the
//     tombstoning writes that happened and at least the edges that exist
//     (less forwarded erasures whose answers were lost);
//   - every region's Count(item) equals the number of LIKED edges, and each
//     source region's cells of an item sum to the same value everywhere;
//   - honesty: at every region x, for every region r with watermark T at x,
//     every counted event of r's log with event time <= T is inside x's copy
//     of r's cell for that item and partition (cell HWM >= event position);
//   - liveness: every region's asOf has passed the last event.
//
// The steady workload (steady.go, RunSteady) is the long-running companion:
// a constant like/unlike load for many simulated days on the same real parts
// plus each region's retention Retainer, stepped on the fake clock, with
// every day ending in a full convergence check (every region's counts equal
// the LIKED edges of the model, every edge equal everywhere). Its tests show
// the bounded kinds (log, outbox, dedupe, idempotency) levelling off, a
// region down past its peers' horizon catching up from snapshots, a region
// that lost its folder rebuilding from its peers, and a restore from a
// backup converging exactly.
//
// A failure names the seed, the step and the command that replays it with a
// trace: LIKES_SIM_SEED=S go test ./sim -run '^TestSim$' -v (TestSimChains
// and TestSimErasures failures name their test, which replays with its own
// fault mix).
package sim
