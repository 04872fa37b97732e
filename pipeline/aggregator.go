package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// Config configures the aggregators of one region.
type Config struct {
	Region string
	Log    Log
	Cells  CellStore
	Clock  clock.Clock
	// Window is how often each aggregator commits (default 250ms).
	Window time.Duration
	// MaxEvents bounds the events folded into one commit (default 20000).
	MaxEvents int
	// OnError reports a failed window; the aggregator retries on the next tick.
	OnError func(partition uint32, err error)
	// Partitions, when not nil, are the only partitions a Group folds (a
	// region of several nodes splits them over its nodes; epoch.Assign). Two
	// groups folding one partition for a while are safe: every cell commit is
	// fenced on its HWM (the zombie-writer case of each CellStore's Commit).
	Partitions []uint32
	// Knobs are test-only switches (TestingKnobs); nil in a deployment.
	Knobs *TestingKnobs
}

// noFence reports the test-only switch that turns the exactly-once guards off.
func (c *Config) noFence() bool { return c.Knobs != nil && c.Knobs.NoFence }

func (c *Config) validate() error {
	if c.Region == "" || c.Log == nil || c.Cells == nil {
		return errors.New("pipeline: Config needs Region, Log and Cells")
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Window == 0 {
		c.Window = 250 * time.Millisecond
	}
	if c.Window < 0 {
		return fmt.Errorf("pipeline: Window must be positive, got %v", c.Window)
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = 20000
	}
	if c.MaxEvents < 0 {
		return fmt.Errorf("pipeline: MaxEvents must be positive, got %d", c.MaxEvents)
	}
	if c.OnError == nil {
		c.OnError = func(uint32, error) {}
	}
	for _, p := range c.Partitions {
		if int(p) >= c.Log.Partitions() {
			return fmt.Errorf("pipeline: Partitions names partition %d of %d", p, c.Log.Partitions())
		}
	}
	return nil
}

// Stats is a snapshot of an aggregator's progress.
type Stats struct {
	Partition uint32
	Position  uint64
	Head      uint64
	Watermark int64
	Windows   uint64
	Events    uint64
	// Corrections counts branch-correction events folded: each is an older
	// epoch's write that arrived after a failover had already branched the edge
	// (an unplanned failover overtook an acknowledged write; counts stay exact).
	Corrections uint64
}

// Aggregator folds one log partition into its cells.
type Aggregator struct {
	cfg       Config
	partition uint32

	// Loaded lazily and reloaded after any error, so a failed commit never leaves
	// a stale in-memory position behind.
	loaded    bool
	pos       uint64
	watermark int64

	head        atomic.Uint64
	posPub      atomic.Uint64
	wmPub       atomic.Int64
	windows     atomic.Uint64
	events      atomic.Uint64
	corrections atomic.Uint64
	pending     uint64 // corrections folded into the window being committed
}

// NewAggregator returns the aggregator of one partition. Step drives it; Group
// runs it in a loop.
func NewAggregator(cfg Config, partition uint32) (*Aggregator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Aggregator{cfg: cfg, partition: partition}, nil
}

// Stats returns the latest progress.
func (a *Aggregator) Stats() Stats {
	return Stats{
		Partition:   a.partition,
		Position:    a.posPub.Load(),
		Head:        a.head.Load(),
		Watermark:   a.wmPub.Load(),
		Windows:     a.windows.Load(),
		Events:      a.events.Load(),
		Corrections: a.corrections.Load(),
	}
}

// Step runs one window. It returns how many events it read and whether it
// reached the log head. Not safe for concurrent use with itself.
func (a *Aggregator) Step(ctx context.Context) (n int, caughtUp bool, err error) {
	defer func() {
		if err != nil {
			a.loaded = false
		}
	}()
	if !a.loaded {
		if a.pos, a.watermark, err = a.cfg.Cells.Position(ctx, a.partition); err != nil {
			return 0, false, err
		}
		if a.cfg.noFence() {
			a.pos = 0
		}
		a.loaded = true
		a.posPub.Store(a.pos)
		a.wmPub.Store(a.watermark)
	}
	a.pending = 0
	evs, head, err := a.cfg.Log.Read(ctx, a.partition, a.pos, a.cfg.MaxEvents)
	if err != nil {
		return 0, false, err
	}
	a.head.Store(head.Pos)
	w := Window{Partition: a.partition, Through: a.pos, Watermark: a.watermark}
	caughtUp = len(evs) == 0 || evs[len(evs)-1].Pos >= head.Pos
	if len(evs) > 0 {
		w.Through = evs[len(evs)-1].Pos
		if err := a.fold(ctx, evs, &w); err != nil {
			return 0, false, err
		}
	}
	wm := head.CompleteThrough
	if !caughtUp {
		// Events of one group commit share an event time, so only the time
		// before the last read event is known complete.
		wm = evs[len(evs)-1].EventTime - 1
	}
	if wm > w.Watermark {
		w.Watermark = wm
	}
	if len(evs) == 0 && w.Watermark == a.watermark {
		return 0, true, nil
	}
	for i := range w.Cells {
		w.Cells[i].Cell.Watermark = max(w.Cells[i].Cell.Watermark, w.Watermark)
	}
	if err := a.cfg.Cells.Commit(ctx, w); err != nil {
		return 0, false, err
	}
	a.pos, a.watermark = w.Through, w.Watermark
	a.posPub.Store(a.pos)
	a.wmPub.Store(a.watermark)
	a.windows.Add(1)
	a.events.Add(uint64(len(evs)))
	a.corrections.Add(a.pending)
	return len(evs), caughtUp, nil
}

// base reads what a window folds onto: in one call when the store can.
func (a *Aggregator) base(ctx context.Context, keys []crdt.CellKey, edges []EdgeKey) (map[crdt.CellKey]crdt.Cell, map[EdgeKey]Applied, bool, error) {
	if br, ok := a.cfg.Cells.(BaseReader); ok {
		cells, applied, err := br.Base(ctx, a.partition, keys, edges)
		return cells, applied, true, err
	}
	cells, err := a.cfg.Cells.Cells(ctx, keys)
	if err != nil {
		return nil, nil, false, err
	}
	applied, err := a.cfg.Cells.Applied(ctx, a.partition, edges)
	if err != nil {
		return nil, nil, false, err
	}
	return cells, applied, false, nil
}

// fold sums events into fenced cell updates and dedupe state.
func (a *Aggregator) fold(ctx context.Context, evs []edge.Event, w *Window) error {
	keySet := map[crdt.CellKey]struct{}{}
	edgeSet := map[EdgeKey]struct{}{}
	for _, ev := range evs {
		if !ev.Kind.Counted() {
			continue // carried for replication only
		}
		keySet[crdt.CellKey{Item: ev.Item, Region: a.cfg.Region, Shard: a.partition}] = struct{}{}
		edgeSet[EdgeKey{Item: ev.Item, User: ev.User}] = struct{}{}
	}
	keys := make([]crdt.CellKey, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Item < keys[j].Item })
	edges := make([]EdgeKey, 0, len(edgeSet))
	for k := range edgeSet {
		edges = append(edges, k)
	}
	cells, applied, baseRead, err := a.base(ctx, keys, edges)
	if err != nil {
		return err
	}
	w.BaseRead = baseRead
	deltas := make(map[crdt.CellKey]*crdt.Delta, len(keys))
	w.Dedupe = map[EdgeKey]Applied{}
	for _, ev := range evs {
		if !ev.Kind.Counted() {
			continue
		}
		ck := crdt.CellKey{Item: ev.Item, Region: a.cfg.Region, Shard: a.partition}
		if ev.Pos <= cells[ck].HWM && !a.cfg.noFence() {
			continue // fence: this cell already holds the event
		}
		ek := EdgeKey{Item: ev.Item, User: ev.User}
		ap := applied[ek]
		if a.cfg.noFence() {
			ap = Applied{}
		}
		if ev.Kind == edge.KindCorrection {
			if !ap.Correction.Less(ev.Version) {
				continue // duplicate
			}
			ap.Correction = ev.Version
			a.pending++
		} else {
			if !ap.Write.Less(ev.Version) {
				continue // duplicate
			}
			ap.Write = ev.Version
		}
		ap.At = max(ap.At, ev.EventTime)
		applied[ek] = ap
		w.Dedupe[ek] = ap
		d := deltas[ck]
		if d == nil {
			d = &crdt.Delta{}
			deltas[ck] = d
		}
		d.Add(int(ev.Delta))
	}
	for _, k := range keys {
		old := cells[k]
		var d crdt.Delta
		if p := deltas[k]; p != nil {
			d = *p
		}
		if a.cfg.noFence() && w.Through <= old.HWM {
			next := old
			next.P, next.N = old.P+d.P, old.N+d.N
			w.Cells = append(w.Cells, CellUpdate{Key: k, Expect: old.HWM, Cell: next})
			continue
		}
		if w.Through <= old.HWM {
			// Written by a window that did not finish (a crash between a
			// store's cell writes and its position, or another writer of
			// the partition): the cell holds this window's events already.
			// It is rewritten unchanged so that the store announces it to
			// replication again: a store whose cell-change feed is written
			// after the cells (Cassandra) may have lost that announcement,
			// and this window's watermark is about to vouch for the cell.
			w.Cells = append(w.Cells, CellUpdate{Key: k, Expect: old.HWM, Cell: old})
			continue
		}
		next, err := old.Apply(d, w.Through, w.Watermark)
		if err != nil {
			return err
		}
		w.Cells = append(w.Cells, CellUpdate{Key: k, Expect: old.HWM, Cell: next})
	}
	return nil
}

