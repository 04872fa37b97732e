package cassandra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/pipeline"
)

// Position implements pipeline.CellStore: the committed position, or the
// partition's truncation point when that is higher. Retention never raises
// the truncation point above the position, a rebuild does (rebuild.go: the
// positions below it were passed by the peers), and an aggregator must then
// start there: reading from below would fail with ErrTruncated for ever.
// Taking the max here keeps that true even if a rebuild's raise of the
// position row lost to an older write.
func (s *Store) Position(ctx context.Context, part uint32) (uint64, int64, error) {
	var pos, wm int64
	var fl uint64
	err := parallel(2, func(i int) error {
		if i == 1 {
			if s.opts.ForeignPositions {
				return nil // fl stays 0: the floor is not in the positions' space
			}
			var err error
			fl, err = s.logFloor(ctx, part)
			return err
		}
		err := s.read(ctx, s.q.positionGet, int(part)).Scan(&pos, &wm)
		if errors.Is(err, gocql.ErrNotFound) {
			pos, wm, err = 0, 0, nil
		}
		return err
	})
	return max(uint64(pos), fl), wm, err
}

// Cells implements pipeline.CellStore: one read of each item's cell rows.
func (s *Store) Cells(ctx context.Context, keys []crdt.CellKey) (map[crdt.CellKey]crdt.Cell, error) {
	want := map[crdt.CellKey]bool{}
	seen := map[string]bool{}
	var items []string
	for _, k := range keys {
		want[k] = true
		if !seen[k.Item] {
			seen[k.Item] = true
			items = append(items, k.Item)
		}
	}
	out := make(map[crdt.CellKey]crdt.Cell, len(keys))
	for _, item := range items {
		it := s.read(ctx, s.q.cellsOfItem, item).PageSize(1000).Iter()
		var region string
		var shard int
		var p, n, hwm, wm int64
		for it.Scan(&region, &shard, &p, &n, &hwm, &wm) {
			k := crdt.CellKey{Item: item, Region: region, Shard: uint32(shard)}
			if want[k] {
				out[k] = crdt.Cell{P: uint64(p), N: uint64(n), HWM: uint64(hwm), Watermark: wm}
			}
		}
		if err := it.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Applied implements pipeline.CellStore. Dedupe rows live in the item's cell
// partition under (this region, partition, user).
func (s *Store) Applied(ctx context.Context, part uint32, keys []pipeline.EdgeKey) (map[pipeline.EdgeKey]pipeline.Applied, error) {
	byItem := map[string][]string{}
	for _, k := range keys {
		byItem[k.Item] = append(byItem[k.Item], k.User)
	}
	out := make(map[pipeline.EdgeKey]pipeline.Applied, len(keys))
	for item, users := range byItem {
		for len(users) > 0 {
			n := min(len(users), 100)
			it := s.read(ctx, s.q.dedupeSelect, item, s.opts.Region, int(part), users[:n]).Iter()
			var u string
			var we, wo, ce, co, at int64
			for it.Scan(&u, &we, &wo, &ce, &co, &at) {
				out[pipeline.EdgeKey{Item: item, User: u}] = pipeline.Applied{
					Write:      crdt.Version{Epoch: uint64(we), Op: uint64(wo)},
					Correction: crdt.Version{Epoch: uint64(ce), Op: uint64(co)},
					At:         at,
				}
			}
			if err := it.Close(); err != nil {
				return nil, err
			}
			users = users[n:]
		}
	}
	return out, nil
}

// Base implements pipeline.BaseReader: the window's cells (this region's,
// shard = the log partition) and its edges' dedupe rows, which share each
// item's partition, in one read per item (per 100 edges of a viral item,
// each with the cell). One read of one partition is one consistent state of
// it, so the window needs no fence check at Commit (Window.BaseRead; doc.go,
// "Cells"); an item read in parts whose cell changed in between fails with
// ErrFenced.
func (s *Store) Base(ctx context.Context, part uint32, keys []crdt.CellKey, edges []pipeline.EdgeKey) (map[crdt.CellKey]crdt.Cell, map[pipeline.EdgeKey]pipeline.Applied, error) {
	type want struct {
		cell  bool // the item's cell of this partition
		users []string
	}
	byItem := map[string]*want{}
	get := func(item string) *want {
		w := byItem[item]
		if w == nil {
			w = &want{}
			byItem[item] = w
		}
		return w
	}
	for _, k := range keys {
		if k.Region != s.opts.Region || k.Shard != part {
			return nil, nil, fmt.Errorf("cassandra: Base: cell %v is not one a window of partition %d of region %q folds", k, part, s.opts.Region)
		}
		get(k.Item).cell = true
	}
	for _, e := range edges {
		get(e.Item).users = append(get(e.Item).users, e.User)
	}
	items := make([]string, 0, len(byItem))
	for item := range byItem {
		items = append(items, item)
	}
	cells := make([]map[crdt.CellKey]crdt.Cell, len(items))
	applied := make([]map[pipeline.EdgeKey]pipeline.Applied, len(items))
	// Items in parallel; a viral item's parts of 100 edges one after the
	// other, each with the cell, which must not change between them.
	if err := parallel(len(items), func(i int) error {
		item, w := items[i], byItem[items[i]]
		cells[i], applied[i] = map[crdt.CellKey]crdt.Cell{}, map[pipeline.EdgeKey]pipeline.Applied{}
		users := w.users
		var first map[crdt.CellKey]crdt.Cell
		for part0 := true; part0 || len(users) > 0; part0 = false {
			n := min(len(users), 100)
			got, err := s.readBase(ctx, part, item, w.cell, users[:n], applied[i])
			if err != nil {
				return err
			}
			users = users[n:]
			if part0 {
				first = got
			} else if !maps.Equal(got, first) {
				// Another writer's batch changed the cell between two parts:
				// no consistent base.
				return fmt.Errorf("%w: the cell of %q changed while its %d dedupe rows were read", pipeline.ErrFenced, item, len(w.users))
			}
			if len(users) > 0 {
				if err := s.crashPoint("base-part-read"); err != nil {
					return err
				}
			}
		}
		cells[i] = first
		return nil
	}); err != nil {
		return nil, nil, err
	}
	outC := map[crdt.CellKey]crdt.Cell{}
	outA := map[pipeline.EdgeKey]pipeline.Applied{}
	for i := range items {
		maps.Copy(outC, cells[i])
		maps.Copy(outA, applied[i])
	}
	return outC, outA, nil
}

// readBase is one of Base's reads: item's cell of partition part (when
// cell) and the dedupe rows of users, which it adds to applied.
func (s *Store) readBase(ctx context.Context, part uint32, item string, cell bool, users []string, applied map[pipeline.EdgeKey]pipeline.Applied) (map[crdt.CellKey]crdt.Cell, error) {
	var tuples []string
	args := []any{item}
	if cell {
		tuples = append(tuples, "(0, ?, ?, '')")
		args = append(args, s.opts.Region, int(part))
	}
	for _, u := range users {
		tuples = append(tuples, "(1, ?, ?, ?)")
		args = append(args, s.opts.Region, int(part), u)
	}
	it := s.read(ctx, s.q.baseSelect+"("+strings.Join(tuples, ", ")+")", args...).PageSize(1000).Iter()
	cells := map[crdt.CellKey]crdt.Cell{}
	var kind int
	var u string
	var p, n, hwm, wm, we, wo, ce, co, at *int64
	for it.Scan(&kind, &u, &p, &n, &hwm, &wm, &we, &wo, &ce, &co, &at) {
		switch kind {
		case 0:
			cells[crdt.CellKey{Item: item, Region: s.opts.Region, Shard: part}] = crdt.Cell{
				P: uint64(deref(p)), N: uint64(deref(n)), HWM: uint64(deref(hwm)), Watermark: deref(wm)}
		case 1:
			applied[pipeline.EdgeKey{Item: item, User: u}] = pipeline.Applied{
				Write:      crdt.Version{Epoch: uint64(deref(we)), Op: uint64(deref(wo))},
				Correction: crdt.Version{Epoch: uint64(deref(ce)), Op: uint64(deref(co))},
				At:         deref(at),
			}
		}
	}
	return cells, it.Close()
}

func deref(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

// ownCellEra lifts the write timestamps of this region's cells and dedupe
// rows above every timestamp an earlier release wrote them with (its cell
// batches were lightweight transactions, stamped with the Paxos ballot's
// time in microseconds: about 2^50.6 in 2026, 2^56 is the year 4253), so a
// window of this release always supersedes what such a batch left.
const ownCellEra = int64(1) << 56

// ownCellStamp is the write timestamp of a window through position through:
// a later log prefix always has the higher one.
func ownCellStamp(through uint64) int64 { return ownCellEra + int64(through) }

// Commit implements pipeline.CellStore.
//
// A window's cells live in different Cassandra partitions (one per item), so
// a window is not atomic here. The writes are ordered so that a crash (or a
// racing writer) between any two of them is safe:
//
//  1. Every fence is checked first with LOCAL_QUORUM reads; a stale window
//     fails with ErrFenced having written nothing (the normal case of a
//     replayed or superseded window).
//  2. Each item's cells are written by one single-partition batch (atomic
//     and isolated) together with the dedupe rows of that item's edges, every
//     write stamped ownCellStamp(Through): no lightweight transaction. Cell
//     and dedupe state of an item are therefore always consistent with each
//     other, and of two windows that both pass step 1 (a zombie aggregator
//     racing the live one) the later log prefix wins, whatever the order
//     the batches land in. Why that is exact: doc.go, "Cells".
//  3. Dedupe rows of items without a cell update, then the position and
//     watermark, last.
//
// If the process dies after some items of step 2, those cells carry
// hwm = Through while the position still says the old value. The aggregator
// replays the window from the old position; its per-cell filter skips every
// event with Pos <= cell.HWM and every cell with Through <= HWM, so the
// written cells add nothing twice and the rest are written now. Position and
// watermark move only after every cell.
func (s *Store) Commit(ctx context.Context, w pipeline.Window) error {
	if s.isClosed() {
		return ErrClosed
	}
	// 1. Fences, read at LOCAL_QUORUM: that sees every cell batch that
	// completed, so a window already stale when Commit starts fails having
	// written nothing. A window whose base came from Base needs no check:
	// each item's base was one read of its partition, hence one consistent
	// state, which is all the check guarded (doc.go, "Cells"); a stale one
	// loses to the later prefix's timestamps instead of failing here.
	fences := len(w.Cells)
	if w.BaseRead {
		fences = 0
	}
	if err := parallel(fences, func(i int) error {
		u := w.Cells[i]
		var hwm int64
		err := s.read(ctx, s.q.cellSelect, u.Key.Item, u.Key.Region, int(u.Key.Shard)).Scan(&hwm)
		if errors.Is(err, gocql.ErrNotFound) {
			hwm, err = 0, nil
		}
		if err != nil {
			return err
		}
		if uint64(hwm) != u.Expect {
			return fmt.Errorf("%w: cell %v has hwm %d, window expected %d", pipeline.ErrFenced, u.Key, hwm, u.Expect)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := s.crashPoint("cells-checked"); err != nil {
		return err
	}
	// 2. One batch per item: its cells and its edges' dedupe rows.
	type itemWrite struct {
		cells  []int
		dedupe []pipeline.EdgeKey
	}
	items := map[string]*itemWrite{}
	get := func(item string) *itemWrite {
		iw := items[item]
		if iw == nil {
			iw = &itemWrite{}
			items[item] = iw
		}
		return iw
	}
	for i, u := range w.Cells {
		get(u.Key.Item).cells = append(get(u.Key.Item).cells, i)
	}
	for k := range w.Dedupe {
		get(k.Item).dedupe = append(get(k.Item).dedupe, k)
	}
	names := make([]string, 0, len(items))
	for item := range items {
		names = append(names, item)
	}
	sort.Strings(names)
	ts := ownCellStamp(w.Through)
	batch := func(item string) *gocql.Batch {
		b := s.newBatch(ctx, gocql.UnloggedBatch, false, "BATCH cells")
		iw := items[item]
		for _, i := range iw.cells {
			u := w.Cells[i]
			c := u.Cell
			b.Query(s.q.cellPut, u.Key.Item, u.Key.Region, int(u.Key.Shard), int64(c.P), int64(c.N), int64(c.HWM), c.Watermark, ts)
		}
		keys := iw.dedupe
		sort.Slice(keys, func(i, j int) bool { return keys[i].User < keys[j].User })
		for _, k := range keys {
			a := w.Dedupe[k]
			b.Query(s.q.dedupeUpdate, ts, int64(a.Write.Epoch), int64(a.Write.Op), int64(a.Correction.Epoch), int64(a.Correction.Op),
				a.At, item, s.opts.Region, int(w.Partition), k.User)
		}
		return b
	}
	// The items' batches are independent partitions and any subset of them
	// may be written when a crash stops the window (see the package doc), so
	// they run in parallel.
	var withCells, dedupeOnly []string
	for _, item := range names {
		switch iw := items[item]; {
		case len(iw.cells) > 0:
			withCells = append(withCells, item)
		case len(iw.dedupe) > 0:
			dedupeOnly = append(dedupeOnly, item)
		}
	}
	if err := parallel(len(withCells), func(i int) error {
		if err := s.execIdempotent(ctx, func() *gocql.Batch { return batch(withCells[i]) }); err != nil {
			return fmt.Errorf("cassandra: cells of %q: %w", withCells[i], err)
		}
		return s.crashPoint("cell-written")
	}); err != nil {
		return err
	}
	// The cells changed are announced to replication (CellChanges) once
	// written, before the position moves.
	if err := s.notifyCells(ctx, w); err != nil {
		return err
	}
	// 3. Dedupe rows without a cell, then the position.
	if err := parallel(len(dedupeOnly), func(i int) error {
		if err := s.execIdempotent(ctx, func() *gocql.Batch { return batch(dedupeOnly[i]) }); err != nil {
			return fmt.Errorf("cassandra: dedupe state of %q: %w", dedupeOnly[i], err)
		}
		return nil
	}); err != nil {
		return err
	}
	return s.write(ctx, s.q.positionPut, int(w.Partition), int64(w.Through), w.Watermark).Exec()
}

// execIdempotent runs a batch that may be repeated (its writes carry their
// own timestamps), retrying a timeout or an unavailable replica at most
// Options.MaxAttempts times.
func (s *Store) execIdempotent(ctx context.Context, b func() *gocql.Batch) error {
	var err error
	for attempt := 0; attempt < s.opts.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
		}
		if err = s.s.ExecuteBatch(b()); !retryable(err) {
			return err
		}
	}
	return err
}

// Count implements counts.CountStore: SUM over the item's cell rows (every
// region's), in one partition read.
func (s *Store) Count(ctx context.Context, item string) (int64, error) {
	var p, n int64
	if err := s.read(ctx, s.q.cellCount, item).Scan(&p, &n); err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return 0, err
	}
	return p - n, nil
}

// OwnWatermark is this region's watermark: the min over its partitions (a
// partition never committed counts as 0).
func (s *Store) OwnWatermark(ctx context.Context) (int64, error) {
	wms := make([]int64, s.opts.Partitions)
	it := s.read(ctx, s.q.positionAll).PageSize(5000).Iter()
	var part int
	var wm int64
	for it.Scan(&part, &wm) {
		if part >= 0 && part < len(wms) {
			wms[part] = wm
		}
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	m := wms[0]
	for _, v := range wms[1:] {
		m = min(m, v)
	}
	return m, nil
}

// Watermarks implements counts.CountStore: this region's own (the min over
// its partitions) and each peer's latest known one (the watermarks table,
// written by replication).
func (s *Store) Watermarks(ctx context.Context) (crdt.Watermarks, error) {
	own, err := s.OwnWatermark(ctx)
	if err != nil {
		return nil, err
	}
	wms := crdt.Watermarks{}
	it := s.read(ctx, s.q.watermarksAll).PageSize(1000).Iter()
	var region string
	var wm int64
	for it.Scan(&region, &wm) {
		wms[region] = wm
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	wms[s.opts.Region] = own
	return wms, nil
}
