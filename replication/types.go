package replication

import (
	"context"
	"github.com/likes-dev/likes/replica"

	"github.com/likes-dev/likes/edge"
)

// The replica contract's types (package replica), under their names here.
type (
	CellState  = replica.CellState
	Cursor     = replica.Cursor
	Source     = replica.Source
	Sink       = replica.Sink
	RemotePart = replica.RemotePart
	PartsSink  = replica.PartsSink
)

// PartBatch is a run of one log partition's events: every event with
// Pos in (previous cursor, Through], in Pos order (the previous cursor is
// After).
type PartBatch struct {
	Partition uint32
	Events    []edge.Event
	Through   uint64
	// After is the previous cursor the run starts from (the sender's view of the
	// receiver's cursor). A receiver whose cursor is below After would skip the
	// events in between, so it ignores the run and answers its cursor instead;
	// the sender then resends from there. Zero (from the start) always passes.
	After uint64
}

// Batch is one push from a sender region to a receiver region.
type Batch struct {
	From       string
	Partitions int
	Parts      []PartBatch
	Cells      []CellState
	// CellsThrough is the sender's cell-change sequence the Cells cover through.
	CellsThrough uint64
	// CellsAfter is the cell-change sequence the Cells start after (the sender's
	// view of the receiver's cursor). A receiver whose Cells cursor is below it
	// still merges the Cells (always safe) but neither advances its cursor nor
	// records the Watermark, which would claim changes it never received.
	CellsAfter uint64
	// Watermark, when nonzero, is the sender region's watermark, valid because
	// the batch carries every cell change through CellsThrough and the watermark
	// was read before those changes.
	Watermark int64
}

// ProtocolVersion is the wire protocol version every message carries. A
// receiver rejects other versions with codes.FailedPrecondition.
const ProtocolVersion = 1

// DigestBuckets is how many buckets anti-entropy groups cells into: a cell's
// bucket is edge.Hash(item) % DigestBuckets.
const DigestBuckets = 256

// Peer is another region's replication endpoint, as found by Membership.
type Peer struct {
	Region   string `json:"region"`
	GRPCAddr string `json:"grpcAddr"`
	HTTPAddr string `json:"httpAddr,omitempty"`
	// ProtoMin and ProtoMax are the protocol versions the peer announces
	// (gossip metadata); zero: unknown (a caller then tries its highest and
	// steps down on Unimplemented).
	ProtoMin int `json:"protoMin,omitempty"`
	ProtoMax int `json:"protoMax,omitempty"`
}

// DigestRequest asks a receiver to compare its copy of the sender's cells with
// the sender's: Buckets[i] is the sender's hash of its own cells in bucket i
// (see BucketDigest), DigestBuckets entries.
type DigestRequest struct {
	From       string
	Partitions int
	Buckets    []uint64
}

// DigestResponse lists the buckets whose hash differs at the receiver, and the
// receiver's cursor for the sender (so a sender also learns of a cursor that
// went back, e.g. a receiver restored from an older snapshot).
type DigestResponse struct {
	Mismatched []uint32
	Cursor     Cursor
}

// PinRef names one pin version: a user range at an epoch.
type PinRef struct {
	Range uint32
	Epoch uint64
}

// HeadsRequest is the barrier of planned moves (DESIGN section 5): the new
// owner of Pins asks another region for the heads of its own log, to wait
// until it has applied that log through them before it writes those ranges.
type HeadsRequest struct {
	From       string
	Partitions int
	Pins       []PinRef
}

// HeadsResponse carries the answering region's own-log heads, by partition.
// Every write it made to the requested ranges under an older epoch is at or
// below them.
type HeadsResponse struct {
	Log []uint64
}

// Fencer is the answering side of Heads, implemented by the region: it checks
// that the region's pin table has seen every pin (so it refuses their ranges'
// writes under older epochs), waits for the local writes already authorized
// to reach the log, then reads the log's heads. An error wrapping
// ErrPinNotSeen means "not yet": the asker retries.
type Fencer interface {
	Heads(ctx context.Context, pins []PinRef) ([]uint64, error)
}
