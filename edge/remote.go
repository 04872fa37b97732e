package edge

import "github.com/likes-dev/likes/crdt"

// RemoteResult is what applying one replicated event does at a region.
type RemoteResult struct {
	// Edge is the local edge after last-writer-wins by (epoch, op).
	Edge        Edge
	EdgeChanged bool
	// Branches are the local branch records after Observe.
	Branches        crdt.Branches
	BranchesChanged bool
	// Correction is the event to append to the local log when the replicated
	// version changes what this region's own writes assumed (nil otherwise).
	// Its Version is the replicated version; a store replaces it with the edge's
	// own correction sequence {0, n} before appending, because corrections of
	// one edge may arrive out of version order (branches corrected from
	// different regions) and the aggregator dedupes them by a growing version.
	Correction *Event
}

// ApplyRemote is the pure rule for a replicated edge version arriving from
// another region (DESIGN section 5): the edge merges last-writer-wins, and every
// branch this region opened in a later epoch whose base is older than the
// arriving version owes a correction, so that the contributions of all regions'
// writes telescope to the final state exactly once. Applying the same event twice
// is a no-op the second time. Events that carry no edge version (corrections,
// purges, erasure starts, reconciliations) change nothing here.
func ApplyRemote(local Edge, bs crdt.Branches, ev Event) RemoteResult {
	res := RemoteResult{Edge: local, Branches: bs}
	if ev.Kind == KindCorrection || ev.Kind == KindPurge || ev.Kind == KindReconcile || ev.Kind == KindErasing {
		return res
	}
	remote := crdt.Register{Version: ev.Version, State: ev.State}
	if local.Register().Less(remote) {
		res.Edge = Edge{Item: ev.Item, User: ev.User, State: ev.State, Version: ev.Version, UpdatedAt: ev.EventTime}
		res.EdgeChanged = true
	}
	delta, out, changed := bs.Observe(remote)
	res.Branches, res.BranchesChanged = out, changed
	if delta != 0 {
		res.Correction = &Event{
			Item: ev.Item, User: ev.User, Bucket: BucketOf(ev.User),
			Version: ev.Version, State: ev.State, Delta: int32(delta), Kind: KindCorrection,
		}
	}
	return res
}
