package etcdepoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/internal/clustermeta"
)

// initBatch is how many pins one Init transaction creates (etcd's default
// limit is 128 operations per transaction side).
const initBatch = 64

// pinValue is the JSON stored at a pin key.
type pinValue struct {
	Region      string `json:"region"`
	Epoch       uint64 `json:"epoch"`
	NotBeforeMs int64  `json:"notBeforeMs"`
	CatchUp     bool   `json:"catchUp,omitempty"`
	From        string `json:"from,omitempty"`
}

func encodePin(p epoch.Pin) string {
	v := pinValue{Region: p.Region, Epoch: p.Epoch, CatchUp: p.CatchUp, From: p.From}
	if !p.NotBefore.IsZero() {
		v.NotBeforeMs = p.NotBefore.UnixMilli()
	}
	b, _ := json.Marshal(v) // cannot fail: plain struct
	return string(b)
}

func decodePin(rng uint32, b []byte) (epoch.Pin, error) {
	var v pinValue
	if err := json.Unmarshal(b, &v); err != nil {
		return epoch.Pin{}, fmt.Errorf("epoch: pin %d: %w", rng, err)
	}
	if v.Region == "" || v.Epoch == 0 {
		return epoch.Pin{}, fmt.Errorf("epoch: pin %d: incomplete value %s", rng, b)
	}
	p := epoch.Pin{Range: rng, Region: v.Region, Epoch: v.Epoch, CatchUp: v.CatchUp, From: v.From}
	if v.NotBeforeMs != 0 {
		p.NotBefore = time.UnixMilli(v.NotBeforeMs)
	}
	return p, nil
}

// parsePinKey returns the range of a key under the pins prefix.
func parsePinKey(c epoch.Config, key []byte) (uint32, bool) {
	s, ok := strings.CutPrefix(string(key), c.PinsPrefix())
	if !ok || len(s) != 5 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n >= uint64(c.Ranges) {
		return 0, false
	}
	return uint32(n), true
}

// Directory reads and writes pins and region registrations in etcd. It holds
// no state of its own and is safe for concurrent use.
type Directory struct {
	cli *clientv3.Client
	cfg epoch.Config
}

// NewDirectory validates cfg (filling defaults) and wraps cli.
func NewDirectory(cli *clientv3.Client, cfg epoch.Config) (*Directory, error) {
	if cli == nil {
		return nil, errors.New("epoch: NewDirectory needs a client")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &Directory{cli: cli, cfg: cfg}, nil
}

// epoch.Config is the directory's validated configuration.
func (d *Directory) Config() epoch.Config { return d.cfg }

// Init creates a new cluster: its metadata (clustermeta.Meta: the range
// count, the lease TTL and max skew of the directory's configuration, the key
// layout version), its home regions, then its pins: range i →
// regions[i % len(regions)] at epoch 1, each only if absent, so Init is
// idempotent and never lowers an epoch or undoes a move. ranges must equal
// epoch.Config.Ranges.
//
// The metadata, the range count and the homes are written in one
// transaction, guarded by "none of them exists", before any pin (a
// cluster's pins cannot all fit one etcd transaction: 128 operations by
// default), so no pin ever exists without the metadata. They are never
// overwritten: a later Init whose parameters differ from the stored ones
// fails with an error wrapping ErrMetaMismatch that names each difference (its
// regions may differ: the homes of a cluster are those of its creation). A
// cluster created before the metadata existed (a range count, no metadata)
// gets it on its next Init, guarded by that range count. Init also creates
// the region registry if there is none (EnsureRegistry).
func (d *Directory) Init(ctx context.Context, ranges int, regions []string) error {
	if ranges != d.cfg.Ranges {
		return fmt.Errorf("epoch: Init with %d ranges, directory configured for %d", ranges, d.cfg.Ranges)
	}
	if len(regions) == 0 {
		return errors.New("epoch: Init needs at least one region")
	}
	for _, r := range regions {
		if err := epoch.ValidRegion(r); err != nil {
			return err
		}
	}
	meta := MetaOf(d.cfg)
	meta.CreatedAt = time.Now()
	enc, err := clustermeta.Encode(meta)
	if err != nil {
		return fmt.Errorf("epoch: init: %w", err)
	}
	want := strconv.Itoa(ranges)
	mk, metaKey := d.cfg.RangesKey(), MetaKey(d.cfg)
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(mk), "=", 0), clientv3.Compare(clientv3.CreateRevision(metaKey), "=", 0)).
		Then(clientv3.OpPut(mk, want), clientv3.OpPut(d.cfg.HomesKey(), strings.Join(regions, ",")), clientv3.OpPut(metaKey, string(enc))).
		Else(clientv3.OpGet(mk), clientv3.OpGet(metaKey)).Commit()
	if err != nil {
		return fmt.Errorf("epoch: init: %w", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && string(kvs[0].Value) != want {
			return fmt.Errorf("%w: cluster was created with %s ranges, not %d", ErrMetaMismatch, kvs[0].Value, ranges)
		}
		if len(kvs) == 0 {
			// Metadata without a range count (deleted by hand): check the
			// metadata, then restore the count and the homes.
			if err := d.checkMeta(resp.Responses[1].GetResponseRange().Kvs, meta); err != nil {
				return err
			}
			if _, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(mk), "=", 0)).
				Then(clientv3.OpPut(mk, want), clientv3.OpPut(d.cfg.HomesKey(), strings.Join(regions, ","))).Commit(); err != nil {
				return fmt.Errorf("epoch: init: %w", err)
			}
		} else if err := d.initMeta(ctx, resp.Responses[1].GetResponseRange().Kvs, meta, enc, want); err != nil {
			return err
		}
	}
	for lo := 0; lo < ranges; lo += initBatch {
		hi := min(lo+initBatch, ranges)
		if err := d.initBatch(ctx, lo, hi, regions); err != nil {
			return err
		}
	}
	// Last, so a registry never names homes whose pins do not exist yet.
	return d.EnsureRegistry(ctx, regions)
}

