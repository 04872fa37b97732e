package counts_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/cache/inproc"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeCells is a CountStore that records the order of its calls and can hold
// Count until released.
type fakeCells struct {
	mu     sync.Mutex
	counts map[string]int64
	wms    crdt.Watermarks
	calls  []string
	err    error

	block   chan struct{} // when non-nil, Count waits for it
	entered chan string
}

var _ counts.CountStore = (*fakeCells)(nil)

func newFakeCells() *fakeCells {
	return &fakeCells{counts: map[string]int64{}, wms: crdt.Watermarks{}}
}

func (f *fakeCells) Count(ctx context.Context, item string) (int64, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "Count:"+item)
	block, entered := f.block, f.entered
	f.mu.Unlock()
	if entered != nil {
		entered <- item
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[item], f.err
}

func (f *fakeCells) Watermarks(context.Context) (crdt.Watermarks, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Watermarks")
	out := crdt.Watermarks{}
	for k, v := range f.wms {
		out[k] = v
	}
	return out, f.err
}

func (f *fakeCells) set(item string, n int64, wms map[string]time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[item] = n
	for r, at := range wms {
		f.wms[r] = at.UnixMilli()
	}
}

func (f *fakeCells) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakeCells) countCalls(item string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == "Count:"+item {
			n++
		}
	}
	return n
}

// orderedCells checks, inside the store, that every sum is preceded by a
// watermark read, and makes the watermark advance between the two reads the way
// a running aggregator would.
type orderedCells struct {
	*fakeCells
}

func (o *orderedCells) Watermarks(ctx context.Context) (crdt.Watermarks, error) {
	w, err := o.fakeCells.Watermarks(ctx)
	o.mu.Lock()
	// After this read the pipeline moves on: newer events land and the
	// watermark advances. A reader that summed first and read the watermark
	// afterwards would claim this later asOf for the earlier sum.
	o.wms["us"] += 1000
	o.counts["x"]++
	o.mu.Unlock()
	return w, err
}

func newReader(t *testing.T, cfg counts.Config) *counts.Reader {
	t.Helper()
	r, err := counts.NewReader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func TestAsOfIsReadBeforeTheSum(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("x", 7, map[string]time.Time{"us": t0.Add(-2 * time.Second), "eu": t0.Add(-3 * time.Second)})
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, time.Minute), Clock: clk, Regions: []string{"us", "eu"}})

	res, err := r.Count(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if calls := st.takeCalls(); len(calls) != 2 || calls[0] != "Watermarks" || calls[1] != "Count:x" {
		t.Fatalf("calls = %q, want [Watermarks Count:x]", calls)
	}
	if res.Count != 7 || !res.AsOf.Equal(t0.Add(-3*time.Second)) || res.Staleness != 3*time.Second {
		t.Fatalf("result = %+v, want 7 asOf min(us, eu) = t0-3s, staleness 3s", res)
	}
	if _, err := r.Fresh(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	if calls := st.takeCalls(); len(calls) != 2 || calls[0] != "Watermarks" {
		t.Fatalf("Fresh calls = %q", calls)
	}

	// With a store that advances between the reads, the label is the earlier one.
	o := &orderedCells{fakeCells: newFakeCells()}
	o.set("x", 10, map[string]time.Time{"us": t0.Add(-time.Second)})
	r2 := newReader(t, counts.Config{Store: o, Cache: inproc.NewCache(clk, time.Minute), Clock: clk})
	res, err = r2.Count(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 11 || !res.AsOf.Equal(t0.Add(-time.Second)) {
		t.Fatalf("result = %+v: asOf must be the watermark read before the sum", res)
	}
}

func TestRegionsDefaultToEveryKnownRegion(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("x", 1, map[string]time.Time{"us": t0, "eu": t0.Add(-5 * time.Second), "ap": t0.Add(-time.Second)})
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, 0), Clock: clk})
	res, err := r.Count(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if !res.AsOf.Equal(t0.Add(-5 * time.Second)) {
		t.Fatalf("asOf = %v, want the slowest region's watermark", res.AsOf)
	}
	// A configured region the store has never heard from pins asOf at the epoch.
	r2 := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, 0), Clock: clk, Regions: []string{"us", "mars"}})
	res, _ = r2.Count(context.Background(), "x")
	if res.AsOf.UnixMilli() != 0 {
		t.Fatalf("asOf with an unknown region = %v, want 0", res.AsOf)
	}
}

