// Package epoch is the pure part of write authority (DESIGN section 5): the
// Pin of a user range, the Config of pins and leases (with the layout of
// their etcd keys), Decide (the write-authority rule) and Home (a range's home
// region). It does no I/O and imports no etcd package; the simulation uses
// only this. The etcd implementation — the pin Directory, region KeepAlive,
// the watch-fed Authority and the failover Controller — is package
// epoch/etcdepoch; the embedded etcd server is epoch/etcdembed.
//
// # Model
//
// The user space is cut into R ranges (edge.RangeOf, R fixed at cluster
// creation, default 256). Each range has one Pin {region, epoch, notBefore}
// stored as JSON under <prefix>pins/<range, 5 digits>. Each live region keeps
// an etcd lease alive and holds <prefix>regions/<name> bound to it, so the key
// disappears when the region stops keeping the lease alive (crash, partition
// from etcd, or a Close that revokes the lease).
//
// # Invariants
//
//   - Fail closed. A node writes the edges of range g only if pin(g).region is
//     its own region, pin(g).notBefore has passed on its clock, and its proof
//     of authority is younger than TTL − margin. The proof time is the older of
//     (a) the send time of its last successful lease keepalive and (b) the time
//     its pin table was last confirmed current by a linearizable read of every
//     pin. Anything else (unknown pin, no keepalive yet, etcd unreachable)
//     refuses with edge.ErrFailClosed or edge.ErrNotOwner. Decide is that rule,
//     as a pure function.
//   - A move is one etcd transaction: if the pin is still the version that was
//     read (so its epoch is the expected one), write {to, epoch+1, notBefore}.
//     Concurrent moves of the same range from the same epoch: exactly one wins,
//     the others get ErrEpochChanged. Epochs only grow; Init never overwrites.
//   - notBefore = now + TTL + max clock skew. The old owner stops on the watch
//     event, or at the latest when its proof ages past TTL − margin, which was
//     before the move plus TTL; the new owner starts at notBefore. So every
//     old-epoch write precedes every new-epoch write, provided clock skew
//     between regions stays below MaxSkew (an assumption, not a check).
//   - Planned moves (Move/Drain with Planned, what likectl does) also set
//     CatchUp: the new owner may not write until it has caught up on every
//     live region's log and cleared the flag (Settle, same epoch). The catch-up
//     itself is the region's (region/catchup.go); Decide only refuses while the
//     flag is set. Failovers (the Controller) are unplanned and never set it.
//   - The Controller moves ranges only while it is the elected leader, and only
//     through Move, so a stale leader can at worst cause an extra epoch bump,
//     never two owners of one epoch.
//
// # The region registry (RegionState)
//
// Each region of a cluster has a lifecycle state, recorded in etcd
// (etcdepoch registry.go): home (a creation region: the home of the ranges
// Home gives it), joining (added to a running cluster, not yet rebuilt from
// its peers), active (added and caught up), draining (being retired),
// retired (final). CheckTransition is the lifecycle as a pure rule; Target
// says who the failover Controller may give ranges to: home and active
// regions only. A joining region takes pins only by planned moves (the
// catch-up barrier). Failback sends a range only to its home, and only
// while that home is in state home: the homes are the creation regions, so
// a region added later is home to none, and the ranges of a retired home
// fail back nowhere — they stay with whoever holds them (an operator may move
// them). A retired name is never reused: its cells stay part of every count
// under that name. A cluster created before the registry has none: every
// live region is then a target, as before; its first Init or add creates the
// registry, adopting every region that has run in it as active.
//
// # Components (here: Decide, Home, RegionState; the rest in epoch/etcdepoch)
//
//   - Decide: the rule above, pure.
//   - Directory: Init (idempotent creation of the pins), Pins, Pin, Move (the
//     one-transaction compare-and-set), Drain, Settle (clears CatchUp),
//     Regions (live registrations).
//   - KeepAlive: one region's lease and registration, with LastKeepalive.
//   - Authority: edge.Authority for one region (watch-fed pin table, Owner for
//     forwarding, CatchingUp and Seen for the planned-move barrier).
//   - Controller: elected failover of dead regions' ranges.
//   - etcdembed.Embedded: a single-member etcd server in-process (the
//     embedded default); production points etcdepoch.NewClient at an etcd
//     cluster instead.
//   - epochtest: the contract suite, run against either.
//
// # Concurrency
//
// Decide is pure. Directory is a stateless wrapper over a clientv3.Client and
// safe for concurrent use. KeepAlive, Authority and Controller each run one
// goroutine loop started by their constructor; their methods are safe for
// concurrent use, and Close is idempotent and returns only after the loop has
// stopped. None of them closes the etcd client they were given. Loops are
// scheduled in real time (the etcd lease expires in real time); the recorded
// and compared timestamps come from the injected clock.Clock, so tests can age
// a proof with clock.Fake.
package epoch
