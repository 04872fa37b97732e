package region

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/replica"
	"github.com/likes-dev/likes/store/cassandra"
	"github.com/likes-dev/likes/store/pebblestore"
	"github.com/likes-dev/likes/store/retain"
	"github.com/likes-dev/likes/stream/kafkalog"
)

// Lifecycle configures the region's bounded state and its data folder's
// identity (issue 14).
type Lifecycle struct {
	// LogRetention is the retention horizon (`--log-retention`, default 7
	// days): the log and the cell outbox are truncated below every
	// aggregator's position, every live peer's acknowledged cursor and the
	// horizon; dedupe state older than it is pruned; expired idempotency
	// records are swept. Negative: no retention at all (state grows).
	LogRetention time.Duration
	// RetentionInterval is the time between retention rounds (default 1 minute).
	RetentionInterval time.Duration
	// BootstrapFromPeers lets the region start on an empty data folder although
	// the cluster records a data set for it (`--bootstrap-from-peers`): it
	// registers the new folder and rebuilds from its peers. Without it such a
	// start is refused (ErrIdentity).
	BootstrapFromPeers bool
}

// ErrIdentity is returned (wrapped) when the data folder belongs to another
// cluster or region, is unreadable, or is empty while the cluster says the
// region has state.
var ErrIdentity = errors.New("region: data folder identity")

// identityFile is the name of the identity file in a region's data folder.
const identityFile = "LIKES-IDENTITY"

// maxIdentityBytes bounds what is read of an identity file.
const maxIdentityBytes = 4096

// Identity is what a region's data folder says it holds.
type Identity struct {
	Format int `json:"format"`
	// Cluster is the cluster id from etcd ("" for a standalone region).
	Cluster string `json:"cluster"`
	Region  string `json:"region"`
	// DataSet is this folder's id, registered in etcd for the region.
	DataSet   string `json:"dataSet"`
	CreatedMs int64  `json:"createdMs"`
	// PositionBase is added to every position of the Kafka topic the
	// aggregators read (kafkalog's Config.PositionBase): 0 for an original
	// data set; a bootstrapped one's creation time in ms << 20, above every
	// position an earlier data set of the region reached (a partition takes
	// fewer than 2^20 events a millisecond), so no cell HWM adopted from the
	// peers hides a new event, whether the topic is the old one or new.
	PositionBase uint64 `json:"positionBase,omitempty"`
}

// positionBase is a bootstrapped data set's PositionBase.
func positionBase(now time.Time) uint64 { return uint64(now.UnixMilli()) << 20 }