func TestStalenessNeverNegativeAndGrowsWithCacheAge(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("x", 1, map[string]time.Time{"us": t0.Add(time.Second)}) // skewed ahead
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, time.Minute), Clock: clk, FreshFor: time.Second, StaleFor: 10 * time.Second})
	res, _ := r.Count(context.Background(), "x")
	if res.Staleness != 0 {
		t.Fatalf("staleness = %v, want 0 for a watermark ahead of the clock", res.Staleness)
	}
	st.set("x", 1, map[string]time.Time{"us": t0.Add(-time.Second)})
	r2 := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, time.Minute), Clock: clk, FreshFor: time.Second, StaleFor: 10 * time.Second})
	first, _ := r2.Count(context.Background(), "y")
	clk.Advance(500 * time.Millisecond)
	st.set("y", 5, map[string]time.Time{"us": t0.Add(400 * time.Millisecond)})
	cached, _ := r2.Count(context.Background(), "y")
	if !cached.AsOf.Equal(first.AsOf) || cached.Count != first.Count {
		t.Fatalf("a fresh cache hit must keep its asOf: %+v vs %+v", cached, first)
	}
	if cached.Staleness != first.Staleness+500*time.Millisecond {
		t.Fatalf("staleness %v, want %v (measured at read time)", cached.Staleness, first.Staleness+500*time.Millisecond)
	}
}

func TestFreshEntryServedFromCache(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("x", 3, map[string]time.Time{"us": t0})
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, time.Minute), Clock: clk, FreshFor: 200 * time.Millisecond, StaleFor: 10 * time.Second})
	for range 5 {
		if res, _ := r.Count(context.Background(), "x"); res.Count != 3 {
			t.Fatalf("count = %d", res.Count)
		}
		clk.Advance(39 * time.Millisecond)
	}
	if n := st.countCalls("x"); n != 1 {
		t.Fatalf("store summed %d times within FreshFor, want 1", n)
	}
}

func TestStaleWhileRevalidateOneRefreshPerItem(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("a", 1, map[string]time.Time{"us": t0})
	st.set("b", 10, nil)
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, time.Minute), Clock: clk, FreshFor: 200 * time.Millisecond, StaleFor: 10 * time.Second})
	ctx := context.Background()
	for _, item := range []string{"a", "b"} {
		if _, err := r.Count(ctx, item); err != nil {
			t.Fatal(err)
		}
	}
	st.takeCalls()

	// The entries go stale; the store moves on and its sums now block.
	clk.Advance(time.Second)
	block := make(chan struct{})
	entered := make(chan string, 100)
	st.mu.Lock()
	st.block, st.entered = block, entered
	st.mu.Unlock()
	st.set("a", 2, map[string]time.Time{"us": t0.Add(time.Second)})
	st.set("b", 20, nil)

	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 100 {
		item := []string{"a", "b"}[i%2]
		wg.Go(func() {
			res, err := r.Count(ctx, item)
			want := map[string]int64{"a": 1, "b": 10}[item]
			if err != nil || res.Count != want {
				errs <- errors.New("a stale read must serve the cached entry at once")
			}
		})
	}
	wg.Wait() // every reader returned while the refreshes are still blocked
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("no background refresh started")
		}
	}
	if na, nb := st.countCalls("a"), st.countCalls("b"); na != 1 || nb != 1 {
		t.Fatalf("refreshes: a=%d b=%d, want exactly one each", na, nb)
	}
	close(block)
	if err := r.Close(); err != nil { // waits for the refreshes
		t.Fatal(err)
	}
	if na, nb := st.countCalls("a"), st.countCalls("b"); na != 1 || nb != 1 {
		t.Fatalf("refreshes after release: a=%d b=%d, want exactly one each", na, nb)
	}
}

