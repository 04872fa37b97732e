package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// regionRegistry is what the region needs of the registry in etcd
// (etcdepoch.Directory).
type regionRegistry interface {
	CheckRegionStart(ctx context.Context, name string) (etcdepoch.RegionRecord, error)
	RegistryStates(ctx context.Context) (map[string]epoch.RegionState, error)
	SetRegionState(ctx context.Context, name string, to epoch.RegionState, now time.Time) (etcdepoch.RegionRecord, error)
}

// registryView is this region's view of the region registry (issue 14),
// refreshed by one loop: which peers are retired (not shipped to, not held
// for by retention, not in asOf), and — for a region that started joining —
// the step to active once it has rebuilt from its peers.
type registryView struct {
	reg     regionRegistry
	self    string
	rebuilt func() bool // nil: nothing to rebuild
	log     *slog.Logger
	now     func() time.Time

	mu      sync.Mutex
	states  map[string]epoch.RegionState // nil: no registry (or not read yet)
	joining bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startRegistryView reads the registry once, then refreshes it every
// interval until close.
func startRegistryView(ctx context.Context, reg regionRegistry, self string, joining bool, rebuilt func() bool, interval time.Duration, now func() time.Time, log *slog.Logger) *registryView {
	v := &registryView{reg: reg, self: self, joining: joining, rebuilt: rebuilt, log: log, now: now,
		stop: make(chan struct{}), done: make(chan struct{})}
	v.refresh(ctx)
	go v.loop(interval)
	return v
}

func (v *registryView) loop(interval time.Duration) {
	defer close(v.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			v.refresh(ctx)
			cancel()
		}
	}
}

// refresh re-reads the states and, for a joining region that has rebuilt,
// records it active. A failed or invalid read keeps the last view (a
// retired peer stays retired: the state is final).
func (v *registryView) refresh(ctx context.Context) {
	st, err := v.reg.RegistryStates(ctx)
	if err != nil {
		v.log.Warn("region registry unreadable; keeping the last view", "err", err)
		return
	}
	v.mu.Lock()
	v.states = st
	joining := v.joining
	v.mu.Unlock()
	if !joining || st[v.self] != epoch.StateJoining || (v.rebuilt != nil && !v.rebuilt()) {
		return
	}
	if _, err := v.reg.SetRegionState(ctx, v.self, epoch.StateActive, v.now()); err != nil {
		v.log.Warn("could not record this region active", "err", err)
		return
	}
	v.log.Info("rebuilt from the peers: this region is active (a failover target; it takes ranges by planned moves)")
	v.mu.Lock()
	v.joining = false
	v.states[v.self] = epoch.StateActive
	v.mu.Unlock()
}

// Retired reports whether the registry says region is retired. Safe on a
// nil view (no registry: nothing is).
func (v *registryView) Retired(region string) bool {
	if v == nil {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.states[region] == epoch.StateRetired
}

// Allowed are the regions a peer's certificate may name: the configured
// ones and every region the registry records, but no retired one (its last
// pushes were awaited before it was retired). Without a registry: the
// configured ones.
func (v *registryView) Allowed(configured []string) []string {
	if v == nil {
		return configured
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.states == nil {
		return configured
	}
	out := make([]string, 0, len(configured)+len(v.states))
	for _, r := range configured {
		if _, known := v.states[r]; !known || v.states[r] != epoch.StateRetired {
			out = append(out, r)
		}
	}
	for r, st := range v.states {
		if st != epoch.StateRetired && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// State is region's state as last read ("" unknown).
func (v *registryView) State(region string) epoch.RegionState {
	if v == nil {
		return ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.states[region]
}

// close stops the loop and waits for it. Idempotent; safe on nil.
func (v *registryView) close() {
	if v == nil {
		return
	}
	v.once.Do(func() {
		close(v.stop)
		<-v.done
	})
}

// ErrRegistry wraps the refusal to start a region the registry does not
// allow (retired, never added).
var ErrRegistry = errors.New("region: not allowed by the cluster's region registry")

// checkRegistry refuses to start a retired region or one never added to a
// cluster that has a registry; it returns the region's state ("" on a
// cluster without a registry).
func checkRegistry(ctx context.Context, reg regionRegistry, name string) (epoch.RegionState, error) {
	rec, err := reg.CheckRegionStart(ctx, name)
	if errors.Is(err, etcdepoch.ErrRegionRetired) || errors.Is(err, etcdepoch.ErrRegionNotAdded) {
		return rec.State, fmt.Errorf("%w: %w", ErrRegistry, err)
	}
	if err != nil {
		return "", fmt.Errorf("region %s: region registry: %w", name, err)
	}
	return rec.State, nil
}