// initMeta checks the stored metadata (kvs: the read of its key) against
// meta, or writes it for a cluster created before it existed.
func (d *Directory) initMeta(ctx context.Context, kvs []*mvccpb.KeyValue, meta clustermeta.Meta, enc []byte, ranges string) error {
	metaKey := MetaKey(d.cfg)
	for attempt := 0; ; attempt++ {
		if len(kvs) == 1 {
			return d.checkMeta(kvs, meta)
		}
		if attempt > 0 {
			return fmt.Errorf("epoch: init: %s vanished while being written", metaKey)
		}
		// An older cluster: a range count (checked equal) and no metadata.
		mk := d.cfg.RangesKey()
		tr, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(metaKey), "=", 0), clientv3.Compare(clientv3.Value(mk), "=", ranges)).
			Then(clientv3.OpPut(metaKey, string(enc))).
			Else(clientv3.OpGet(metaKey)).Commit()
		if err != nil {
			return fmt.Errorf("epoch: init: %w", err)
		}
		if tr.Succeeded {
			return nil
		}
		kvs = tr.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return fmt.Errorf("epoch: init: %s changed while the metadata was written", mk)
		}
	}
}

// checkMeta compares the stored metadata (kvs: a read of its key, one
// value) with meta.
func (d *Directory) checkMeta(kvs []*mvccpb.KeyValue, meta clustermeta.Meta) error {
	if len(kvs) != 1 {
		return fmt.Errorf("epoch: init: %s: no metadata and no creation", MetaKey(d.cfg))
	}
	stored, err := clustermeta.Decode(kvs[0].Value)
	if err != nil {
		return fmt.Errorf("epoch: init: %s: %w", MetaKey(d.cfg), err)
	}
	if diff := stored.Diff(meta); len(diff) > 0 {
		return fmt.Errorf("%w: %s (the cluster's parameters are fixed at its creation)", ErrMetaMismatch, strings.Join(diff, "; "))
	}
	return nil
}

// ErrMetaMismatch is wrapped by Init when the cluster exists with other
// parameters, and by CheckMeta when a configuration disagrees with the
// cluster's metadata.
var ErrMetaMismatch = errors.New("epoch: parameters disagree with the cluster's metadata")

// ErrNoMeta is returned by ReadMeta for a cluster without metadata: one not
// created yet, or created by a build before the metadata existed (its next
// Init writes it).
var ErrNoMeta = errors.New("epoch: the cluster has no metadata")

