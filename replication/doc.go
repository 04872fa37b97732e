// Package replication joins regions (DESIGN section 5, "Replication"): each
// region ships to every peer its own committed log events and its own cells,
// over gRPC, and finds its peers through hashicorp/memberlist gossip.
//
// Roles:
//
//   - Sender: the shipping protocol towards one peer as a steppable,
//     thread-unsafe core (no goroutines, timers or locks; as raft's RawNode
//     under Node): Next says what to push (the handshake, or a batch read from
//     a Source in the order that keeps the watermark honest), Acked adopts the
//     peer's answer, Refused shrinks the batch limits, AntiEntropy runs a
//     digest round through the push and digest functions it is given. The
//     simulation drives Senders directly over its simulated network.
//   - Shipper (sending side): one goroutine loop per peer driving a Sender,
//     reading a Source (this region's store) and pushing Batches through a
//     Transport (GRPCTransport in production), with backoff and polling.
//   - Server (receiving side): a hand-written gRPC service
//     likes.replication.v1.Replication with unary Push(Batch) → Cursor and
//     Digest(DigestRequest) → DigestResponse, applying pushes to a Sink (this
//     region's store), and Heads(HeadsRequest) → HeadsResponse, the barrier of
//     planned pin moves: a Fencer (the region) confirms it has seen the new
//     pins and has no write under their older epochs in flight, then answers
//     its own-log heads; the new owner writes once its cursor reaches them. A
//     Sink that is also a PartsSink applies a push's partitions in one commit.
//   - Protocol versions (memberlist's ProtocolVersionMin/Max pattern): a
//     region speaks [MinProtocol, MaxProtocol] = [1, 2]. Version 1 is the
//     service above with this package's Go structs as JSON; version 2 is
//     likes.peer.v2.Replication with the protobuf messages of
//     internal/peerpb/peer.proto (positions and times as deltas, the sender
//     once per batch, a fingerprint as its 16 bytes: 115 bytes per like event
//     against 355). A region announces its range in its gossip metadata; a
//     caller talks the highest version both support (without an announcement
//     it tries its highest and steps down when the peer answers
//     Unimplemented, which a region limited to 1 does: it registers only the
//     version-1 service). A call outside the receiver's range is refused with
//     codes.FailedPrecondition naming both ranges, and counted
//     (Server.RefusedProtocol). Decoding a v2 message checks only what the
//     conversion needs (overflowing positions and times); the receiver then
//     validates the batch exactly as a v1 one. One codec (internal/rpcjson:
//     protobuf for generated messages, JSON otherwise) is installed per
//     connection and per server; nothing is registered globally.
//   - Membership: gossip on a bind address; node metadata is
//     {region, grpcAddr, httpAddr, protoMin, protoMax}; Peers lists one endpoint per other region
//     and Changes signals when that may have changed. It is the Shipper's
//     PeerSource.
//
// Invariants:
//
//   - Each region ships only what it is the single writer of: its own log
//     events (flips, retractions, erasures, corrections, records, purges) and
//     its own cells. Nothing is relayed, so the replication graph is a full
//     mesh and no event is shipped by two regions.
//   - Receivers apply idempotently and track cursors atomically with the apply
//     (Sink.ApplyRemote records the partition cursor in the same write as the
//     events; Sink.MergeCells records the cell cursor and watermark in the same
//     write as the cells). Cells merge with crdt.MergeCell, so any cell state
//     may be delivered any number of times in any order.
//   - Senders resume from the receiver's cursor: the first push of every loop is
//     an empty handshake that returns it, and every push returns it again. The
//     sender adopts what it is told, even a cursor that went back (a receiver
//     restored from an older snapshot): resending is harmless, skipping is not.
//   - No gaps: every run carries the cursor it starts after (PartBatch.After,
//     Batch.CellsAfter). A receiver whose cursor is below it applies nothing of
//     that run (cells are still merged: states are always safe) and answers its
//     cursor, from which the sender resends.
//   - A watermark is shipped only together with every cell change through it:
//     the sender reads its watermark FIRST, then the log, then the cell changes,
//     and attaches the watermark only when the cell changes were read to the
//     end (fewer than MaxCells). The receiver records it only when the batch
//     continues its cell cursor. So "asOf" at a receiver never claims a cell
//     state it has not got.
//   - Anti-entropy repairs what the cursors cannot see (a receiver that lost
//     cells): every AntiEntropy interval the sender digests its own cells into
//     256 buckets (edge.Hash(item) % 256, a sum of per-cell hashes), the
//     receiver digests its copy of the sender's cells and names the buckets
//     that differ, and the sender pushes the full latest state of those
//     buckets' cells without moving the cell cursor and without a watermark.
//   - Never a silent skip (snapshot.go): a read of the Source below its
//     retention truncation point fails with pipeline.ErrTruncated; the Sender
//     marks the peer Behind and its driver catches it up from a snapshot
//     (Sender.Snapshot → Server.Snapshot, validated like a push, applied
//     through the Sink's SnapshotSink; over protocol 2 its own Snapshot
//     method, snapshot2.go, falling back to version 1 for that call only when
//     an older peer lacks it), then ships the log from the snapshot's mark. A peer whose cursor is past this region's head
//     (restored or rebuilt data here) gets nothing but ErrPeerAhead.
//   - Partition counts must match: a push or digest from a region with another
//     Partitions is refused with codes.FailedPrecondition. Protocol versions
//     must match the same way.
//
// Errors: IsRetryable is the one classifier (Unavailable, DeadlineExceeded,
// ResourceExhausted). The shipper backs off exponentially with jitter from
// RetryMin to RetryMax on retryable and local errors, waits RetryMax at once on
// the rest, and halves its batch limits on ResourceExhausted. Waits use the
// injected clock's tickers.
//
// Concurrency: Shipper, Server, GRPCTransport and Membership are safe for
// concurrent use. Every Shipper goroutine stops on Close, which is idempotent
// and waits. The Server applies one sender's pushes one at a time (a retried
// push cannot interleave with a slow original) and different senders
// concurrently; the Sink must therefore be safe for concurrent use across
// senders. The Source is read concurrently by every peer loop.
package replication
