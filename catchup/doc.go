// Package catchup is the planned-move barrier (DESIGN section 5). A planned
// move (likectl pins move/drain) stores the new pin with CatchUp set, and
// epoch.Decide refuses writes under it. The new owner's Barrier then asks
// every live region for its own-log heads (the replication Heads RPC; the
// asked region's Fencer first confirms it has seen the new pin and waits for
// its in-flight writes), waits until its replication cursor from each has
// reached those heads, and clears CatchUp (Directory.Settle). From then on
// every write the old owner (or any earlier owner) made to the range, with its
// idempotency records and erasure marks, is applied here before the new owner
// writes: no retry is applied twice across a drain and no branch correction
// arises.
//
// The old owner is always waited for, even after its lease has expired (the
// planned move promised its tail). Other regions are waited for while they
// are live: one whose lease has expired is dead, and its tail, if it ever
// returns, merges through corrections as after a failover. A region that
// cannot be reached keeps the range closed: the operator either heals the
// link or settles the pin by hand (likectl pins settle), accepting an
// unplanned move's window.
//
// Structure: Barrier is the protocol as a steppable, thread-unsafe core: Step
// makes one check through the interfaces it was given (no goroutines, timers
// or locks), so the simulation drives it directly, one step at a time, with
// its simulated etcd and network. Loop owns the one goroutine that steps a
// Barrier on a ticker in production; Close stops it and waits. Fencer answers
// the Heads questions of other regions' barriers.
package catchup