// MetaKey is the etcd key of the cluster metadata under cfg.Prefix.
func MetaKey(cfg epoch.Config) string { return cfg.Prefix + "meta/cluster" }

// MetaOf is the metadata a cluster created with cfg (defaults filled) gets.
func MetaOf(cfg epoch.Config) clustermeta.Meta {
	return clustermeta.Meta{Layout: clustermeta.Layout, Ranges: cfg.Ranges, LeaseTTL: cfg.TTL, MaxSkew: cfg.MaxSkew}
}

// ReadMeta reads and validates the cluster metadata under prefix (""
// means epoch.DefaultPrefix). It returns ErrNoMeta when there is none, and an
// error wrapping clustermeta.ErrInvalid for a value that is not valid
// metadata.
func ReadMeta(ctx context.Context, cli *clientv3.Client, prefix string) (clustermeta.Meta, error) {
	if prefix == "" {
		prefix = epoch.DefaultPrefix
	}
	key := MetaKey(epoch.Config{Prefix: prefix})
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return clustermeta.Meta{}, fmt.Errorf("epoch: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return clustermeta.Meta{}, fmt.Errorf("%w (%s is absent)", ErrNoMeta, key)
	}
	m, err := clustermeta.Decode(resp.Kvs[0].Value)
	if err != nil {
		return clustermeta.Meta{}, fmt.Errorf("epoch: %s: %w", key, err)
	}
	return m, nil
}

// CheckMeta reads the cluster metadata under cfg.Prefix and checks cfg's
// Ranges, TTL and MaxSkew (defaults filled) against it: nil when they agree,
// an error wrapping ErrMetaMismatch naming each difference, ErrNoMeta when
// the cluster has none. likesd can call it before it starts a region.
func CheckMeta(ctx context.Context, cli *clientv3.Client, cfg epoch.Config) (clustermeta.Meta, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return clustermeta.Meta{}, err
	}
	m, err := ReadMeta(ctx, cli, cfg.Prefix)
	if err != nil {
		return clustermeta.Meta{}, err
	}
	if diff := m.Diff(MetaOf(cfg)); len(diff) > 0 {
		return m, fmt.Errorf("%w: %s", ErrMetaMismatch, strings.Join(diff, "; "))
	}
	return m, nil
}

