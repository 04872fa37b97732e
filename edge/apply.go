package edge

import "github.com/likes-dev/likes/crdt"

// RemoteLocal is what a region holds, before a replicated event is applied,
// for the edge and the user the event names. A store reads it (within the
// atomic write that will apply the event, or at least ordered before it),
// calls ApplyRemoteEvent, and writes what RemoteWrites says.
type RemoteLocal struct {
	// Edge is the local edge (zero Edge when absent).
	Edge Edge
	// Branches are the edge's branch records here.
	Branches crdt.Branches
	// Corrections is the number of corrections appended for the edge here:
	// the dedupe sequence of its corrections (a store may use any sequence
	// that grows with every event it appends for the edge).
	Corrections uint64
	// Job is the user's erasure job or mark here, nil when there is none.
	Job *ErasureJob
	// HasRecord says an idempotency record for (event user, Idem.Key) exists
	// here (only looked at when the event carries one; After keeps it for
	// the same key only).
	HasRecord bool
}

// RemoteWrites is everything applying one replicated event writes. A store
// writes all of it atomically (or, where it cannot, in an order whose every
// prefix is safe to repeat: see store/cassandra's doc). The zero value writes
// nothing.
type RemoteWrites struct {
	// Edge is the edge's new value (last-writer-wins by (epoch, op)), nil when
	// the local edge stays.
	Edge *Edge
	// Index: the user-index entry (user, item) must exist (the edge is not
	// ERASED here).
	Index bool
	// Unindex: the user-index entry (user, item) must go (the edge arrived
	// ERASED after the user's erasure finished here: no purge will come to
	// drop it, since purges and tombstones travel in different partitions).
	Unindex bool
	// BranchesChanged: persist Branches and Corrections as the edge's branch
	// record.
	BranchesChanged bool
	Branches        crdt.Branches
	Corrections     uint64
	// Correction is the event to append to the local log, its Version
	// already the edge's correction sequence {0, Corrections}: corrections of
	// one edge may arrive out of their remote versions' order (branches
	// corrected from different regions), and the aggregator dedupes them by
	// a growing version.
	Correction *Event
	// Record is the idempotency record to store under the event's Idem.Key
	// (only when none exists here: the first answer given for a key stays;
	// never for a user whose erasure has started here).
	Record *IdemRecord
	// Job is the user's erasure job to store: a mark of another region's
	// erasure (Remote), or this region's own job re-opened by a late edge
	// (ReopenLate).
	Job *ErasureJob
	// Purge: remove the user's idempotency records and the user-index entries
	// of the user's edges PurgeDrops says go (the origin purged the user).
	Purge bool
}

// Empty reports whether w writes nothing.
func (w RemoteWrites) Empty() bool {
	return w.Edge == nil && !w.Index && !w.Unindex && !w.BranchesChanged && w.Correction == nil && w.Record == nil && w.Job == nil && !w.Purge
}

// ApplyRemoteEvent is the whole rule for one event replicated from another
// region, pure so every store applies the same one (as Decide is for local
// writes):
//
//   - corrections and reconciliations change nothing (the sender's own cells
//     account for them);
//   - KindErasing marks the user as being erased here (a Remote job) unless
//     a job exists, so this region refuses the user's writes too;
//   - KindPurge purges the user's records and the index entries of edges
//     ERASED (or absent) here, and marks a Remote job done (this region's
//     own job, or one already done, stays as it is);
//   - every other event carries an edge version: its idempotency record is
//     stored unless one exists for the key or the user's erasure has started
//     here (an erased user's records are purged, and no request of the user
//     is ever replayed again: Decide refuses it first); the edge merges last-writer-wins
//     by (epoch, op) (ApplyRemote), and a new version that is not ERASED
//     gets its user-index entry and re-opens this region's own erasure job of
//     the user, if any (ReopenLate); branch corrections are appended with the
//     edge's next correction sequence; a tombstone arriving after the user's
//     erasure finished here drops its user-index entry (the purge that would
//     have dropped it came first, from another log partition).
//
// Applying the same event twice writes nothing new the second time (the
// second RemoteWrites, applied to the state the first left, changes nothing);
// edge versions converge whatever their delivery order.
func ApplyRemoteEvent(l RemoteLocal, ev Event) RemoteWrites {
	var w RemoteWrites
	switch ev.Kind {
	case KindCorrection, KindReconcile:
		return w
	case KindErasing:
		if l.Job == nil {
			w.Job = &ErasureJob{User: ev.User, State: ErasureRunning, StartedAt: ev.EventTime, Remote: true}
		}
		return w
	case KindPurge:
		w.Purge = true
		if l.Job == nil || (l.Job.Remote && l.Job.State != ErasureDone) {
			j := ErasureJob{User: ev.User, State: ErasureDone, FinishedAt: ev.EventTime, Remote: true}
			if l.Job != nil {
				j.StartedAt = l.Job.StartedAt
			}
			w.Job = &j
		}
		return w
	}
	if ev.Idem != nil && !l.HasRecord && l.Job == nil {
		r := ev.Idem.Record(ev.Item, ev.User)
		w.Record = &r
	}
	res := ApplyRemote(l.Edge, l.Branches, ev)
	if res.EdgeChanged {
		e := res.Edge
		w.Edge = &e
		switch {
		case e.State != crdt.Erased:
			w.Index = true
			if l.Job != nil && !l.Job.Remote {
				j := ReopenLate(*l.Job)
				w.Job = &j
			}
		case l.Job != nil && l.Job.State == ErasureDone:
			w.Unindex = true
		}
	}
	w.Branches, w.Corrections = l.Branches, l.Corrections
	if res.Correction != nil {
		w.Corrections++
		c := *res.Correction
		c.Version = crdt.Version{Op: w.Corrections}
		w.Correction = &c
	}
	if res.BranchesChanged || res.Correction != nil {
		w.BranchesChanged = true
		w.Branches = res.Branches
	}
	return w
}

// After is the local state once w is written (records, index entries and the
// purge are outside RemoteLocal, except HasRecord): a store that applies
// several events of one edge without reading back its own writes folds them
// with it.
func (l RemoteLocal) After(w RemoteWrites) RemoteLocal {
	if w.Edge != nil {
		l.Edge = *w.Edge
	}
	if w.BranchesChanged {
		l.Branches, l.Corrections = w.Branches, w.Corrections
	}
	if w.Job != nil {
		j := *w.Job
		l.Job = &j
	}
	if w.Record != nil {
		l.HasRecord = true
	}
	if w.Purge {
		l.HasRecord = false
	}
	return l
}

// PurgeDrops reports whether a purge removes the user-index entry of an edge
// found (or not) here: only entries of edges ERASED or absent go. An entry of
// an edge that is not ERASED here stays: its erasure went to another owner and
// has not replicated back, or the edge arrived late (ReopenLate), and the
// eraser must list it.
func PurgeDrops(e Edge, found bool) bool { return !found || e.State == crdt.Erased }
