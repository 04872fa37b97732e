package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/pebblestore"
)

// minRetention is the shortest --log-retention accepted: a horizon shorter
// than a restart or a brief partition would send peers to snapshots for
// nothing.
const minRetention = time.Hour

// lifecycleFlags are --log-retention and --bootstrap-from-peers
// (region.Lifecycle).
type lifecycleFlags struct {
	retention retentionFlag
	bootstrap bool
}

// retentionFlag is --log-retention: a duration of at least minRetention, or 0
// (keep everything).
type retentionFlag struct{ d time.Duration }

func (r *retentionFlag) String() string { return r.d.String() }

func (r *retentionFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if d < 0 || (d > 0 && d < minRetention) {
		return fmt.Errorf("must be 0 (keep everything) or at least %v, got %v", minRetention, d)
	}
	r.d = d
	return nil
}

func (l *lifecycleFlags) register(fs *flag.FlagSet) {
	l.retention.d = pebblestore.DefaultRetention
	fs.Var(&l.retention, "log-retention", "retention horizon of the store (Pebble or Cassandra): the log and cell outbox are truncated below every aggregator's position (with --log kafka: what the relay published to the topic), every live peer's acknowledged cursor and this age; dedupe state older is pruned (not with --log kafka); expired idempotency records are swept (0: keep everything)")
	fs.BoolVar(&l.bootstrap, "bootstrap-from-peers", false, "start on an empty data folder (--store pebble) or a freshly migrated, empty keyspace (--store cassandra) although the cluster records state for this region (its data was lost): register the new folder or keyspace and rebuild it from the peers")
}

// config is the region.Lifecycle the flags say.
func (l *lifecycleFlags) config() region.Lifecycle {
	lc := region.Lifecycle{LogRetention: l.retention.d, BootstrapFromPeers: l.bootstrap}
	if l.retention.d == 0 {
		lc.LogRetention = -1 // region.Lifecycle: negative is off, zero the default
	}
	return lc
}
