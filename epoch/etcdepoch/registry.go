package etcdepoch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
)

// The region registry (issue 14): <prefix>registry/<name> holds one
// region's lifecycle state (epoch.RegionState) as JSON; <prefix>meta/registry
// ("1") says the cluster has a registry at all. Every write is a transaction
// compared on the revision it read; every read validates each value strictly
// (unknown fields, another name, an unknown state, a missing time: an error
// wrapping ErrRegistryCorrupt, never a default). Keys are never deleted: a
// retired name stays recorded, so it is never reused.
func registryPrefix(c epoch.Config) string           { return c.Prefix + "registry/" }
func registryKey(c epoch.Config, name string) string { return registryPrefix(c) + name }
func registryMarker(c epoch.Config) string           { return c.Prefix + "meta/registry" }

// registryLayout is the marker's value: the registry's format.
const registryLayout = "1"

// maxRecordBytes bounds a registry value; a larger one is hostile.
const maxRecordBytes = 1024

// Errors of the registry.
var (
	// ErrNoRegistry: the cluster was created before the registry existed and
	// no Init or add has created it since.
	ErrNoRegistry = errors.New("epoch: the cluster has no region registry")
	// ErrRegionNotAdded: the registry does not name the region.
	ErrRegionNotAdded = errors.New("epoch: region was never added to the cluster")
	// ErrRegionRetired: the region is retired; its name is never reused.
	ErrRegionRetired = errors.New("epoch: region is retired")
	// ErrRegionExists: add of a region the registry already names.
	ErrRegionExists = errors.New("epoch: region is already part of the cluster")
	// ErrRegistryCorrupt: a registry value in etcd is not a valid record.
	ErrRegistryCorrupt = errors.New("epoch: region registry value is invalid")
	// ErrRegistryChanged: the record kept changing under a write.
	ErrRegistryChanged = errors.New("epoch: region registry changed concurrently")
)

// RegionRecord is one region's entry in the registry.
type RegionRecord struct {
	Name  string
	State epoch.RegionState
	// Since is when the region entered State (millisecond precision).
	Since time.Time
	rev   int64 // mod revision read (0: not stored)
}

// recordValue is the JSON stored at a registry key.
type recordValue struct {
	Name    string            `json:"name"`
	State   epoch.RegionState `json:"state"`
	SinceMs int64             `json:"sinceMs"`
}

func encodeRecord(r RegionRecord) string {
	b, _ := json.Marshal(recordValue{Name: r.Name, State: r.State, SinceMs: r.Since.UnixMilli()}) // cannot fail: plain struct
	return string(b)
}

