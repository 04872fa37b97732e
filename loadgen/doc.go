// Package loadgen drives the HTTP API of one running likes region on loopback and
// reports throughput, latency and staleness per phase.
//
// A run has up to three timed phases, each bounded by Config.PhaseDuration and by
// the caller's context:
//
//  1. uniform-writes: every worker likes or unlikes a uniformly random item as one
//     of its own users. Each (user, item) edge alternates like, unlike, like, …
//     so edges keep flipping; every request carries a fresh Idempotency-Key.
//  2. viral-writes: every worker walks its users round-robin over ONE item, each
//     user flipping its like of that item, so the item's edges all change.
//  3. count-reads: every worker reads GET /v1/items/{id}/count over the items.
//
// During both write phases a separate sampler reads the count every
// Config.SampleEvery and records staleness two ways: client-side now − asOf and
// the server's own stalenessMs.
//
// Users and rate limits: each worker owns Config.Users/Workers users (default
// Workers*50 users in all) and is the only one writing as them, so per-user state
// is tracked locally without locks and no user exceeds the server's default
// per-user write limit (20/s) unless a single worker runs faster than 20/s per
// owned user (1000 req/s per worker with 50 users). The reference benchmark
// (scripts/bench.sh) starts likesd with --user-rate -1 anyway.
//
// Memory is bounded: latencies go into fixed-size log-linear histograms
// (≈1.6 % relative error, exact max), per-worker edge state holds one map entry
// per (user, item) pair currently liked plus one bit per user for the viral
// item, and the sampler remembers the items it has read (one per sample).
//
// Figures per phase: requests, errors by HTTP status (or timeout/transport),
// throughput (successful requests per second), latency quantiles of successful
// requests, staleness quantiles (write phases), and, when Config.ServerCPU is
// set, the server's CPU per request next to the load generator's own; on a
// shared machine CPU per request is far steadier than throughput.
//
// Requests go through package client (github.com/likes-dev/likes/client) with
// its retries turned off: every request is one measured attempt, with the
// user's token, a fresh Idempotency-Key and the user's newest Likes-Session
// given per call.
//
// Safety: Run refuses any URL whose host is not loopback (127.0.0.0/8, ::1 or
// localhost); see CheckLoopback.
package loadgen
