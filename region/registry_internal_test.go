package region

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/replication"
)

// fakeRegistry is an in-memory regionRegistry.
type fakeRegistry struct {
	mu     sync.Mutex
	states map[string]epoch.RegionState
	fail   bool
	sets   int
}

func (f *fakeRegistry) CheckRegionStart(_ context.Context, name string) (etcdepoch.RegionRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch st, ok := f.states[name]; {
	case f.states == nil:
		return etcdepoch.RegionRecord{}, nil
	case !ok:
		return etcdepoch.RegionRecord{}, etcdepoch.ErrRegionNotAdded
	case st == epoch.StateRetired:
		return etcdepoch.RegionRecord{Name: name, State: st}, etcdepoch.ErrRegionRetired
	default:
		return etcdepoch.RegionRecord{Name: name, State: st}, nil
	}
}

func (f *fakeRegistry) RegistryStates(context.Context) (map[string]epoch.RegionState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, etcdepoch.ErrRegistryCorrupt
	}
	if f.states == nil {
		return nil, nil
	}
	out := map[string]epoch.RegionState{}
	for k, v := range f.states {
		out[k] = v
	}
	return out, nil
}

func (f *fakeRegistry) SetRegionState(_ context.Context, name string, to epoch.RegionState, _ time.Time) (etcdepoch.RegionRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := epoch.CheckTransition(f.states[name], to); err != nil {
		return etcdepoch.RegionRecord{}, err
	}
	f.states[name] = to
	f.sets++
	return etcdepoch.RegionRecord{Name: name, State: to}, nil
}

type staticPeers []replication.Peer

func (s staticPeers) Peers() []replication.Peer { return append([]replication.Peer(nil), s...) }
func (s staticPeers) Changes() <-chan struct{}  { return nil }

// TestRegistryView: a joining region becomes active only once rebuilt, once;
// retired peers are skipped by shipping and refused by the peer plane; an
// unreadable registry keeps the last view (a retired peer stays retired); a
// start of a retired or never-added region is refused with ErrRegistry.
func TestRegistryView(t *testing.T) {
	f := &fakeRegistry{states: map[string]epoch.RegionState{"us": epoch.StateHome, "ap": epoch.StateRetired, "sa": epoch.StateJoining}}
	var rebuilt atomic.Bool
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	v := startRegistryView(context.Background(), f, "sa", true, rebuilt.Load, 10*time.Millisecond, time.Now, log)
	defer v.close()
	if st := v.State("sa"); st != epoch.StateJoining {
		t.Fatalf("before the rebuild: %s", st)
	}
	rebuilt.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for v.State("sa") != epoch.StateActive {
		if time.Now().After(deadline) {
			t.Fatal("sa never became active")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !v.Retired("ap") || v.Retired("us") || v.Retired("zz") {
		t.Fatal("Retired wrong")
	}
	got := v.Allowed([]string{"us", "eu", "ap"})
	slices.Sort(got)
	if !slices.Equal(got, []string{"eu", "sa", "us"}) {
		t.Fatalf("Allowed = %v", got)
	}
	op := overridePeers{src: staticPeers{{Region: "us"}, {Region: "ap"}, {Region: "sa"}}, addrs: map[string]string{"sa": "x:1"}, skip: v.Retired}
	if ps := op.Peers(); len(ps) != 2 || ps[0].Region != "us" || ps[1].GRPCAddr != "x:1" {
		t.Fatalf("peers = %+v", ps)
	}
	f.mu.Lock()
	f.fail = true
	f.mu.Unlock()
	v.refresh(context.Background())
	if !v.Retired("ap") {
		t.Fatal("an unreadable registry dropped the last view")
	}
	v.close()
	v.close() // idempotent
	f.mu.Lock()
	sets := f.sets
	f.mu.Unlock()
	if sets != 1 {
		t.Fatalf("%d state writes, want 1", sets)
	}
	for name, want := range map[string]error{"ap": etcdepoch.ErrRegionRetired, "zz": etcdepoch.ErrRegionNotAdded} {
		if _, err := checkRegistry(context.Background(), f, name); !errors.Is(err, ErrRegistry) || !errors.Is(err, want) {
			t.Errorf("start of %s: %v", name, err)
		}
	}
	if st, err := checkRegistry(context.Background(), f, "us"); err != nil || st != epoch.StateHome {
		t.Fatalf("start of us: %v %v", st, err)
	}
	var nilView *registryView
	if nilView.Retired("x") || !slices.Equal(nilView.Allowed([]string{"a"}), []string{"a"}) {
		t.Fatal("nil view")
	}
	nilView.close()
}
