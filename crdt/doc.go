// Package crdt is the pure core of likes: the replicated data types every region
// merges, with no I/O, no clocks and no goroutines.
//
// Types:
//
//   - Cell is one PN-counter slot for (item, region, shard). It has exactly one
//     writer in the whole system (the aggregator of that shard in that region), so
//     its history is a chain ordered by HWM, the log position it has applied through.
//   - Register is an edge's last-writer-wins value, ordered by Version (epoch, op).
//   - Watermarks is a per-region vector of "complete through" times.
//   - Branches records, for an edge at the region that owns it in an epoch, the
//     version it branched from, and yields the correction deltas that keep edge
//     contributions telescoping across epochs (DESIGN section 5).
//
// Merge laws. For each of Cell, Register, Watermarks and CellSet, Merge is a
// join-semilattice operation; the property tests in this package check them:
//
//	Merge(a, b)             == Merge(b, a)              (commutative)
//	Merge(Merge(a, b), c)   == Merge(a, Merge(b, c))    (associative)
//	Merge(a, a)             == a                        (idempotent)
//
// so replicas that receive the same set of states in any order, any number of
// times, end in the same state. Cell merge keeps the state with the higher HWM;
// equal HWMs with different contents cannot come from a single writer, but Merge
// still breaks the tie by a total order so the laws hold for every input.
//
// The count of an item is the sum of P−N over all its cells in all regions.
// Apply is the only way a cell grows: it adds a window's plus and minus counts
// and moves HWM forward, and refuses (ErrFenced) a window that does not start
// past the cell's HWM. That refusal is the exactly-once fence.
package crdt
