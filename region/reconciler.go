package region

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
)

// DefaultReconcileRate is the background reconciler's default sampling rate
// (items recounted per second, re-checks included): a full pass over a
// million items takes about three days, at a cost of a few point reads per
// second.
const DefaultReconcileRate = 4

// reconcilePage is how many item names the reconciler lists at a time.
const reconcilePage = 256

// maxReconcilePending bounds the suspects waiting for a re-check; a suspect
// found while it is full is skipped (the next pass samples it again).
const maxReconcilePending = 1024

// maxReconcileAttempts is how many re-checks a suspect gets to show a stable
// mismatch before it is given up as unsettled (an item written all the time).
const maxReconcileAttempts = 3

// reconcileStepTimeout bounds one recount or listing.
const reconcileStepTimeout = 10 * time.Second

// reconSource is what the reconciler reads: the region's item listing, its
// recount (LIKED edges vs summed cells, the same path as likectl reconcile)
// with a fingerprint of the item's cells (every region's and shard's
// counters and fence position: it changes whenever a window folds an event
// of the item, anywhere), and its asOf (min over regions of the watermarks
// known here, Unix ms).
type reconSource interface {
	Items(ctx context.Context, after string, limit int) ([]string, error)
	Recount(ctx context.Context, item string) (Recount, uint64, error)
	AsOf(ctx context.Context) (int64, error)
}

// reconMetrics are the reconciler's collectors.
type reconMetrics struct {
	mismatch   prometheus.Gauge
	mismatches prometheus.Counter
	checked    prometheus.Counter
	transient  prometheus.Counter
	unsettled  prometheus.Counter
	passes     prometheus.Counter
	errs       prometheus.Counter
}

func newReconMetrics() *reconMetrics {
	return &reconMetrics{
		mismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "likes_reconcile_mismatch_items",
			Help: "Items the background reconciler confirmed mismatched (LIKED edges differ from summed cells, the same on a re-check after the watermark passed the first check) and has not seen clean since. Alert on nonzero.",
		}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_mismatches_total",
			Help: "Mismatches confirmed by the background reconciler (an item drifting by the same amount pass after pass counts once).",
		}),
		checked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_checked_items_total",
			Help: "Recounts made by the background reconciler (samples and re-checks).",
		}),
		transient: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_transient_total",
			Help: "Suspected mismatches that a re-check after the watermark showed were only writes in flight.",
		}),
		unsettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_unsettled_total",
			Help: "Suspected mismatches given up because the item kept changing between re-checks (a busy item; the next pass samples it again).",
		}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_passes_total",
			Help: "Full passes of the background reconciler over the region's items.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_errors_total",
			Help: "Background reconciliation steps that failed (a listing, a recount or a watermark read); the step is retried at the next tick.",
		}),
	}
}

func (m *reconMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.mismatch, m.mismatches, m.checked, m.transient, m.unsettled, m.passes, m.errs}
}

// suspect is an item whose last recount was nonzero, waiting for a re-check.
type suspect struct {
	item      string
	rc        Recount
	fp        uint64 // the cells' fingerprint at the last recount
	checkedAt int64  // Unix ms of the last recount
	attempts  int
}

// reconcileSlack is how far past a suspect's check the region's asOf must be
// before the re-check: an event's time is stamped before its commit, so an
// aggregator may publish a watermark past an event still being committed.
const reconcileSlack = 2 * time.Second

// maxReconcileReported bounds the set of confirmed items kept for the gauge.
const maxReconcileReported = 100_000