// decodeRecord validates a registry key and value.
func decodeRecord(c epoch.Config, kv *mvccpb.KeyValue) (RegionRecord, error) {
	name, ok := strings.CutPrefix(string(kv.Key), registryPrefix(c))
	bad := func(format string, args ...any) (RegionRecord, error) {
		return RegionRecord{}, fmt.Errorf("%w: %s: %s", ErrRegistryCorrupt, kv.Key, fmt.Sprintf(format, args...))
	}
	if !ok {
		return bad("not a registry key")
	}
	if err := epoch.ValidRegion(name); err != nil {
		return bad("%v", err)
	}
	if len(kv.Value) > maxRecordBytes {
		return bad("%d bytes (at most %d)", len(kv.Value), maxRecordBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(kv.Value))
	dec.DisallowUnknownFields()
	var v recordValue
	if err := dec.Decode(&v); err != nil {
		return bad("%v", err)
	}
	if dec.More() {
		return bad("trailing data")
	}
	switch {
	case v.Name != name:
		return bad("names region %q", v.Name)
	case !v.State.Valid():
		return bad("unknown state %q", v.State)
	case v.SinceMs <= 0:
		return bad("no time (sinceMs %d)", v.SinceMs)
	}
	return RegionRecord{Name: name, State: v.State, Since: time.UnixMilli(v.SinceMs), rev: kv.ModRevision}, nil
}

// Registry reads every region's record, by name, in one read (one etcd
// revision). ErrNoRegistry for a cluster without one.
func (d *Directory) Registry(ctx context.Context) ([]RegionRecord, error) {
	resp, err := d.cli.Txn(ctx).Then(
		clientv3.OpGet(registryMarker(d.cfg)),
		clientv3.OpGet(registryPrefix(d.cfg), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("epoch: read the region registry: %w", err)
	}
	if err := d.checkMarker(resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return nil, err
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	out := make([]RegionRecord, 0, len(kvs))
	for _, kv := range kvs {
		rec, err := decodeRecord(d.cfg, kv)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// checkMarker validates a read of the registry marker.
func (d *Directory) checkMarker(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 {
		return ErrNoRegistry
	}
	if v := string(kvs[0].Value); v != registryLayout {
		return fmt.Errorf("%w: %s is %.40q, want %q", ErrRegistryCorrupt, registryMarker(d.cfg), v, registryLayout)
	}
	return nil
}

// RegionRecord reads one region's record: ErrNoRegistry for a cluster
// without a registry, ErrRegionNotAdded when it does not name the region.
func (d *Directory) RegionRecord(ctx context.Context, name string) (RegionRecord, error) {
	if err := epoch.ValidRegion(name); err != nil {
		return RegionRecord{}, err
	}
	resp, err := d.cli.Txn(ctx).Then(
		clientv3.OpGet(registryMarker(d.cfg)),
		clientv3.OpGet(registryKey(d.cfg, name)),
	).Commit()
	if err != nil {
		return RegionRecord{}, fmt.Errorf("epoch: read the registry record of %s: %w", name, err)
	}
	if err := d.checkMarker(resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return RegionRecord{}, err
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return RegionRecord{}, fmt.Errorf("%w: %q", ErrRegionNotAdded, name)
	}
	return decodeRecord(d.cfg, kvs[0])
}

// EnsureRegistry creates the registry if the cluster has none (Init calls
// it): the cluster's home regions (Directory.Homes; homes when none are
// recorded) as home, and — for a cluster created before the registry —
// every other region that has run in it (a registered data set or a live
// lease key) as active, so upgrading never locks out a running region. An
// existing registry is left alone.
func (d *Directory) EnsureRegistry(ctx context.Context, homes []string) error {
	for attempt := 0; attempt < 8; attempt++ {
		resp, err := d.cli.Txn(ctx).Then(
			clientv3.OpGet(registryMarker(d.cfg)),
			clientv3.OpGet(registryPrefix(d.cfg), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		).Commit()
		if err != nil {
			return fmt.Errorf("epoch: create the region registry: %w", err)
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return d.checkMarker(kvs)
		}
		if n := len(resp.Responses[1].GetResponseRange().Kvs); n > 0 {
			return fmt.Errorf("%w: %d records under %s but no %s (deleted by hand?)", ErrRegistryCorrupt, n, registryPrefix(d.cfg), registryMarker(d.cfg))
		}
		recs, err := d.adopt(ctx, homes)
		if err != nil {
			return err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(registryMarker(d.cfg)), "=", 0)}
		puts := []clientv3.Op{clientv3.OpPut(registryMarker(d.cfg), registryLayout)}
		for _, r := range recs {
			k := registryKey(d.cfg, r.Name)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			puts = append(puts, clientv3.OpPut(k, encodeRecord(r)))
		}
		tr, err := d.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return fmt.Errorf("epoch: create the region registry: %w", err)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("%w: creating it", ErrRegistryChanged)
}

// adopt lists the records a new registry starts with.
func (d *Directory) adopt(ctx context.Context, homes []string) ([]RegionRecord, error) {
	stored, err := d.Homes(ctx)
	if err != nil {
		return nil, err
	}
	if len(stored) > 0 {
		homes = stored
	}
	if len(homes) == 0 {
		return nil, errors.New("epoch: create the region registry: the cluster records no home regions")
	}
	now := time.Now()
	var recs []RegionRecord
	seen := map[string]bool{}
	for _, h := range homes {
		if err := epoch.ValidRegion(h); err != nil {
			return nil, err
		}
		if !seen[h] {
			seen[h] = true
			recs = append(recs, RegionRecord{Name: h, State: epoch.StateHome, Since: now})
		}
	}
	var others []string
	ds, err := d.cli.Get(ctx, dataSetKey(d.cfg, ""), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("epoch: create the region registry: %w", err)
	}
	for _, kv := range ds.Kvs {
		others = append(others, strings.TrimPrefix(string(kv.Key), dataSetKey(d.cfg, "")))
	}
	live, err := d.Regions(ctx)
	if err != nil {
		return nil, err
	}
	for _, ri := range live {
		others = append(others, ri.Name)
	}
	slices.Sort(others)
	for _, r := range slices.Compact(others) {
		if seen[r] || epoch.ValidRegion(r) != nil {
			continue
		}
		seen[r] = true
		recs = append(recs, RegionRecord{Name: r, State: epoch.StateActive, Since: now})
	}
	return recs, nil
}

// AddRegion records name as joining (likectl regions add). A cluster
// without a registry gets one first (EnsureRegistry). Adding a region that is
// already joining returns its record (a retried add); any other recorded
// region is refused: ErrRegionRetired for a retired name (never reused),
// ErrRegionExists otherwise.
func (d *Directory) AddRegion(ctx context.Context, name string, now time.Time) (RegionRecord, error) {
	if err := epoch.ValidRegion(name); err != nil {
		return RegionRecord{}, err
	}
	if err := d.EnsureRegistry(ctx, nil); err != nil {
		return RegionRecord{}, err
	}
	rec := RegionRecord{Name: name, State: epoch.StateJoining, Since: now}
	k := registryKey(d.cfg, name)
	tr, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, encodeRecord(rec))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return RegionRecord{}, fmt.Errorf("epoch: add region %s: %w", name, err)
	}
	if tr.Succeeded {
		rec.rev = tr.Header.Revision
		return rec, nil
	}
	kvs := tr.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return RegionRecord{}, fmt.Errorf("%w: add region %s", ErrRegistryChanged, name)
	}
	cur, err := decodeRecord(d.cfg, kvs[0])
	if err != nil {
		return RegionRecord{}, err
	}
	switch cur.State {
	case epoch.StateJoining:
		return cur, nil
	case epoch.StateRetired:
		return cur, fmt.Errorf("%w: %q was retired at %s; a retired name is never reused (its cells stay in every count): choose another name",
			ErrRegionRetired, name, cur.Since.UTC().Format(time.RFC3339))
	}
	return cur, fmt.Errorf("%w: %q is %s", ErrRegionExists, name, cur.State)
}

// SetRegionState moves name's record to state to, if epoch.CheckTransition
// allows it from the stored state (a transaction compared on the record's
// revision; re-read and judged again when it lost a race). Setting the state
// the record already has is a no-op that returns it.
func (d *Directory) SetRegionState(ctx context.Context, name string, to epoch.RegionState, now time.Time) (RegionRecord, error) {
	if !to.Valid() {
		return RegionRecord{}, fmt.Errorf("%w: unknown state %q", epoch.ErrBadTransition, to)
	}
	for attempt := 0; attempt < 8; attempt++ {
		cur, err := d.RegionRecord(ctx, name)
		if err != nil {
			return RegionRecord{}, err
		}
		if err := epoch.CheckTransition(cur.State, to); err != nil {
			return cur, fmt.Errorf("region %s: %w", name, err)
		}
		if cur.State == to {
			return cur, nil
		}
		next := RegionRecord{Name: name, State: to, Since: now}
		k := registryKey(d.cfg, name)
		tr, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", cur.rev)).
			Then(clientv3.OpPut(k, encodeRecord(next))).Commit()
		if err != nil {
			return RegionRecord{}, fmt.Errorf("epoch: set region %s %s: %w", name, to, err)
		}
		if tr.Succeeded {
			next.rev = tr.Header.Revision
			next.Since = time.UnixMilli(now.UnixMilli())
			return next, nil
		}
	}
	return RegionRecord{}, fmt.Errorf("%w: %s", ErrRegistryChanged, name)
}

// CheckRegionStart says whether a region of this name may start: nil, with
// its record, for a home, joining, active or draining region, and for any
// region of a cluster without a registry (ErrNoRegistry is not returned:
// such a cluster predates the registry and its first Init creates it); an
// error wrapping ErrRegionRetired or ErrRegionNotAdded otherwise.
func (d *Directory) CheckRegionStart(ctx context.Context, name string) (RegionRecord, error) {
	rec, err := d.RegionRecord(ctx, name)
	switch {
	case errors.Is(err, ErrNoRegistry):
		return RegionRecord{}, nil
	case errors.Is(err, ErrRegionNotAdded):
		return rec, fmt.Errorf("%w: %q is not in this cluster's region registry: add it first (likectl regions add %s), then start it with --bootstrap-from-peers", ErrRegionNotAdded, name, name)
	case err != nil:
		return rec, err
	case rec.State == epoch.StateRetired:
		return rec, fmt.Errorf("%w: %q was retired at %s and may not run again; its name is never reused",
			ErrRegionRetired, name, rec.Since.UTC().Format(time.RFC3339))
	}
	return rec, nil
}

// RegistryStates maps each recorded region to its state; nil (no error)
// for a cluster without a registry, which the Controller treats as "every
// live region is a target" (the behaviour before the registry existed).
func (d *Directory) RegistryStates(ctx context.Context) (map[string]epoch.RegionState, error) {
	recs, err := d.Registry(ctx)
	if errors.Is(err, ErrNoRegistry) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]epoch.RegionState, len(recs))
	for _, r := range recs {
		out[r.Name] = r.State
	}
	return out, nil
}
