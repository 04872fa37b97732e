// Package console is the operator console of likesd: a web page (/ui) served
// on the admin listener, never on the public port, and the JSON it polls
// (/ui/api/state).
//
// Role: a Console asks its Source for the cluster's state every Interval
// (regions with lease health, watermarks, staleness, aggregator and
// replication lag; the pin map with homes and catching-up flags), keeps the
// latest Snapshot, and turns the differences between two pin tables into
// Events (a pin moved, a failover, a planned move caught up) kept in a
// bounded ring, newest first. The page is static HTML, CSS and JavaScript
// embedded in the binary (no build step); it fetches the JSON every second
// and redraws.
//
// Concurrency: one goroutine loop per Console polls the Source; the HTTP
// handler reads the latest snapshot under a mutex. Close stops the loop and
// waits for it; it is idempotent, and no Source call starts after it.
//
// Invariants: the ring never holds more than MaxEvents events; the first
// pin table read is a baseline (no events); a move is a "failover" when the
// region it left was not live at the time it was seen, a "failback" when it
// brings the range home, else a "move".
package console
