package etcdepoch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
)

// ErrDataSetReplaced is returned by RegisterDataSet when the region's
// recorded data set is not the one the caller expected to replace.
var ErrDataSetReplaced = errors.New("epoch: the region's data set in etcd is not the expected one")

// Keys of the cluster's identity: <prefix>meta/cluster-id holds the cluster
// id (created once, never changed); <prefix>datasets/<region> holds the id of
// the data folder that region's state lives in (a region's data set), kept
// after the region stops (it is not bound to a lease), so a region restarted
// on an empty folder is told its state exists.
func clusterIDKey(c epoch.Config) string         { return c.Prefix + "meta/cluster-id" }
func dataSetKey(c epoch.Config, r string) string { return c.Prefix + "datasets/" + r }

// DataSet is a region's registered data set.
type DataSet struct {
	ID        string `json:"id"`
	CreatedMs int64  `json:"createdMs"`
}

// NewID returns a random 128-bit id in hex (cluster and data set ids).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// ValidID checks an id read from etcd or a file: 32 lowercase hex digits.
func ValidID(id string) error {
	if len(id) != 32 {
		return fmt.Errorf("epoch: id %q is not 32 hex digits", id)
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("epoch: id %q is not 32 lowercase hex digits", id)
		}
	}
	return nil
}

// ClusterID returns the cluster's id, creating it at the first call on a new
// cluster (one transaction: a concurrent creator's id wins, and both callers
// return it).
func (d *Directory) ClusterID(ctx context.Context) (string, error) {
	k := clusterIDKey(d.cfg)
	id := NewID()
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, id)).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return "", fmt.Errorf("epoch: cluster id: %w", err)
	}
	if resp.Succeeded {
		return id, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return "", errors.New("epoch: cluster id: no value")
	}
	id = string(kvs[0].Value)
	if err := ValidID(id); err != nil {
		return "", fmt.Errorf("epoch: the cluster id in etcd is corrupt: %w", err)
	}
	return id, nil
}

// DataSet returns region's registered data set (ok false: none yet).
func (d *Directory) DataSet(ctx context.Context, region string) (DataSet, bool, error) {
	ds, rev, err := d.dataSet(ctx, region)
	return ds, rev != 0, err
}

// dataSet also returns the key's modification revision (0: absent).
func (d *Directory) dataSet(ctx context.Context, region string) (DataSet, int64, error) {
	if err := epoch.ValidRegion(region); err != nil {
		return DataSet{}, 0, err
	}
	resp, err := d.cli.Get(ctx, dataSetKey(d.cfg, region))
	if err != nil {
		return DataSet{}, 0, fmt.Errorf("epoch: data set of %s: %w", region, err)
	}
	if len(resp.Kvs) == 0 {
		return DataSet{}, 0, nil
	}
	var ds DataSet
	if err := json.Unmarshal(resp.Kvs[0].Value, &ds); err != nil {
		return DataSet{}, 0, fmt.Errorf("epoch: data set of %s is corrupt: %w", region, err)
	}
	if err := ValidID(ds.ID); err != nil {
		return DataSet{}, 0, fmt.Errorf("epoch: data set of %s is corrupt: %w", region, err)
	}
	return ds, resp.Kvs[0].ModRevision, nil
}

// RegisterDataSet records id as region's data set if the recorded one is
// `replace` ("": none recorded); otherwise it fails with ErrDataSetReplaced.
// Registering the id already recorded succeeds (idempotent).
func (d *Directory) RegisterDataSet(ctx context.Context, region, id, replace string, now time.Time) error {
	if err := ValidID(id); err != nil {
		return err
	}
	cur, rev, err := d.dataSet(ctx, region)
	if err != nil {
		return err
	}
	if rev != 0 && cur.ID == id {
		return nil
	}
	if (rev != 0 && cur.ID != replace) || (rev == 0 && replace != "") {
		return fmt.Errorf("%w: %s has %q, expected %q", ErrDataSetReplaced, region, cur.ID, replace)
	}
	k := dataSetKey(d.cfg, region)
	v, _ := json.Marshal(DataSet{ID: id, CreatedMs: now.UnixMilli()}) // cannot fail: plain struct
	cmp := clientv3.Compare(clientv3.ModRevision(k), "=", rev)
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	}
	resp, err := d.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, string(v))).Commit()
	if err != nil {
		return fmt.Errorf("epoch: register data set of %s: %w", region, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s changed concurrently", ErrDataSetReplaced, region)
	}
	return nil
}
