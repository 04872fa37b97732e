package replica

import (
	"context"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// Snapshot catch-up (issue 14): a peer whose cursor is below the sender's
// truncation point (it was away longer than the retention horizon) gets the
// sender's state instead of the deleted log: edges, idempotency records,
// erasure marks and the sender's own cells, read from one consistent store
// snapshot in bounded chunks, then the log from the snapshot's mark.

// SnapRecord is one idempotency record in a snapshot.
type SnapRecord struct {
	User, Key, Fingerprint string
	ExpiresAt              int64 // Unix ms
	Liked, Changed         bool
}

// SnapErasure is one erasure mark in a snapshot: the user's erasure started
// (Done false) or finished and purged (Done true) at time At.
type SnapErasure struct {
	User string
	Done bool
	At   int64
}

// SnapshotChunk is a bounded part of a snapshot.
type SnapshotChunk struct {
	Edges    []edge.Edge
	Records  []SnapRecord
	Erasures []SnapErasure
	Cells    []CellState // the sender's own cells only
	// YourCells are the receiver's own cells as the sender holds them: only
	// in a rebuild (the receiver lost its data and asked for it).
	YourCells []CellState
}

// Len is the number of entries the chunk carries.
func (c SnapshotChunk) Len() int {
	return len(c.Edges) + len(c.Records) + len(c.Erasures) + len(c.Cells) + len(c.YourCells)
}

// SnapshotMark is where a snapshot stands in its sender's streams: it holds
// the effect of every own-log event through Log[p] and every cell change
// through Cells (it may hold later ones too: applying those again from the
// log is harmless, skipping earlier ones would not be).
type SnapshotMark struct {
	Log   []uint64
	Cells uint64
	// YourLog, in a rebuild, is the sender's cursor for the receiver's own
	// log: the receiver's new events must take positions past it.
	YourLog []uint64
	// YourCells, in a rebuild, is the sender's cursor for the receiver's
	// cell changes: the receiver's new changes must take sequences past it.
	YourCells uint64
}

// Clone is a copy of m that shares no slice with it.
func (m SnapshotMark) Clone() SnapshotMark {
	m.Log = append([]uint64(nil), m.Log...)
	if m.YourLog != nil {
		m.YourLog = append([]uint64(nil), m.YourLog...)
	}
	return m
}

// SnapshotReader reads one consistent snapshot in chunks. Not safe for
// concurrent use; Close releases the snapshot.
type SnapshotReader interface {
	Mark() SnapshotMark
	// Next returns the next chunk of at most max entries; more is false
	// after the last one.
	Next(ctx context.Context, max int) (c SnapshotChunk, more bool, err error)
	Close() error
}

// SnapshotSource is a Source that can open snapshots.
type SnapshotSource interface {
	OpenSnapshot(ctx context.Context) (SnapshotReader, error)
}

// RebuildSource is a SnapshotSource that can also read, for a region that
// lost its data, that region's cells and the cursor of its log as held here.
type RebuildSource interface {
	OpenRebuildSnapshot(ctx context.Context, forRegion string) (SnapshotReader, error)
}

// RebuildSink is a Sink rebuilding from its peers (--bootstrap-from-peers):
// until each peer's rebuild snapshot is finished it refuses that peer's
// pushes (the peer then sends one) and refuses client writes.
type RebuildSink interface {
	WantsRebuild(ctx context.Context, from string) (bool, error)
}

// SnapshotSink is a Sink that applies snapshots: chunks through the same
// rules as replicated events (edges last-writer-wins with branch corrections,
// records kept if absent, erasure marks, cells merged), then the mark, which
// raises the cursor for `from` to it (never lowers it). Both idempotent.
type SnapshotSink interface {
	ApplySnapshot(ctx context.Context, from string, c SnapshotChunk) error
	FinishSnapshot(ctx context.Context, from string, m SnapshotMark) error
}

// SnapEdgeEvent is the replicated event a snapshot's edge is applied as (and
// validated as, by edge.ValidateEvent): the edge's version and state, counted
// nothing itself (Delta 0; branch corrections arise at the receiver as for a
// replicated event).
func SnapEdgeEvent(e edge.Edge, partitions int) edge.Event {
	kind := edge.KindFlip
	if e.State == crdt.Erased {
		kind = edge.KindErasure
	}
	b := edge.BucketOf(e.User)
	return edge.Event{
		Item: e.Item, User: e.User, Bucket: b, Partition: edge.PartitionOf(e.Item, b, partitions),
		Kind: kind, State: e.State, Version: e.Version, EventTime: e.UpdatedAt,
	}
}

// SnapErasureEvent is the replicated event an erasure mark is applied as: an
// erasure start or a purge.
func SnapErasureEvent(x SnapErasure, partitions int) edge.Event {
	kind := edge.KindErasing
	if x.Done {
		kind = edge.KindPurge
	}
	b := edge.BucketOf(x.User)
	return edge.Event{User: x.User, Bucket: b, Partition: edge.PartitionOf("", b, partitions), Kind: kind, EventTime: x.At}
}