func (id Identity) validate() error {
	if id.Format != 1 {
		return fmt.Errorf("format %d, want 1", id.Format)
	}
	if err := epoch.ValidRegion(id.Region); err != nil {
		return err
	}
	if id.Cluster != "" {
		if err := etcdepoch.ValidID(id.Cluster); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if err := etcdepoch.ValidID(id.DataSet); err != nil {
		return fmt.Errorf("data set: %w", err)
	}
	if id.PositionBase > kafkalog.MaxPositionBase {
		return fmt.Errorf("position base %d is above %d", id.PositionBase, uint64(kafkalog.MaxPositionBase))
	}
	return nil
}

// ReadIdentity reads and validates the identity file of a region folder
// (ok false: there is none).
func ReadIdentity(dir string) (Identity, bool, error) {
	f, err := os.Open(filepath.Join(dir, identityFile))
	if errors.Is(err, os.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxIdentityBytes+1))
	if err != nil {
		return Identity{}, false, fmt.Errorf("%w: read %s: %v", ErrIdentity, f.Name(), err)
	}
	if len(b) > maxIdentityBytes {
		return Identity{}, false, fmt.Errorf("%w: %s is larger than %d bytes: not an identity file", ErrIdentity, f.Name(), maxIdentityBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var id Identity
	if err := dec.Decode(&id); err != nil {
		return Identity{}, false, fmt.Errorf("%w: %s is not a valid identity file: %v", ErrIdentity, f.Name(), err)
	}
	if dec.More() {
		return Identity{}, false, fmt.Errorf("%w: %s has trailing data", ErrIdentity, f.Name())
	}
	if err := id.validate(); err != nil {
		return Identity{}, false, fmt.Errorf("%w: %s: %v", ErrIdentity, f.Name(), err)
	}
	return id, true, nil
}

// WriteIdentity writes the identity file atomically (a synced temporary file
// renamed over it, then the folder synced).
func WriteIdentity(dir string, id Identity) error {
	if err := id.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(id, "", "  ") // cannot fail: plain struct
	tmp, err := os.CreateTemp(dir, identityFile+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, identityFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("region: write identity: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// hasPebbleData reports whether a folder already holds a Pebble database.
func hasPebbleData(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "MANIFEST") || n == "CURRENT" {
			return true, nil
		}
	}
	return false, nil
}

// identityHolder is where a region's identity lives: the identity file of
// its data folder (the embedded store) or the meta row of its keyspace
// (Cassandra: the keyspace is the region's data, and a lost one is replaced
// by a freshly migrated, empty one).
type identityHolder interface {
	// where names the holder in messages ("/data/us", "keyspace likes_us").
	where() string
	// read is the recorded identity (ok false: none yet).
	read(ctx context.Context) (Identity, bool, error)
	// write records id over the identity with data set prev ("" : none).
	write(ctx context.Context, id Identity, prev string) error
	// legacy reports whether the holder has data but no identity (made
	// before identities existed); once an identity is written, whether it
	// holds data beyond it.
	legacy(ctx context.Context) (bool, error)
	// prepare runs before a new identity is written, and before a bootstrap
	// that wrote one without registering it is completed (bootstrap: its
	// data set replaces the region's registered one).
	prepare(ctx context.Context, bootstrap bool) error
}

// folderIdentity is a Pebble data folder's identity file.
type folderIdentity string

func (f folderIdentity) where() string { return string(f) }

func (f folderIdentity) read(context.Context) (Identity, bool, error) { return ReadIdentity(string(f)) }

func (f folderIdentity) write(_ context.Context, id Identity, _ string) error {
	return WriteIdentity(string(f), id)
}

func (f folderIdentity) legacy(context.Context) (bool, error) { return hasPebbleData(string(f)) }

// prepare: nothing; a folder is one process's, and its store opens (and is
// marked rebuilding) only after the check.
func (f folderIdentity) prepare(context.Context, bool) error { return nil }

// keyspaceIdentity is a Cassandra keyspace's identity (its meta row, written
// by a lightweight transaction: of several processes of a region creating
// one at once, one wins and the others read it). mark, before a new identity
// is written, records the rebuilds it owes (cassandra's MarkRebuild): so
// every other process of the region that reads the identity finds them and
// refuses writes, instead of serving an empty keyspace until the creator
// gets to marking them.
type keyspaceIdentity struct {
	st   *cassandra.Store
	mark func(ctx context.Context, bootstrap bool) error
}

func (k keyspaceIdentity) prepare(ctx context.Context, bootstrap bool) error {
	if k.mark == nil {
		return nil
	}
	if err := k.mark(ctx, bootstrap); err != nil {
		return fmt.Errorf("%w: mark the rebuild of %s: %v", ErrIdentity, k.where(), err)
	}
	return nil
}

func (k keyspaceIdentity) where() string { return "keyspace " + k.st.Keyspace() }

func (k keyspaceIdentity) read(ctx context.Context) (Identity, bool, error) {
	ki, err := k.st.Identity(ctx)
	if err != nil || ki.DataSet == "" {
		return Identity{}, false, err
	}
	id := Identity{Format: 1, Cluster: ki.Cluster, Region: ki.Region, DataSet: ki.DataSet, CreatedMs: ki.CreatedMs, PositionBase: ki.PositionBase}
	if err := id.validate(); err != nil {
		return Identity{}, false, fmt.Errorf("%w: %s: %v", ErrIdentity, k.where(), err)
	}
	return id, true, nil
}

func (k keyspaceIdentity) write(ctx context.Context, id Identity, prev string) error {
	if err := id.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	return k.st.SetIdentity(ctx, id.Cluster, id.DataSet, id.PositionBase, prev)
}

func (k keyspaceIdentity) legacy(ctx context.Context) (bool, error) { return k.st.HoldsData(ctx) }

// dataSets is what the identity check needs of etcd (etcdepoch.Directory).
type dataSets interface {
	ClusterID(ctx context.Context) (string, error)
	DataSet(ctx context.Context, region string) (etcdepoch.DataSet, bool, error)
	RegisterDataSet(ctx context.Context, region, id, replace string, now time.Time) error
}

// IdentityDecision is what checkIdentity found.
type IdentityDecision struct {
	Identity  Identity
	Created   bool // a new folder: the identity was written now
	Bootstrap bool // a new folder replacing the region's registered data set
}

// checkIdentity validates (or creates) the identity of region folder dir:
// it must name this cluster and region; an existing folder's data set must
// be the one etcd records for the region; a new folder for a region that
// etcd says has a data set is refused unless bootstrap. A folder that holds
// a database but no identity (made before identities existed) is adopted
// when etcd records nothing else for the region. ds nil: a standalone region
// (no cluster id, nothing registered).
func checkIdentity(ctx context.Context, dir, region string, ds dataSets, bootstrap bool, now time.Time) (IdentityDecision, error) {
	return checkIdentityOf(ctx, folderIdentity(dir), region, ds, bootstrap, "", now)
}

// checkIdentityOf is checkIdentity of any identity holder (a folder, a
// keyspace). noRebuild, when set, says why this region cannot rebuild from
// its peers: a bootstrap is then refused before anything is written or
// registered (a refused start must leave nothing that would make the next,
// correct one skip its rebuild).
func checkIdentityOf(ctx context.Context, h identityHolder, region string, ds dataSets, bootstrap bool, noRebuild string, now time.Time) (IdentityDecision, error) {
	var dec IdentityDecision
	dir := h.where()
	cluster := ""
	if ds != nil {
		var err error
		if cluster, err = ds.ClusterID(ctx); err != nil {
			return dec, err
		}
	}
	id, ok, err := h.read(ctx)
	if err != nil {
		return dec, err
	}
	var reg etcdepoch.DataSet
	registered := false
	if ds != nil {
		if reg, registered, err = ds.DataSet(ctx, region); err != nil {
			return dec, err
		}
	}
	if ok {
		switch {
		case id.Region != region:
			return dec, fmt.Errorf("%w: %s holds region %q, not %q", ErrIdentity, dir, id.Region, region)
		case id.Cluster != "" && id.Cluster != cluster:
			if cluster == "" {
				return dec, fmt.Errorf("%w: %s belongs to cluster %s; a standalone region cannot run on it", ErrIdentity, dir, id.Cluster)
			}
			return dec, fmt.Errorf("%w: %s belongs to cluster %s, not this cluster %s", ErrIdentity, dir, id.Cluster, cluster)
		case registered && reg.ID != id.DataSet:
			if done, err := completeBootstrap(ctx, h, region, ds, id, reg.ID, bootstrap && noRebuild == "", now); done || err != nil {
				dec.Identity, dec.Bootstrap = id, done
				return dec, err
			}
			return dec, fmt.Errorf("%w: %s is data set %s of region %s, but the cluster records %s for it (the region was rebuilt elsewhere since: this folder is stale)",
				ErrIdentity, dir, id.DataSet, region, reg.ID)
		}
		if id.Cluster == "" && cluster != "" {
			id.Cluster = cluster // a standalone folder joins its first cluster
			if err := h.write(ctx, id, id.DataSet); err != nil {
				return dec, err
			}
		}
		if ds != nil && !registered {
			if err := ds.RegisterDataSet(ctx, region, id.DataSet, "", now); err != nil {
				return dec, err
			}
		}
		dec.Identity = id
		return dec, nil
	}
	legacy, err := h.legacy(ctx)
	if err != nil {
		return dec, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	replace := ""
	if registered {
		if legacy {
			return dec, fmt.Errorf("%w: %s holds a database without an identity, and the cluster records data set %s for region %s: refusing to guess which is right",
				ErrIdentity, dir, reg.ID, region)
		}
		if !bootstrap {
			return dec, fmt.Errorf("%w: %s is empty, but region %s already has state in this cluster (data set %s): start with --bootstrap-from-peers to rebuild it from its peers, or use the region's own data folder",
				ErrIdentity, dir, region, reg.ID)
		}
		if noRebuild != "" {
			return dec, fmt.Errorf("%w: %s is empty and region %s already has state in this cluster (data set %s), but it cannot be rebuilt from its peers: %s",
				ErrIdentity, dir, region, reg.ID, noRebuild)
		}
		replace, dec.Bootstrap = reg.ID, true
	}
	id = Identity{Format: 1, Cluster: cluster, Region: region, DataSet: etcdepoch.NewID(), CreatedMs: now.UnixMilli()}
	if dec.Bootstrap {
		id.PositionBase = positionBase(now)
	}
	if !legacy { // a legacy database is adopted, not created: nothing to rebuild
		if err := h.prepare(ctx, dec.Bootstrap); err != nil {
			return dec, err
		}
	}
	if err := h.write(ctx, id, ""); err != nil {
		return dec, err
	}
	if ds != nil {
		if err := ds.RegisterDataSet(ctx, region, id.DataSet, replace, now); err != nil {
			return dec, err
		}
	}
	dec.Identity, dec.Created = id, !legacy
	return dec, nil
}

// completeBootstrap finishes a bootstrap whose identity id was written but
// whose data set was never registered over replace: its process failed in
// between, or (a keyspace) another process of the region created the
// identity a moment ago and is registering it now. Only with the bootstrap
// flag (may: --bootstrap-from-peers, and the region can rebuild) and only
// while the holder holds nothing but the identity: then registering id is
// what that bootstrap was about to do (RegisterDataSet of the same id is
// idempotent), and this process rebuilds as its creator does. Otherwise
// (done false) the holder is stale.
func completeBootstrap(ctx context.Context, h identityHolder, region string, ds dataSets, id Identity, replace string, may bool, now time.Time) (bool, error) {
	if !may {
		return false, nil
	}
	held, err := h.legacy(ctx)
	if err != nil || held {
		return false, err
	}
	if err := h.prepare(ctx, true); err != nil {
		return false, err
	}
	if err := ds.RegisterDataSet(ctx, region, id.DataSet, replace, now); err != nil {
		return false, err
	}
	return true, nil
}

// checkDataFolder runs checkIdentity for a region on the Pebble store, before
// the store opens.
func (r *Region) checkDataFolder(ctx context.Context) error {
	cfg := r.cfg
	if cfg.Engines.Store != StorePebble {
		return nil
	}
	ds, err := r.clusterDataSets(ctx)
	if err != nil {
		return err
	}
	dec, err := checkIdentityOf(ctx, folderIdentity(filepath.Join(cfg.DataDir, cfg.Name)), cfg.Name, ds, cfg.Lifecycle.BootstrapFromPeers, "", cfg.Clock.Now())
	if err != nil {
		return err
	}
	r.adoptIdentity(dec)
	return nil
}

// checkKeyspace runs the identity check for a region on Cassandra, once its
// store is open (Open refused a keyspace of another region already) and
// before anything writes through it: a keyspace of another cluster, or a
// stale one (its region was rebuilt elsewhere since), is refused, and an
// empty one (freshly migrated) for a region that has a data set in the
// cluster is refused unless --bootstrap-from-peers, which rebuilds it.
func (r *Region) checkKeyspace(ctx context.Context) error {
	if r.Cassandra == nil {
		return nil
	}
	ds, err := r.clusterDataSets(ctx)
	if err != nil {
		return err
	}
	var dec IdentityDecision
	for attempt := 0; ; attempt++ {
		dec, err = checkIdentityOf(ctx, keyspaceIdentity{st: r.Cassandra, mark: r.markRebuildFirst}, r.cfg.Name, ds, r.cfg.Lifecycle.BootstrapFromPeers, "", r.cfg.Clock.Now())
		// Another process of the region recorded an identity meanwhile:
		// check against that one.
		if !errors.Is(err, cassandra.ErrIdentityChanged) || attempt == 2 {
			break
		}
	}
	if err != nil {
		return err
	}
	// The identity may be another process's, created a moment ago: it marked
	// its rebuilds first, so read them now rather than from a copy taken at
	// Open, before they existed.
	if err := r.Cassandra.ReloadRebuild(ctx); err != nil {
		return err
	}
	r.adoptIdentity(dec)
	return nil
}

// markRebuildFirst marks the rebuilds a new keyspace identity owes before the
// identity is written (keyspaceIdentity.mark): for a bootstrap, and for a
// region joining the cluster, as startRebuild does after the check.
func (r *Region) markRebuildFirst(ctx context.Context, bootstrap bool) error {
	if !bootstrap && r.regStates[r.cfg.Name] != epoch.StateJoining {
		return nil
	}
	return r.Cassandra.MarkRebuild(ctx, r.rebuildPeers())
}

// rebuildPeers are the peers a rebuild of this region waits for: with a
// registry, only regions that hold state send a rebuild snapshot (not a
// retired one: it runs no more; not another joining one; not a name never
// added).
func (r *Region) rebuildPeers() []string {
	if r.cfg.Cluster == nil {
		return nil
	}
	var peers []string
	for _, p := range r.cfg.Cluster.Regions {
		if st := r.regStates[p]; p != r.cfg.Name && (r.regStates == nil || (st.Ships() && st != epoch.StateJoining)) {
			peers = append(peers, p)
		}
	}
	return peers
}

// clusterDataSets is the etcd directory the identity check registers data
// sets in (nil: a standalone region), after refusing a retired or
// never-added region before anything of it is registered.
func (r *Region) clusterDataSets(ctx context.Context) (dataSets, error) {
	cfg := r.cfg
	if cfg.Cluster == nil || cfg.Cluster.Etcd == nil {
		return nil, nil
	}
	dir, err := etcdepoch.NewDirectory(cfg.Cluster.Etcd, cfg.Cluster.Epoch)
	if err != nil {
		return nil, err
	}
	if _, err := checkRegistry(ctx, dir, cfg.Name); err != nil {
		return nil, err
	}
	if r.regStates, err = dir.RegistryStates(ctx); err != nil {
		return nil, err
	}
	return dir, nil
}

func (r *Region) adoptIdentity(dec IdentityDecision) {
	if dec.Bootstrap {
		r.log.Warn("bootstrapping an empty data folder or keyspace: the region's earlier data set is replaced; it rebuilds from its peers",
			"dataSet", dec.Identity.DataSet)
	}
	r.identity = dec
}

// raiseRebuildBase starts a rebuild with the aggregators on Kafka, before
// anything serves (the stores' RaiseRebuildBase): the log rises to the data
// set's position base and the aggregators' positions past the topic's old
// records (the lost data set's; the adopted cells hold what of them was
// counted), so the peers' cursors and the adopted cells' HWMs, all of the
// lost data set, are below every new position in both. A joining region
// has nothing anywhere to pass (base 0: nothing to raise). A store rebuilding
// on a data set without a base (a folder restored from a backup) is
// refused: its log holds events the aggregators may not have read from the
// topic, and only an empty log can rise above its peers' cursors here.
func (r *Region) raiseRebuildBase(ctx context.Context) error {
	if r.cfg.Engines.Log != LogKafka {
		return nil
	}
	var (
		rebuilding []string
		raise      func(context.Context, uint64, []uint64) error
	)
	switch {
	case r.Store != nil:
		rebuilding, raise = r.Store.Rebuilding(), r.Store.RaiseRebuildBase
	case r.Cassandra != nil:
		rebuilding, raise = r.Cassandra.Rebuilding(), r.Cassandra.RaiseRebuildBase
	}
	if len(rebuilding) == 0 {
		return nil
	}
	if r.Store != nil {
		restored, err := r.Store.Restored()
		if err != nil {
			return err
		}
		if restored {
			return fmt.Errorf("%w: the folder was restored from a backup and rebuilds from %s: with --log kafka a region rebuilds only on an empty data folder or keyspace (--bootstrap-from-peers); run a restored folder with --log store",
				ErrIdentity, strings.Join(rebuilding, ","))
		}
	}
	base := r.identity.Identity.PositionBase
	if base == 0 {
		if r.regStates[r.cfg.Name] == epoch.StateJoining {
			return nil
		}
		return fmt.Errorf("%w: the store is rebuilding from %s, but its data set has no position base (restored from a backup?): with --log kafka a region rebuilds only on an empty data folder or keyspace (--bootstrap-from-peers); run a restored folder with --log store",
			ErrIdentity, strings.Join(rebuilding, ","))
	}
	if err := r.openKafkaLog(ctx); err != nil {
		return err
	}
	ends, err := r.KafkaLog.EndPositions(ctx)
	if err != nil {
		return fmt.Errorf("region: read the Kafka topic's end before the rebuild: %w", err)
	}
	if err := raise(ctx, base, ends); err != nil {
		return fmt.Errorf("region: raise the log to the data set's position base %d: %w", base, err)
	}
	return nil
}

// startRebuild marks a bootstrapped store as rebuilding from every peer (the
// region refuses writes until each peer's rebuild snapshot has arrived; see
// pebblestore's and cassandra's rebuild.go).
func (r *Region) startRebuild(ctx context.Context) error {
	var (
		rebuilding func() []string
		mark       func([]string) error
		refusal    error
	)
	switch {
	case r.Store != nil:
		rebuilding, mark, refusal = r.Store.Rebuilding, r.Store.MarkRebuild, pebblestore.ErrRebuilding
	case r.Cassandra != nil:
		st := r.Cassandra
		rebuilding, refusal = st.Rebuilding, cassandra.ErrRebuilding
		mark = func(peers []string) error { return st.MarkRebuild(ctx, peers) }
	default:
		return nil
	}
	r.AddReadyCheck("rebuilding", func(context.Context) error {
		if p := rebuilding(); len(p) > 0 {
			return fmt.Errorf("%w: rebuilding from %s (writes refused until their snapshots arrive)", refusal, strings.Join(p, ","))
		}
		return nil
	})
	// A joining region on a new folder rebuilds too: it was added to a
	// running cluster whose logs may be truncated already.
	joining := r.identity.Created && r.regStates[r.cfg.Name] == epoch.StateJoining
	if (!r.identity.Bootstrap && !joining) || r.cfg.Cluster == nil {
		return nil
	}
	peers := r.rebuildPeers()
	if err := mark(peers); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	r.log.Warn("rebuilding from peers: writes are refused until every peer has sent its rebuild snapshot", "peers", peers)
	return nil
}

// startRetention starts the retention loop of the region's store: the
// Pebble Retainer, or the Cassandra one (store/cassandra/retention.go), with
// the same horizon, peers and rule.
func (o *opening) startRetention(context.Context) error {
	cfg, r := o.cfg, o.r
	if (r.Store == nil && r.Cassandra == nil) || cfg.Lifecycle.LogRetention < 0 {
		return nil
	}
	horizon := cfg.Lifecycle.LogRetention
	if horizon == 0 {
		horizon = pebblestore.DefaultRetention
	}
	// The aggregators replay from 0 on purpose (--unsafe-break fence): keep
	// the log. When they read Kafka their positions are the topic's offsets,
	// so the log is cut below what the relay published there instead.
	keepLog := cfg.knobs().Unsafe.NoFence
	var relayed func(context.Context) ([]uint64, error)
	if cfg.Engines.Log == LogKafka {
		if r.KafkaLog == nil {
			return errors.New("region: retention on the Kafka log before the log is open")
		}
		relayed = r.KafkaLog.Relayed
	}
	peers := func() []replica.PeerCursor { return r.holdingPeers(horizon) }
	// stats: log events deleted, idempotency records deleted, failed rounds.
	var stats func() (uint64, uint64, uint64)
	if r.Store != nil {
		ret, err := pebblestore.NewRetainer(pebblestore.RetainerConfig{
			Store: r.Store, Clock: cfg.Clock, Retention: horizon, Interval: cfg.Lifecycle.RetentionInterval,
			KeepLog: keepLog, Relayed: relayed, Peers: peers, Logger: o.log,
		})
		if err != nil {
			return err
		}
		r.retainer = ret
		stats = func() (uint64, uint64, uint64) { s := ret.Stats(); return s.LogDeleted, s.IdemDeleted, s.Failures }
	} else {
		ret, err := cassandra.NewRetainer(r.Cassandra, retain.Config{
			Clock: cfg.Clock, Retention: horizon, Interval: cfg.Lifecycle.RetentionInterval,
			KeepLog: keepLog, Relayed: relayed, Peers: peers, Logger: o.log,
		}, false)
		if err != nil {
			return err
		}
		r.retainer = ret
		// Idempotency records expire by their Cassandra TTL: none to count.
		stats = func() (uint64, uint64, uint64) { s := ret.Stats(); return s.LogDeleted, 0, s.Failures }
	}
	r.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_retention_log_events_deleted_total",
			Help: "Committed log events deleted by retention (below every consumer and older than --log-retention).",
		}, func() float64 { n, _, _ := stats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_retention_idempotency_deleted_total",
			Help: "Expired idempotency records removed from disk (own and other regions'; on Cassandra their TTL removes them, uncounted).",
		}, func() float64 { _, n, _ := stats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "likes_retention_failures_total",
			Help: "Retention rounds that failed (they retry; the log says why).",
		}, func() float64 { _, _, n := stats(); return float64(n) }),
	)
	return nil
}

// holdingPeers are the peers whose acknowledged cursors hold truncation back:
// every configured peer the shipper has heard from within the horizon. A peer
// silent for longer (or not heard from since this process started) holds
// nothing; behind the truncation point it catches up from a snapshot.
func (r *Region) holdingPeers(horizon time.Duration) []replica.PeerCursor {
	if r.cluster == nil {
		return nil
	}
	if r.cluster.nodes != nil && r.cluster.shipperRef.Load() == nil {
		// Another node of the region ships and knows the peers' cursors:
		// this node holds everything (its rounds delete nothing), so only
		// the shipping node's retention truncates.
		return []replica.PeerCursor{{Region: r.cfg.Name + "/" + r.cluster.nodes.Self(), Cursor: replica.Cursor{Log: make([]uint64, r.Backend.Partitions())}}}
	}
	now := r.cfg.Clock.Now()
	var out []replica.PeerCursor
	for _, st := range r.cluster.shipperStats() {
		// A retired peer holds nothing at once: it will never ask again.
		if st.LastSuccess.IsZero() || now.Sub(st.LastSuccess) > horizon || len(st.Acked.Log) == 0 || r.cluster.registry.Retired(st.Region) {
			continue
		}
		out = append(out, replica.PeerCursor{Region: st.Region, Cursor: st.Acked})
	}
	return out
}
