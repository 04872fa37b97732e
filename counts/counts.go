package counts

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
)

// CountStore is the read side of cells (the store the pipeline folds into),
// defined here, at its only consumer.
type CountStore interface {
	// Count sums every known cell of item, all regions.
	Count(ctx context.Context, item string) (int64, error)
	// Watermarks returns each known region's watermark (for a region: the min
	// over its partitions).
	Watermarks(ctx context.Context) (crdt.Watermarks, error)
}

// Entry is one cached count.
type Entry struct {
	Count    int64
	AsOf     int64 // Unix ms
	StoredAt int64 // Unix ms
}

// Cache is the count cache contract (in-process by default, Redis in production).
type Cache interface {
	Get(ctx context.Context, item string) (Entry, bool, error)
	Set(ctx context.Context, item string, e Entry) error
	// TryRefresh claims the single refresh slot of item for at most ttl.
	TryRefresh(ctx context.Context, item string, ttl time.Duration) (bool, error)
	// DoneRefresh releases the slot.
	DoneRefresh(ctx context.Context, item string) error
}

// Config configures a Reader.
type Config struct {
	Store CountStore
	Cache Cache
	Clock clock.Clock
	// Regions whose watermarks bound asOf (default: every region the store knows).
	Regions []string
	// Skip, when set, drops regions from asOf (retired regions: their
	// watermark stops for good, while their cells stay in every count).
	Skip func(region string) bool
	// FreshFor: a cached entry younger than this is served as is (default 200ms).
	FreshFor time.Duration
	// StaleFor: an older entry younger than this is served while one refresh runs
	// in the background (default 1s); older entries are recomputed inline.
	StaleFor time.Duration
}

// Result is a labelled count.
type Result struct {
	Count int64
	AsOf  time.Time
	// Staleness is now − AsOf.
	Staleness time.Duration
}

// Reader serves counts.
type Reader struct {
	cfg    Config
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// NewReader validates cfg.
func NewReader(cfg Config) (*Reader, error) {
	if cfg.Store == nil || cfg.Cache == nil {
		return nil, errors.New("counts: Config needs Store and Cache")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.FreshFor == 0 {
		cfg.FreshFor = 200 * time.Millisecond
	}
	if cfg.StaleFor == 0 {
		cfg.StaleFor = time.Second
	}
	if cfg.FreshFor < 0 || cfg.StaleFor < cfg.FreshFor {
		return nil, errors.New("counts: need 0 < FreshFor <= StaleFor")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Reader{cfg: cfg, ctx: ctx, cancel: cancel}, nil
}

// Count returns item's labelled count.
func (r *Reader) Count(ctx context.Context, item string) (Result, error) {
	now := r.cfg.Clock.Now().UnixMilli()
	e, ok, err := r.cfg.Cache.Get(ctx, item)
	if err == nil && ok {
		age := time.Duration(now-e.StoredAt) * time.Millisecond
		if age < r.cfg.FreshFor {
			return r.result(e), nil
		}
		if age < r.cfg.StaleFor {
			if got, _ := r.cfg.Cache.TryRefresh(ctx, item, r.cfg.StaleFor); got {
				r.refreshAsync(item)
			}
			return r.result(e), nil
		}
	}
	e, err = r.compute(ctx, item)
	if err != nil {
		return Result{}, err
	}
	return r.result(e), nil
}

// Fresh bypasses the cache (reconciliation, tests).
func (r *Reader) Fresh(ctx context.Context, item string) (Result, error) {
	e, err := r.compute(ctx, item)
	return r.result(e), err
}

func (r *Reader) result(e Entry) Result {
	now := r.cfg.Clock.Now()
	asOf := time.UnixMilli(e.AsOf)
	return Result{Count: e.Count, AsOf: asOf, Staleness: max(0, now.Sub(asOf))}
}

func (r *Reader) compute(ctx context.Context, item string) (Entry, error) {
	wms, err := r.cfg.Store.Watermarks(ctx) // before the sum: see the package doc
	if err != nil {
		return Entry{}, err
	}
	regions := r.cfg.Regions
	if len(regions) == 0 {
		for reg := range wms {
			regions = append(regions, reg)
		}
	}
	if r.cfg.Skip != nil {
		var kept []string
		for _, reg := range regions {
			if !r.cfg.Skip(reg) {
				kept = append(kept, reg)
			}
		}
		regions = kept
	}
	n, err := r.cfg.Store.Count(ctx, item)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Count: n, AsOf: wms.AsOf(regions), StoredAt: r.cfg.Clock.Now().UnixMilli()}
	_ = r.cfg.Cache.Set(ctx, item, e) // a cache failure costs only speed
	return e, nil
}

func (r *Reader) refreshAsync(item string) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.StaleFor)
		defer cancel()
		_, _ = r.compute(ctx, item)
		_ = r.cfg.Cache.DoneRefresh(ctx, item)
	}()
}

// Close cancels background refreshes and waits for them. Idempotent.
func (r *Reader) Close() error {
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
	})
	return nil
}
