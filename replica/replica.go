package replica

import (
	"context"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// CellState is the latest state of one cell, as shipped (delta-state CRDT: the
// receiver merges it with crdt.MergeCell, so resending is always safe).
type CellState struct {
	Key  crdt.CellKey
	Cell crdt.Cell
}

// MaxHWM bounds a shipped cell's HWM (a log position). Stores order cell
// writes by it (Cassandra: USING TIMESTAMP hwm for a peer's cell, 2^56 + hwm
// for this region's own, which must fit an int64), so a larger one, which no
// real log reaches, is refused where it enters (replication's validation)
// rather than let it overflow or freeze a cell against every later write.
const MaxHWM = uint64(1) << 62

// Cursor is how far a receiver has applied a sender's streams: per log
// partition the last applied position, and the sender's cell-change sequence.
type Cursor struct {
	Log   []uint64
	Cells uint64
}

// PeerCursor is one peer's acknowledged cursor for this region's streams
// (what it stored atomically with what it applied, as its last answer said):
// the input every store's retention takes to hold truncation back.
type PeerCursor struct {
	Region string
	Cursor Cursor
}

// Source is the sending side of a region's store.
type Source interface {
	// Partitions is the log partition count (the same in every region).
	Partitions() int
	// Read returns up to max own-log events of partition with Pos > after.
	Read(ctx context.Context, partition uint32, after uint64, max int) ([]edge.Event, pipeline.Head, error)
	// CellChanges returns the latest states of own-region cells changed after
	// sequence `after`, up to max, and the sequence they cover through.
	CellChanges(ctx context.Context, after uint64, max int) (cells []CellState, through uint64, err error)
	// OwnWatermark is this region's watermark (min over its partitions).
	OwnWatermark(ctx context.Context) (int64, error)
	// ScanCells calls fn for every cell of region held locally (anti-entropy).
	ScanCells(ctx context.Context, region string, fn func(CellState) error) error
}

// Sink is the receiving side of a region's store. Every method is idempotent.
type Sink interface {
	// ApplyRemote applies a sender's events of one partition with Pos > the
	// recorded cursor: edges last-writer-wins by (epoch, op), idempotency records,
	// purges, and branch corrections appended to the local log, atomically with
	// the new cursor `through`.
	ApplyRemote(ctx context.Context, from string, partition uint32, evs []edge.Event, through uint64) error
	// MergeCells merges a sender's cells (never this region's own) and records
	// cellsThrough and, when nonzero, the sender's watermark, atomically.
	MergeCells(ctx context.Context, from string, cells []CellState, cellsThrough uint64, watermark int64) error
	// Cursor returns what has been applied from `from`.
	Cursor(ctx context.Context, from string) (Cursor, error)
	// ScanCells calls fn for every cell of region held locally (anti-entropy).
	ScanCells(ctx context.Context, region string, fn func(CellState) error) error
}

// RemotePart is one partition's run of a sender's events for PartsSink.
type RemotePart struct {
	Partition uint32
	Events    []edge.Event
	Through   uint64
}

// PartsSink is a Sink that can apply the runs of several partitions in one
// commit, each exactly as ApplyRemote would. The Server uses it when the Sink
// has it: a push then costs one durable commit, not one per partition.
type PartsSink interface {
	ApplyRemoteParts(ctx context.Context, from string, parts []RemotePart) error
}