// reconciler is the region's background reconciler: one goroutine that
// samples the region's items at a bounded rate (rate recounts per second,
// re-checks included), pass after pass over the item listing, and keeps
// likes_reconcile_mismatch_items and likes_reconcile_mismatches_total true
// without an operator.
//
// Writes in flight make a recount differ from the summed cells for a while
// (an edge committed but not yet folded by the aggregators, or replicated
// here before the cells of its region), so a nonzero recount only makes the
// item a suspect, stamped with the wall time t of that check. The suspect is
// re-checked once this region's asOf (the min over regions of the
// watermarks known here) has passed t + reconcileSlack: by then every event
// any region committed before t has been folded into cells and those cells
// have reached this region. A suspect is confirmed only when the re-check
// finds the item unchanged: the same LIKED edges, the same cells (their
// fingerprint: no window anywhere folded an event of the item since t) and
// so the same nonzero mismatch. Then nothing was in flight at t either (an
// event in flight at t would have been folded by now and changed the
// cells), so the difference is a real drift. Zero clears the suspect; any
// change makes it a suspect again (the item is being written), up to
// maxReconcileAttempts re-checks, after which it is given up as unsettled
// and sampled again next pass: a drift on an item written without pause is
// found once its writes pause. Comparing only the mismatch would not do: a
// steadily written item has about the same number of writes in flight at
// any instant. A region whose asOf stops (a partitioned peer) holds its
// suspects unconfirmed rather than guess. What this cannot tell from a
// drift is an edge replicated here more than reconcileSlack after the cells
// that count it (a replication backlog of edges behind cells); the gauge
// drops again when a later pass finds the item clean.
//
// The gauge is the number of items confirmed mismatched and not seen clean
// since: an item leaves it when a later sample or re-check counts it equal
// (after likectl reconcile --heal, or a late replication). So after a full
// pass it is the mismatches of that pass. The counter counts each
// confirmation once per item and amount: a drift left alone is not counted
// again pass after pass. The reconciler never heals: healing needs a
// quiescent region.
//
// Concurrency: all state is owned by the loop goroutine; Close stops it,
// waits for it, and is idempotent.
type reconciler struct {
	src   reconSource
	clk   clock.Clock
	every time.Duration
	slack time.Duration
	m     *reconMetrics
	log   *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// loop state
	page     []string
	after    string
	listed   bool // the current pass has listed its last page
	pending  []suspect
	reported map[string]int64 // confirmed and not seen clean since
}

// newReconciler returns a reconciler sampling rate items per second; call
// start to run it.
func newReconciler(src reconSource, clk clock.Clock, rate float64, m *reconMetrics, log *slog.Logger) *reconciler {
	if rate <= 0 {
		rate = DefaultReconcileRate
	}
	every := time.Duration(float64(time.Second) / rate)
	if every < time.Millisecond {
		every = time.Millisecond
	}
	return &reconciler{
		src: src, clk: clk, every: every, slack: reconcileSlack, m: m, log: log, done: make(chan struct{}),
		reported: map[string]int64{},
	}
}

// start runs the loop until Close.
func (rc *reconciler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel = cancel
	go rc.run(ctx)
}

func (rc *reconciler) run(ctx context.Context) {
	defer close(rc.done)
	t := rc.clk.NewTicker(rc.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := rc.step(ctx); err != nil && ctx.Err() == nil {
				rc.m.errs.Inc()
				rc.log.Debug("background reconciliation step failed; retrying", "err", err)
			}
		}
	}
}

// Close stops the loop and waits for it. Idempotent; safe on a reconciler
// that was never started.
func (rc *reconciler) Close() {
	rc.once.Do(func() {
		if rc.cancel == nil {
			close(rc.done)
			return
		}
		rc.cancel()
	})
	<-rc.done
}

// step does one recount: a due re-check first, else the next sample.
func (rc *reconciler) step(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, reconcileStepTimeout)
	defer cancel()
	if len(rc.pending) > 0 {
		asOf, err := rc.src.AsOf(ctx)
		if err != nil {
			return err
		}
		for i, s := range rc.pending {
			if asOf > s.checkedAt+rc.slack.Milliseconds() {
				return rc.recheck(ctx, i)
			}
		}
	}
	return rc.sample(ctx)
}

// recheck recounts pending[i], whose check the watermark has passed.
func (rc *reconciler) recheck(ctx context.Context, i int) error {
	s := rc.pending[i]
	now := rc.clk.Now().UnixMilli()
	res, fp, err := rc.src.Recount(ctx, s.item)
	if err != nil {
		return err
	}
	rc.m.checked.Inc()
	switch {
	case res.Mismatch == 0:
		rc.m.transient.Inc()
		delete(rc.reported, s.item)
	case res.Liked == s.rc.Liked && res.Cells == s.rc.Cells && fp == s.fp:
		if m, ok := rc.reported[s.item]; !ok || m != res.Mismatch {
			rc.m.mismatches.Inc()
			rc.log.Warn("reconciliation mismatch: the item's summed cells differ from its LIKED edges (heal with likectl reconcile --heal)",
				"item", s.item, "likedEdges", res.Liked, "cellSum", res.Cells, "mismatch", res.Mismatch)
		}
		if _, ok := rc.reported[s.item]; ok || len(rc.reported) < maxReconcileReported {
			rc.reported[s.item] = res.Mismatch
		}
	case s.attempts+1 < maxReconcileAttempts:
		rc.pending[i].rc, rc.pending[i].fp, rc.pending[i].checkedAt, rc.pending[i].attempts = res, fp, now, s.attempts+1
		return nil
	default:
		rc.m.unsettled.Inc()
	}
	rc.pending = append(rc.pending[:i], rc.pending[i+1:]...)
	rc.m.mismatch.Set(float64(len(rc.reported)))
	return nil
}