func TestRefreshedEntryReplacesStaleOne(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("a", 1, map[string]time.Time{"us": t0})
	cache := inproc.NewCache(clk, time.Minute)
	r := newReader(t, counts.Config{Store: st, Cache: cache, Clock: clk, FreshFor: 200 * time.Millisecond, StaleFor: 10 * time.Second})
	ctx := context.Background()
	_, _ = r.Count(ctx, "a")
	clk.Advance(time.Second)
	st.set("a", 2, map[string]time.Time{"us": t0.Add(time.Second)})
	if res, _ := r.Count(ctx, "a"); res.Count != 1 {
		t.Fatalf("stale read = %d, want the cached 1", res.Count)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, ok, _ := cache.Get(ctx, "a")
		if ok && e.Count == 2 {
			if e.AsOf != t0.Add(time.Second).UnixMilli() || e.StoredAt != clk.Now().UnixMilli() {
				t.Fatalf("refreshed entry = %+v", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background refresh never stored the new count")
		}
		time.Sleep(time.Millisecond)
	}
	if res, _ := r.Count(ctx, "a"); res.Count != 2 {
		t.Fatalf("read after refresh = %d, want 2", res.Count)
	}
	// The refresh slot was released: the next stale period refreshes again.
	clk.Advance(time.Second)
	st.set("a", 3, nil)
	_, _ = r.Count(ctx, "a")
	_ = r.Close()
	if e, _, _ := cache.Get(ctx, "a"); e.Count != 3 {
		t.Fatalf("second refresh stored %d, want 3 (slot not released?)", e.Count)
	}
}

func TestTooOldEntryRecomputedInline(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("a", 1, map[string]time.Time{"us": t0})
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(clk, time.Hour), Clock: clk, FreshFor: 200 * time.Millisecond, StaleFor: 10 * time.Second})
	_, _ = r.Count(context.Background(), "a")
	clk.Advance(10 * time.Second)
	st.set("a", 5, nil)
	if res, _ := r.Count(context.Background(), "a"); res.Count != 5 {
		t.Fatalf("an entry older than StaleFor must be recomputed inline, got %d", res.Count)
	}
}

// failingCache fails every call.
type failingCache struct {
	mu    sync.Mutex
	calls int
}

var _ counts.Cache = (*failingCache)(nil)

var errCache = errors.New("cache down")

func (f *failingCache) hit() {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
}

func (f *failingCache) Get(context.Context, string) (counts.Entry, bool, error) {
	f.hit()
	return counts.Entry{Count: -999, StoredAt: 1 << 62}, true, errCache
}

func (f *failingCache) Set(context.Context, string, counts.Entry) error { f.hit(); return errCache }

func (f *failingCache) TryRefresh(context.Context, string, time.Duration) (bool, error) {
	f.hit()
	return true, errCache
}

func (f *failingCache) DoneRefresh(context.Context, string) error { f.hit(); return errCache }

func TestFailingCacheNeverFailsARead(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newFakeCells()
	st.set("x", 4, map[string]time.Time{"us": t0.Add(-time.Second)})
	fc := &failingCache{}
	r := newReader(t, counts.Config{Store: st, Cache: fc, Clock: clk})
	for i := range 3 {
		st.set("x", int64(4+i), nil)
		res, err := r.Count(context.Background(), "x")
		if err != nil {
			t.Fatalf("read %d failed with a broken cache: %v", i, err)
		}
		if res.Count != int64(4+i) || !res.AsOf.Equal(t0.Add(-time.Second)) {
			t.Fatalf("read %d = %+v: a cache error must fall through to the store", i, res)
		}
		clk.Advance(100 * time.Millisecond)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.calls == 0 {
		t.Fatal("the cache was never asked")
	}
}

func TestStoreErrorIsReturned(t *testing.T) {
	st := newFakeCells()
	st.err = errors.New("cells down")
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(nil, 0)})
	if _, err := r.Count(context.Background(), "x"); err == nil {
		t.Fatal("want the store's error when nothing is cached")
	}
}

func TestNewReaderValidates(t *testing.T) {
	st := newFakeCells()
	for name, cfg := range map[string]counts.Config{
		"no store":         {Cache: inproc.NewCache(nil, 0)},
		"no cache":         {Store: st},
		"stale < fresh":    {Store: st, Cache: inproc.NewCache(nil, 0), FreshFor: time.Second, StaleFor: time.Millisecond},
		"negative fresh":   {Store: st, Cache: inproc.NewCache(nil, 0), FreshFor: -time.Second},
		"stale below auto": {Store: st, Cache: inproc.NewCache(nil, 0), StaleFor: time.Millisecond},
	} {
		if _, err := counts.NewReader(cfg); err == nil {
			t.Errorf("%s: NewReader accepted %+v", name, cfg)
		}
	}
	r := newReader(t, counts.Config{Store: st, Cache: inproc.NewCache(nil, 0)})
	for i := 0; i < 2; i++ {
		if err := r.Close(); err != nil {
			t.Fatalf("Close #%d: %v (Close must be idempotent)", i+1, err)
		}
	}
}
