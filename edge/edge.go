package edge

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"strconv"

	"github.com/likes-dev/likes/crdt"
)

// Buckets is the number of buckets an item's edges spread over.
const Buckets = 64

// Errors returned by the write path. Callers match them with errors.Is.
var (
	ErrKeyConflict = errors.New("edge: idempotency key reused with a different request")
	ErrErased      = errors.New("edge: user has been erased")
	ErrStaleEpoch  = errors.New("edge: write authority is stale (edge already written in a newer epoch)")
	ErrNotOwner    = errors.New("edge: this region does not hold the pin for the user's range")
	ErrFailClosed  = errors.New("edge: cannot prove write authority, failing closed")
	// ErrStorageUnavailable: the store cannot write now (disk full or below its
	// free-space watermark, an I/O or sync error, a stall). Returned at once,
	// never after queueing; the write was not acknowledged and a retry with the
	// same idempotency key is safe.
	ErrStorageUnavailable = errors.New("edge: storage cannot accept writes now")
	// ErrBadCursor: a Likers cursor the store did not issue (the caller's
	// mistake, 400). Every store wraps it; any other Likers error is the
	// store's failure.
	ErrBadCursor = errors.New("edge: cursor was not issued by this store")
)

// Hash is the one hash used for every placement decision (64-bit FNV-1a).
func Hash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// BucketOf is the bucket of a user's edges (h(user) % 64).
func BucketOf(user string) uint32 { return uint32(Hash(user) % Buckets) }

// RangeOf is the write-authority range of a user (h(user) % ranges).
func RangeOf(user string, ranges int) uint32 { return uint32(Hash(user) % uint64(ranges)) }

// PartitionOf is the log partition of an (item, bucket): h(item "#" bucket) % partitions.
func PartitionOf(item string, bucket uint32, partitions int) uint32 {
	return uint32(Hash(item+"#"+strconv.FormatUint(uint64(bucket), 10)) % uint64(partitions))
}

// Kind says why an event was written.
type Kind uint8

// Event kinds.
const (
	KindFlip       Kind = 1 // a user's like or unlike
	KindRetraction Kind = 2 // the abuse system's unlike, same path as users
	KindErasure    Kind = 3 // account erasure: the edge becomes an ERASED tombstone
	KindCorrection Kind = 4 // branch correction after a failover (DESIGN section 5)
	KindRecord     Kind = 5 // an idempotency record of a no-op write, carried for replication only
	KindPurge      Kind = 6 // an erased user's records and index were purged (replication only)
	KindReconcile  Kind = 7 // a reconciliation heal of an item's count (User is empty)
	KindErasing    Kind = 8 // an account erasure started at the user's home (replication only)
)

// LastKind is the highest event kind; kinds in [KindFlip, LastKind] are valid.
const LastKind = KindErasing

// Counted reports whether events of this kind contribute deltas to cells.
func (k Kind) Counted() bool {
	return (k >= KindFlip && k <= KindCorrection) || k == KindReconcile
}

// HasItem reports whether events of this kind name an item; a purge and an
// erasure mark are about a user alone, and carry none.
func (k Kind) HasItem() bool { return k != KindPurge && k != KindErasing }

// HasUser reports whether events of this kind name a user; a reconcile heal
// is about an item alone.
func (k Kind) HasUser() bool { return k != KindReconcile }

