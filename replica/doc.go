// Package replica is the contract between a region's store and replication:
// what a store offers the sending side (Source: its own log, cell changes,
// watermark) and the receiving side (Sink, PartsSink: apply another region's
// events and cells, idempotently, with the cursor), and the plain types they
// speak (CellState, Cursor, RemotePart). Stores implement it without linking
// the replication layer (gRPC, memberlist); package replication consumes it
// under the same names.
//
// It holds types and interfaces only: no I/O, no state. What a Sink does with
// each event is edge.ApplyRemoteEvent (pure, shared by every store); the
// contract every Source and Sink passes is edgetest.RunReplica and
// RunReplicaCells (Pebble and Cassandra run it).
package replica