// initBatch creates the absent pins of ranges [lo, hi) in one transaction:
// it reads which exist, then creates the others guarded by "still absent";
// on a lost race it reads again.
func (d *Directory) initBatch(ctx context.Context, lo, hi int, regions []string) error {
	for {
		resp, err := d.cli.Get(ctx, d.cfg.PinKey(uint32(lo)),
			clientv3.WithRange(d.cfg.PinKey(uint32(hi))), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("epoch: init: %w", err)
		}
		have := make(map[string]bool, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = true
		}
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for i := lo; i < hi; i++ {
			k := d.cfg.PinKey(uint32(i))
			if have[k] {
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			puts = append(puts, clientv3.OpPut(k, encodePin(epoch.Pin{Region: regions[i%len(regions)], Epoch: 1})))
		}
		if len(puts) == 0 {
			return nil
		}
		tr, err := d.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return fmt.Errorf("epoch: init: %w", err)
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// Pins lists every pin, by range.
func (d *Directory) Pins(ctx context.Context) ([]epoch.Pin, error) {
	pins, _, err := d.pins(ctx)
	return pins, err
}

// pins also returns the read's revision.
func (d *Directory) pins(ctx context.Context) ([]epoch.Pin, int64, error) {
	resp, err := d.cli.Get(ctx, d.cfg.PinsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("epoch: read pins: %w", err)
	}
	pins := make([]epoch.Pin, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rng, ok := parsePinKey(d.cfg, kv.Key)
		if !ok {
			continue
		}
		p, err := decodePin(rng, kv.Value)
		if err != nil {
			return nil, 0, err
		}
		pins = append(pins, p)
	}
	sort.Slice(pins, func(i, j int) bool { return pins[i].Range < pins[j].Range })
	return pins, resp.Header.Revision, nil
}

// Pin reads one range's pin (epoch.ErrNoPin if absent).
func (d *Directory) Pin(ctx context.Context, rng uint32) (epoch.Pin, error) {
	if int(rng) >= d.cfg.Ranges {
		return epoch.Pin{}, fmt.Errorf("epoch: range %d out of [0, %d)", rng, d.cfg.Ranges)
	}
	resp, err := d.cli.Get(ctx, d.cfg.PinKey(rng))
	if err != nil {
		return epoch.Pin{}, fmt.Errorf("epoch: read pin %d: %w", rng, err)
	}
	if len(resp.Kvs) == 0 {
		return epoch.Pin{}, fmt.Errorf("%w %d", epoch.ErrNoPin, rng)
	}
	return decodePin(rng, resp.Kvs[0].Value)
}

// MoveOption changes how Move and Drain move a pin.
type MoveOption func(*moveOptions)

type moveOptions struct {
	planned bool
	onMoved func(epoch.Pin)
}

// OnMoved makes Drain call fn with each pin it moved, as it goes (progress of
// a long drain); Move ignores it.
func OnMoved(fn func(epoch.Pin)) MoveOption { return func(o *moveOptions) { o.onMoved = fn } }

// Planned makes the move a planned one (DESIGN section 5): the new pin has
// CatchUp set, so the new owner starts writing only after it has caught up on
// the logs of every live region (the old owner's tail included) and settled
// the pin. Without it a move is unplanned, as a failover is: the new owner
// starts at notBefore, and an unreplicated tail of the old owner is merged
// late through branch corrections.
func Planned() MoveOption { return func(o *moveOptions) { o.planned = true } }

// Move pins range rng to region to at epoch expectEpoch+1 with the given
// notBefore (normally epoch.Config.NotBefore(now)), in one etcd transaction that
// only applies if the stored pin is the one read at expectEpoch (compared by
// its mod revision, which pins the exact value and so its epoch). It returns
// the new pin, or an error wrapping epoch.ErrEpochChanged when the stored epoch is
// not expectEpoch (another move won).
func (d *Directory) Move(ctx context.Context, rng uint32, expectEpoch uint64, to string, notBefore time.Time, opts ...MoveOption) (epoch.Pin, error) {
	var o moveOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := epoch.ValidRegion(to); err != nil {
		return epoch.Pin{}, err
	}
	if int(rng) >= d.cfg.Ranges {
		return epoch.Pin{}, fmt.Errorf("epoch: range %d out of [0, %d)", rng, d.cfg.Ranges)
	}
	key := d.cfg.PinKey(rng)
	resp, err := d.cli.Get(ctx, key)
	if err != nil {
		return epoch.Pin{}, fmt.Errorf("epoch: move range %d: %w", rng, err)
	}
	for {
		if len(resp.Kvs) == 0 {
			return epoch.Pin{}, fmt.Errorf("%w %d", epoch.ErrNoPin, rng)
		}
		kv := resp.Kvs[0]
		cur, err := decodePin(rng, kv.Value)
		if err != nil {
			return epoch.Pin{}, err
		}
		if cur.Epoch != expectEpoch {
			return cur, fmt.Errorf("%w: range %d is at epoch %d (region %q), expected %d",
				epoch.ErrEpochChanged, rng, cur.Epoch, cur.Region, expectEpoch)
		}
		// A new epoch never starts before the current one may: the current
		// owner may write until its own notBefore-based window has passed.
		start := notBefore
		if cur.NotBefore.After(start) {
			start = cur.NotBefore
		}
		// A pin still catching up was never written by its owner: the
		// region the next owner must catch up on is still the one before.
		from := cur.Region
		if cur.CatchUp && cur.From != "" {
			from = cur.From
		}
		next := epoch.Pin{Range: rng, Region: to, Epoch: expectEpoch + 1, NotBefore: start, CatchUp: o.planned, From: from}
		tr, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, encodePin(next))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return epoch.Pin{}, fmt.Errorf("epoch: move range %d: %w", rng, err)
		}
		if tr.Succeeded {
			return decodePin(rng, []byte(encodePin(next))) // normalised to ms, as stored
		}
		// Lost a race: judge the value that won.
		resp = (*clientv3.GetResponse)(tr.Responses[0].GetResponseRange())
	}
}

// Drain moves every range pinned to from over to to, each by its own Move at
// notBefore, or at epoch.Config.NotBefore(now) when that is later: a drain of many
// ranges can outlast a notBefore computed before it started, and a range must
// never become writable by to sooner than TTL + MaxSkew after its own move
// (the old owner may write until TTL − Margin after it). A range moved
// concurrently by someone else is re-read and skipped if it left from. It
// returns the pins it moved.
func (d *Directory) Drain(ctx context.Context, from, to string, notBefore time.Time, opts ...MoveOption) ([]epoch.Pin, error) {
	if from == to {
		return nil, fmt.Errorf("epoch: drain from %q to itself", from)
	}
	var o moveOptions
	for _, opt := range opts {
		opt(&o)
	}
	pins, err := d.Pins(ctx)
	if err != nil {
		return nil, err
	}
	var moved []epoch.Pin
	for _, p := range pins {
		for p.Region == from {
			nb := notBefore
			if floor := d.cfg.NotBefore(time.Now()); nb.Before(floor) {
				nb = floor
			}
			np, err := d.Move(ctx, p.Range, p.Epoch, to, nb, opts...)
			if err == nil {
				moved = append(moved, np)
				if o.onMoved != nil {
					o.onMoved(np)
				}
				break
			}
			if !errors.Is(err, epoch.ErrEpochChanged) {
				return moved, err
			}
			p = np // the current pin; loop if still on from
		}
	}
	return moved, nil
}

// Settle clears CatchUp on range rng's pin if it is still at epoch: the new
// owner of a planned move calls it once it has caught up on every live
// region's log. It returns the pin as stored afterwards; a pin that moved on
// (another epoch) is left alone and returned with epoch.ErrEpochChanged.
func (d *Directory) Settle(ctx context.Context, rng uint32, ep uint64) (epoch.Pin, error) {
	if int(rng) >= d.cfg.Ranges {
		return epoch.Pin{}, fmt.Errorf("epoch: range %d out of [0, %d)", rng, d.cfg.Ranges)
	}
	key := d.cfg.PinKey(rng)
	for {
		resp, err := d.cli.Get(ctx, key)
		if err != nil {
			return epoch.Pin{}, fmt.Errorf("epoch: settle range %d: %w", rng, err)
		}
		if len(resp.Kvs) == 0 {
			return epoch.Pin{}, fmt.Errorf("%w %d", epoch.ErrNoPin, rng)
		}
		kv := resp.Kvs[0]
		cur, err := decodePin(rng, kv.Value)
		if err != nil {
			return epoch.Pin{}, err
		}
		if cur.Epoch != ep {
			return cur, fmt.Errorf("%w: range %d is at epoch %d, not %d", epoch.ErrEpochChanged, rng, cur.Epoch, ep)
		}
		if !cur.CatchUp {
			return cur, nil
		}
		next := cur
		next.CatchUp = false
		tr, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, encodePin(next))).Commit()
		if err != nil {
			return epoch.Pin{}, fmt.Errorf("epoch: settle range %d: %w", rng, err)
		}
		if tr.Succeeded {
			return next, nil
		}
	}
}

// Homes returns the regions the cluster was created with, in order: range r's
// home is epoch.Home(r, homes). Nil for a cluster created before it was recorded.
func (d *Directory) Homes(ctx context.Context) ([]string, error) {
	resp, err := d.cli.Get(ctx, d.cfg.HomesKey())
	if err != nil {
		return nil, fmt.Errorf("epoch: read homes: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var out []string
	for _, r := range strings.Split(string(resp.Kvs[0].Value), ",") {
		if err := epoch.ValidRegion(r); err != nil {
			return nil, fmt.Errorf("epoch: homes: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Regions lists the live regions: those whose lease key exists.
func (d *Directory) Regions(ctx context.Context) ([]epoch.RegionInfo, error) {
	resp, err := d.cli.Get(ctx, d.cfg.RegionsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("epoch: read regions: %w", err)
	}
	out := make([]epoch.RegionInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var ri epoch.RegionInfo
		if err := json.Unmarshal(kv.Value, &ri); err != nil {
			return nil, fmt.Errorf("epoch: region %s: %w", kv.Key, err)
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
