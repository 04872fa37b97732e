package cassandra

import (
	"context"
	"fmt"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// Recount is one item's reconciliation: its LIKED edges in this keyspace and
// the sum of its cells (every region's).
type Recount struct {
	Item  string
	Liked int64
	Cells int64
}

// RecountItem counts the item's LIKED edges (its 64 bucket partitions, one
// read each) and sums its cells. Meaningful only on a converged snapshot (the
// aggregators caught up); the caller checks that. Cost: 64 partition reads of
// the item's edges, so it is an operator tool, not a request path.
func (s *Store) RecountItem(ctx context.Context, item string) (Recount, error) {
	if s.isClosed() {
		return Recount{}, ErrClosed
	}
	var liked int64
	for bucket := range edge.Buckets {
		it := s.read(ctx, s.q.likersFirst, item, bucket).PageSize(5000).Iter()
		var u string
		var st int8
		for it.Scan(&u, &st) {
			if crdt.State(st) == crdt.Liked {
				liked++
			}
		}
		if err := it.Close(); err != nil {
			return Recount{}, fmt.Errorf("cassandra: recount %q bucket %d: %w", item, bucket, err)
		}
	}
	cells, err := s.Count(ctx, item)
	if err != nil {
		return Recount{}, err
	}
	return Recount{Item: item, Liked: liked, Cells: cells}, nil
}

// Items lists up to limit distinct items that have cells or dedupe state (the
// cells table's partitions), after the item `after` ("" = from the start).
// The order is Cassandra's token order, not lexical order: pass the last item
// of a page as the next `after`. An item whose events no aggregator has
// applied yet is not listed; reconciliation runs on a converged region, where
// every item with a flip has applied events.
func (s *Store) Items(ctx context.Context, after string, limit int) ([]string, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	if limit <= 0 {
		return nil, nil
	}
	stmt, args := s.q.itemsFirst, []any{limit}
	if after != "" {
		stmt, args = s.q.itemsAfter, []any{after, limit}
	}
	it := s.read(ctx, stmt, args...).PageSize(min(limit, 5000)).Iter()
	var out []string
	var item string
	for it.Scan(&item) {
		out = append(out, item)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("cassandra: list items: %w", err)
	}
	return out, nil
}
