package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PinVersion is one value a pin key held, as recorded by the watcher.
type PinVersion struct {
	Range     uint32    `json:"range"`
	Region    string    `json:"region"`
	Epoch     uint64    `json:"epoch"`
	NotBefore time.Time `json:"notBefore,omitzero"`
	ModRev    int64     `json:"modRev"`
	Seen      time.Time `json:"seen"`
	Planned   bool      `json:"planned,omitempty"`
	// CatchUp: the new owner of a planned move has not caught up yet (it
	// refuses writes); a later version of the same epoch clears it.
	CatchUp bool `json:"catchUp,omitempty"`
}

// PinWatcher records every version of every pin from the first revision on,
// through the runner's direct etcd client (the stored encoding is epoch's
// pinValue: {"region","epoch","notBeforeMs"} under <prefix>pins/NNNNN).
type PinWatcher struct {
	cli    *clientv3.Client
	prefix string
	hist   *History
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	versions []PinVersion
	lastRev  int64
	err      error
}

// WatchPins starts recording.
func WatchPins(ctx context.Context, cli *clientv3.Client, prefix string, hist *History) *PinWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &PinWatcher{cli: cli, prefix: prefix + "pins/", hist: hist, cancel: cancel, done: make(chan struct{})}
	go w.loop(ctx)
	return w
}

func (w *PinWatcher) loop(ctx context.Context) {
	defer close(w.done)
	rev := int64(1)
	for ctx.Err() == nil {
		wch := w.cli.Watch(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.PUT {
					continue
				}
				v, err := decodePinKV(w.prefix, ev.Kv.Key, ev.Kv.Value)
				if err != nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
					continue
				}
				v.ModRev, v.Seen = ev.Kv.ModRevision, time.Now()
				w.mu.Lock()
				w.versions = append(w.versions, v)
				w.mu.Unlock()
				if v.Epoch > 1 {
					w.hist.Write("pin", v)
				}
			}
			if n := len(wr.Events); n > 0 {
				rev = wr.Events[n-1].Kv.ModRevision + 1
				w.mu.Lock()
				w.lastRev = rev - 1
				w.mu.Unlock()
			}
		}
		if ctx.Err() == nil {
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

func decodePinKV(prefix string, key, val []byte) (PinVersion, error) {
	s, ok := strings.CutPrefix(string(key), prefix)
	if !ok {
		return PinVersion{}, fmt.Errorf("pin key %q outside %s", key, prefix)
	}
	rng, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return PinVersion{}, fmt.Errorf("pin key %q: %w", key, err)
	}
	var pv struct {
		Region      string `json:"region"`
		Epoch       uint64 `json:"epoch"`
		NotBeforeMs int64  `json:"notBeforeMs"`
		CatchUp     bool   `json:"catchUp"`
	}
	if err := json.Unmarshal(val, &pv); err != nil {
		return PinVersion{}, fmt.Errorf("pin %d: %w", rng, err)
	}
	v := PinVersion{Range: uint32(rng), Region: pv.Region, Epoch: pv.Epoch, CatchUp: pv.CatchUp}
	if pv.NotBeforeMs != 0 {
		v.NotBefore = time.UnixMilli(pv.NotBeforeMs)
	}
	return v, nil
}

// Sync waits until the recorded history has reached etcd's current revision
// (bounded) and returns it.
func (w *PinWatcher) Sync(ctx context.Context, timeout time.Duration) ([]PinVersion, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := w.cli.Get(cctx, w.prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, err
	}
	var maxMod int64
	for _, kv := range resp.Kvs {
		maxMod = max(maxMod, kv.ModRevision)
	}
	err = poll(ctx, timeout, 50*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.lastRev < maxMod {
			return fmt.Errorf("pin watch at revision %d, pins last changed at %d (watch error: %v)", w.lastRev, maxMod, w.err)
		}
		return nil
	})
	return w.Versions(), err
}

// Versions returns the recorded versions in revision order.
func (w *PinWatcher) Versions() []PinVersion {
	w.mu.Lock()
	out := append([]PinVersion(nil), w.versions...)
	w.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].ModRev < out[j].ModRev })
	return out
}

// Close stops the watcher.
func (w *PinWatcher) Close() {
	w.cancel()
	<-w.done
}