func (k Kind) String() string {
	switch k {
	case KindFlip:
		return "flip"
	case KindRetraction:
		return "retraction"
	case KindErasure:
		return "erasure"
	case KindCorrection:
		return "correction"
	case KindRecord:
		return "record"
	case KindPurge:
		return "purge"
	case KindReconcile:
		return "reconcile"
	case KindErasing:
		return "erasing"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Edge is the truth for one (item, user).
type Edge struct {
	Item      string
	User      string
	State     crdt.State
	Version   crdt.Version
	UpdatedAt int64 // Unix ms
}

// Register is the edge's replicated value.
func (e Edge) Register() crdt.Register { return crdt.Register{Version: e.Version, State: e.State} }

// Event is one committed change, appended to the log in the same atomic write as
// the edge. For a correction, Version and State are the replicated version the
// correction accounts for (its dedupe identity), not a new edge version.
type Event struct {
	Partition uint32
	Pos       uint64 // assigned by the log; 0 until committed
	Item      string
	User      string
	Bucket    uint32
	Version   crdt.Version
	State     crdt.State
	Delta     int32
	EventTime int64 // Unix ms, assigned at commit
	Kind      Kind
	// Idem is the idempotency record written with this event, if any; it travels
	// with the event so a new owner replays answers the old owner gave.
	Idem *IdemRef
}

// IdemRef is an idempotency record as carried by an event.
type IdemRef struct {
	Key         string
	Fingerprint string
	ExpiresAt   int64
	Liked       bool
	Changed     bool
}

// Record returns the idempotency record the reference describes.
func (r IdemRef) Record(item, user string) IdemRecord {
	return IdemRecord{Fingerprint: r.Fingerprint, ExpiresAt: r.ExpiresAt,
		Answer: Answer{Item: item, User: user, Liked: r.Liked, Changed: r.Changed}}
}

// Answer is what a write request is told, and what an idempotency record replays.
type Answer struct {
	Item    string `json:"itemId"`
	User    string `json:"userId"`
	Liked   bool   `json:"liked"`
	Changed bool   `json:"changed"`
}

// IdemRecord is the stored answer of an idempotency key.
type IdemRecord struct {
	Fingerprint string
	Answer      Answer
	ExpiresAt   int64 // Unix ms
}

// Request is one conditional write, as handed to a Store.
type Request struct {
	Item        string
	User        string
	Target      crdt.State
	Kind        Kind
	IdemKey     string // empty: no idempotency record (erasure, retraction)
	Fingerprint string
	Epoch       uint64
	Now         int64 // Unix ms
	IdemTTLms   int64
	// Deadline (Unix ms; 0: none) is when the write authority behind Epoch
	// stops being provable (the lease proof's end, Deadliner). A store whose
	// commit can be slow (Cassandra) commits nothing at or after it and fails
	// with ErrFailClosed: a write authorized in time but committed after a
	// failover would be a straggler under a stale epoch.
	Deadline int64
}

// Fingerprint identifies a request's meaning for idempotency: the same key may
// only ever be used for the same operation on the same edge.
func Fingerprint(op string, item, user string) string {
	h := sha256.New()
	for _, s := range []string{op, item, user} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Action is what Decide chose.
type Action uint8

// Decide's actions.
const (
	ActWrite    Action = iota + 1 // write a new edge version (+ event + record)
	ActNoop                       // state already as asked: write only the record
	ActReplay                     // same key, same request: answer as before, write nothing
	ActConflict                   // same key, different request
	ActErased                     // the user's edges are tombstoned
	ActStale                      // the edge is at a newer epoch than the writer's
)

// Decision is the outcome of Decide: what to write, and what to answer.
type Decision struct {
	Action Action
	Answer Answer
	Edge   Edge   // the edge after the write (ActWrite) or as found
	Event  *Event // the event to append (ActWrite only); Partition/Pos left to the store
	// Branch is set when this write is the first in Request.Epoch for this edge:
	// the store must persist Base as the edge's branch for the epoch.
	Branch *crdt.Branch
}

// Decide is the whole conditional-write rule, pure so every store applies the
// same one. cur is the edge as stored (zero Edge when absent); rec is the
// idempotency record for (user, key), or nil; erased says the user's erasure has
// started, after which only erasure writes pass.
func Decide(cur Edge, rec *IdemRecord, erased bool, req Request) Decision {
	if erased && req.Kind != KindErasure {
		return Decision{Action: ActErased, Edge: cur}
	}
	if rec != nil && rec.ExpiresAt > req.Now {
		if rec.Fingerprint == req.Fingerprint {
			return Decision{Action: ActReplay, Answer: rec.Answer, Edge: cur}
		}
		return Decision{Action: ActConflict, Edge: cur}
	}
	if cur.State == crdt.Erased {
		if req.Kind == KindErasure {
			return Decision{Action: ActNoop, Edge: cur, Answer: Answer{Item: req.Item, User: req.User}}
		}
		return Decision{Action: ActErased, Edge: cur}
	}
	if cur.Version.Epoch > req.Epoch {
		return Decision{Action: ActStale, Edge: cur}
	}
	ans := Answer{Item: req.Item, User: req.User, Liked: req.Target == crdt.Liked}
	firstTouch := cur.Version.Epoch < req.Epoch
	if cur.State == req.Target && !firstTouch {
		return Decision{Action: ActNoop, Answer: ans, Edge: cur}
	}
	ans.Changed = cur.State != req.Target
	next := Edge{
		Item:      req.Item,
		User:      req.User,
		State:     req.Target,
		Version:   crdt.Version{Epoch: req.Epoch, Op: cur.Version.Op + 1},
		UpdatedAt: req.Now,
	}
	d := Decision{
		Action: ActWrite,
		Answer: ans,
		Edge:   next,
		Event: &Event{
			Item:    req.Item,
			User:    req.User,
			Bucket:  BucketOf(req.User),
			Version: next.Version,
			State:   next.State,
			Delta:   int32(req.Target.Counts() - cur.State.Counts()),
			Kind:    req.Kind,
		},
	}
	if firstTouch {
		d.Branch = &crdt.Branch{Epoch: req.Epoch, Base: cur.Register()}
	}
	return d
}

// Record is the idempotency record a decision leaves behind, or nil when none is
// to be written (replay, conflict, no key).
func (d Decision) Record(req Request) *IdemRecord {
	if req.IdemKey == "" || (d.Action != ActWrite && d.Action != ActNoop) {
		return nil
	}
	return &IdemRecord{Fingerprint: req.Fingerprint, Answer: d.Answer, ExpiresAt: req.Now + req.IdemTTLms}
}

// LogEvent is the event a store appends for this decision, or nil: the write's
// event for ActWrite, a KindRecord event for a no-op that leaves an idempotency
// record (so the record replicates), with the record attached in both cases.
// Partition, Pos and EventTime are left to the store.
func (d Decision) LogEvent(req Request) *Event {
	rec := d.Record(req)
	var ev Event
	switch {
	case d.Action == ActWrite:
		ev = *d.Event
	case d.Action == ActNoop && rec != nil:
		ev = Event{Item: req.Item, User: req.User, Bucket: BucketOf(req.User),
			Version: d.Edge.Version, State: d.Edge.State, Kind: KindRecord}
	default:
		return nil
	}
	if rec != nil {
		ev.Idem = &IdemRef{Key: req.IdemKey, Fingerprint: rec.Fingerprint, ExpiresAt: rec.ExpiresAt,
			Liked: rec.Answer.Liked, Changed: rec.Answer.Changed}
	}
	return &ev
}

// Err maps a refusing decision to its error, nil for the others.
func (d Decision) Err() error {
	switch d.Action {
	case ActConflict:
		return ErrKeyConflict
	case ActErased:
		return ErrErased
	case ActStale:
		return ErrStaleEpoch
	}
	return nil
}
