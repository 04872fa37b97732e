package pebblestore

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// Recount is the reconciliation view of one item at this region.
type Recount struct {
	Item  string `json:"itemId"`
	Liked int64  `json:"likedEdges"`
	Cells int64  `json:"cellSum"`
	// Mismatch is Liked − Cells: what a heal would add.
	Mismatch int64 `json:"mismatch"`
	Healed   bool  `json:"healed"`
}

// RecountItem counts the item's LIKED edges in the local replica and sums its
// cells. Meaningful only on a converged snapshot (aggregators and replication
// caught up); Reconcile's caller checks that.
func (s *Store) RecountItem(ctx context.Context, item string) (Recount, error) {
	prefix := edgePrefix(item)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return Recount{}, err
	}
	var liked int64
	for ok := it.First(); ok; ok = it.Next() {
		if v := it.Value(); len(v) > 0 && crdt.State(v[0]) == crdt.Liked {
			liked++
		}
	}
	if err := it.Close(); err != nil {
		return Recount{}, err
	}
	cells, err := s.Count(ctx, item)
	if err != nil {
		return Recount{}, err
	}
	return Recount{Item: item, Liked: liked, Cells: cells, Mismatch: liked - cells}, nil
}

// Heal appends a reconcile event carrying delta for item to this region's log,
// so the difference flows through the ordinary fenced pipeline as its own event.
func (s *Store) Heal(ctx context.Context, item string, delta int64) error {
	if delta == 0 {
		return nil
	}
	if delta > 1<<30 || delta < -(1<<30) {
		return fmt.Errorf("pebblestore: heal of %d for %q is out of range", delta, item)
	}
	_, err := s.submit(ctx, &op{fn: func(_ *pebble.Batch, w *batchWriter) error {
		w.appendEvent(edge.Event{Item: item, Kind: edge.KindReconcile, Delta: int32(delta)})
		return nil
	}})
	return err
}

// Items lists up to limit distinct items that have edges or cells, after `after`.
func (s *Store) Items(_ context.Context, after string, limit int) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, prefix := range []byte{'e', 'c'} {
		lower := []byte{prefix}
		if after != "" {
			lower = append(cat(prefix, after), sep+1)
		}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte{prefix + 1}})
		if err != nil {
			return nil, err
		}
		n := 0
		for ok := it.First(); ok && n < limit; {
			k := it.Key()[1:]
			item := string(k[:max(0, bytes.IndexByte(k, sep))])
			if !seen[item] {
				seen[item] = true
				out = append(out, item)
				n++
			}
			ok = it.SeekGE(append(cat(prefix, item), sep+1)) // past this item's keys
		}
		if err := it.Close(); err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