// Group runs one aggregator loop per partition.
type Group struct {
	aggs   []*Aggregator
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewGroup creates and starts the aggregators of every partition of cfg.Log;
// they run until Close.
func NewGroup(ctx context.Context, cfg Config) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// ctx is for setup only: the loops run until Close (an ordered shutdown
	// stops them after the writers, not when the caller's context ends).
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g := &Group{cancel: cancel}
	for p := 0; p < cfg.Log.Partitions(); p++ {
		if cfg.Partitions != nil && !slices.Contains(cfg.Partitions, uint32(p)) {
			continue
		}
		a, err := NewAggregator(cfg, uint32(p))
		if err != nil {
			cancel()
			return nil, err
		}
		g.aggs = append(g.aggs, a)
	}
	for _, a := range g.aggs {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			a.run(ctx)
		}()
	}
	return g, nil
}

// Stats returns each partition's progress.
func (g *Group) Stats() []Stats {
	out := make([]Stats, len(g.aggs))
	for i, a := range g.aggs {
		out[i] = a.Stats()
	}
	return out
}

// Close stops every loop and waits for them. Idempotent.
func (g *Group) Close() error {
	g.once.Do(func() {
		g.cancel()
		g.wg.Wait()
	})
	return nil
}

func (a *Aggregator) run(ctx context.Context) {
	t := a.cfg.Clock.NewTicker(a.cfg.Window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		// Drain a backlog without waiting a tick per window, but stay bounded.
		for i := 0; i < 64 && ctx.Err() == nil; i++ {
			_, caughtUp, err := a.Step(ctx)
			if err != nil {
				if ctx.Err() == nil {
					a.cfg.OnError(a.partition, err)
				}
				break
			}
			if caughtUp {
				break
			}
		}
	}
}