// sample recounts the next item of the pass (listing a page when needed).
func (rc *reconciler) sample(ctx context.Context) error {
	if len(rc.page) == 0 {
		if rc.listed { // the pass is over: start the next from the first item
			rc.m.passes.Inc()
			rc.after, rc.listed = "", false
		}
		items, err := rc.src.Items(ctx, rc.after, reconcilePage)
		if err != nil {
			return err
		}
		rc.page = items
		if len(items) > 0 {
			rc.after = items[len(items)-1]
		}
		rc.listed = len(items) < reconcilePage
		if len(items) == 0 {
			return nil
		}
	}
	item := rc.page[0]
	now := rc.clk.Now().UnixMilli()
	res, fp, err := rc.src.Recount(ctx, item)
	if err != nil {
		return err // the item stays first in the page: retried next tick
	}
	rc.page = rc.page[1:]
	rc.m.checked.Inc()
	switch {
	case res.Mismatch == 0:
		if _, ok := rc.reported[item]; ok {
			delete(rc.reported, item)
			rc.m.mismatch.Set(float64(len(rc.reported)))
		}
	case len(rc.pending) < maxReconcilePending && !rc.suspected(item):
		rc.pending = append(rc.pending, suspect{item: item, rc: res, fp: fp, checkedAt: now})
	}
	return nil
}

// suspected reports whether item already waits for a re-check.
func (rc *reconciler) suspected(item string) bool {
	for _, s := range rc.pending {
		if s.item == item {
			return true
		}
	}
	return false
}

// regionRecon is the reconSource over a running region.
type regionRecon struct{ r *Region }

func (s regionRecon) Items(ctx context.Context, after string, limit int) ([]string, error) {
	return s.r.Backend.Items(ctx, after, limit)
}

func (s regionRecon) Recount(ctx context.Context, item string) (Recount, uint64, error) {
	if s.r.recount == nil {
		return Recount{}, 0, errors.New("region: no recount on this store")
	}
	rc, err := s.r.recount(ctx, item)
	if err != nil {
		return rc, 0, err
	}
	keys := make([]crdt.CellKey, 0, len(s.r.regions)*s.r.Backend.Partitions())
	for _, reg := range s.r.regions {
		for p := range s.r.Backend.Partitions() {
			keys = append(keys, crdt.CellKey{Item: item, Region: reg, Shard: uint32(p)})
		}
	}
	cells, err := s.r.Backend.Cells(ctx, keys)
	if err != nil {
		return rc, 0, err
	}
	h := fnv.New64a()
	var b [8]byte
	for _, k := range keys { // in a fixed order
		c, ok := cells[k]
		if !ok {
			continue
		}
		for _, v := range []uint64{uint64(k.Shard), c.P, c.N, c.HWM} {
			binary.LittleEndian.PutUint64(b[:], v)
			h.Write(b[:])
		}
		h.Write([]byte(k.Region))
	}
	return rc, h.Sum64(), nil
}

func (s regionRecon) AsOf(ctx context.Context) (int64, error) {
	wms, err := s.r.Backend.Watermarks(ctx)
	if err != nil {
		return 0, err
	}
	return wms.AsOf(s.r.regions), nil
}

// startReconciler starts the background reconciler unless ReconcileRate is
// negative.
func (r *Region) startReconciler() {
	if r.cfg.ReconcileRate < 0 || r.recount == nil {
		return
	}
	r.recon = newReconciler(regionRecon{r}, r.cfg.Clock, r.cfg.ReconcileRate, r.reconM, r.log)
	r.recon.start()
}
