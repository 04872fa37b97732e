package pipeline

import (
	"context"
	"errors"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// ErrFenced is returned by CellStore.Commit when a cell's stored HWM is not the
// one the window expected: another writer (or an earlier incarnation of this one)
// got there first. Nothing of the window was written. It is crdt.ErrFenced:
// one fence error whichever layer finds it.
var ErrFenced = crdt.ErrFenced

// ErrTruncated is returned by a Log (or a replication source) asked to read
// after a position below its truncation point: the events in between were
// deleted by retention, and a reader that went on from the next one would skip
// them silently. A peer that meets it catches up from a snapshot instead.
var ErrTruncated = errors.New("pipeline: log truncated below the requested position")

// Head describes a log partition at the moment of a read: every event with
// EventTime <= CompleteThrough has Pos <= Pos.
type Head struct {
	Pos             uint64
	CompleteThrough int64 // Unix ms
}

// Log is the committed log as the aggregator consumes it.
type Log interface {
	Partitions() int
	// Read returns up to max events of partition with Pos > after, in Pos order,
	// and the partition's head as of the read.
	Read(ctx context.Context, partition uint32, after uint64, max int) ([]edge.Event, Head, error)
}

// EdgeKey names an edge.
type EdgeKey struct {
	Item string
	User string
}

// Applied is an edge's dedupe state at an aggregator: the newest write version and
// the newest correction version applied, and the event time of the newest event
// applied (At, Unix ms; 0 when unknown: written before it existed). At is what
// dedupe pruning reads (see the package documentation, "Bounded state").
type Applied struct {
	Write      crdt.Version
	Correction crdt.Version
	At         int64
}

// CellUpdate is one fenced cell write: store Cell only if the stored HWM == Expect
// (0 for a cell that does not exist yet).
type CellUpdate struct {
	Key    crdt.CellKey
	Expect uint64
	Cell   crdt.Cell
}

// Window is one aggregator commit.
type Window struct {
	Partition uint32
	Through   uint64 // the consumer position after this window
	Watermark int64
	Cells     []CellUpdate
	Dedupe    map[EdgeKey]Applied
	// BaseRead says the aggregator read this window's base (the cells and
	// dedupe state it folded onto) with the store's own BaseReader.Base. A
	// store whose Base reads each item in one isolated read, and whose cell
	// writes are ordered by their log prefix (Cassandra's, see its package
	// doc), has no need to check the fences of such a window again at
	// Commit; every other store checks them whatever this says.
	BaseRead bool
}

// BaseReader is what a CellStore may add: the cells and dedupe state a
// window folds onto (what Cells and Applied answer, same semantics) in one
// call, so a store keeping an item's cells and its edges' dedupe state in one
// partition reads each item once. The aggregator uses it when present.
type BaseReader interface {
	Base(ctx context.Context, partition uint32, cells []crdt.CellKey, edges []EdgeKey) (map[crdt.CellKey]crdt.Cell, map[EdgeKey]Applied, error)
}

// CellStore is where an aggregator keeps its cells, dedupe state and position.
type CellStore interface {
	// Position returns the partition's committed consumer position and watermark.
	Position(ctx context.Context, partition uint32) (pos uint64, watermark int64, err error)
	// Cells reads cells; missing ones are absent from the map.
	Cells(ctx context.Context, keys []crdt.CellKey) (map[crdt.CellKey]crdt.Cell, error)
	// Applied reads dedupe state; missing edges are absent from the map.
	Applied(ctx context.Context, partition uint32, keys []EdgeKey) (map[EdgeKey]Applied, error)
	// Commit writes a window: all cell updates fenced (ErrFenced and nothing
	// written if any fence fails), the dedupe state, the position and watermark.
	Commit(ctx context.Context, w Window) error
}
