package etcdepoch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/clustermeta"
)

// TestInitWritesClusterMeta: the first Init records the cluster's parameters;
// a second Init with the same ones is a no-op, with other ones it is refused
// naming each difference and the stored metadata is unchanged; a cluster of
// an older build (a range count, no metadata) gets it on its next Init; a
// hostile value is a clear error for the readers and for Init.
func TestInitWritesClusterMeta(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts an embedded etcd")
		}
		testInitMeta(t, epochtest.StartEmbedded(t).Endpoints())
	})
	t.Run("external", func(t *testing.T) { testInitMeta(t, epochtest.EndpointsFromEnv(t)) })
}

func testInitMeta(t *testing.T, endpoints []string) {
	cli := epochtest.Clients(endpoints)(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg := epochtest.Config(t, 8)
	d := newDirectory(t, cli, cfg)
	if _, err := etcdepoch.ReadMeta(ctx, cli, cfg.Prefix); !errors.Is(err, etcdepoch.ErrNoMeta) {
		t.Fatalf("ReadMeta before Init: %v, want ErrNoMeta", err)
	}
	before := time.Now().Add(-time.Second)
	if err := d.Init(ctx, 8, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	m, err := etcdepoch.ReadMeta(ctx, cli, cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout != clustermeta.Layout || m.Ranges != 8 || m.LeaseTTL != 2*time.Second || m.MaxSkew != 500*time.Millisecond ||
		m.CreatedAt.Before(before) || m.CreatedAt.After(time.Now()) {
		t.Fatalf("metadata after Init = %+v", m)
	}
	if err := d.Init(ctx, 8, []string{"z"}); err != nil {
		t.Fatalf("second Init with the same parameters: %v", err)
	}
	if _, err := etcdepoch.CheckMeta(ctx, cli, cfg); err != nil {
		t.Fatalf("CheckMeta of the creating config: %v", err)
	}

	other := cfg
	other.TTL, other.MaxSkew = 3*time.Second, time.Second
	err = newDirectory(t, cli, other).Init(ctx, 8, []string{"a", "b"})
	if !errors.Is(err, etcdepoch.ErrMetaMismatch) || !strings.Contains(err.Error(), "lease TTL: cluster 2s, given 3s") ||
		!strings.Contains(err.Error(), "max skew: cluster 500ms, given 1s") {
		t.Fatalf("Init with other parameters: %v, want ErrMetaMismatch naming TTL and skew", err)
	}
	if _, err := etcdepoch.CheckMeta(ctx, cli, other); !errors.Is(err, etcdepoch.ErrMetaMismatch) {
		t.Fatalf("CheckMeta of another config: %v", err)
	}
	if again, err := etcdepoch.ReadMeta(ctx, cli, cfg.Prefix); err != nil || again != m {
		t.Fatalf("metadata overwritten: %+v %v, want %+v", again, err, m)
	}

	// An older cluster: its range count only.
	old := epochtest.Config(t, 4)
	if _, err := cli.Put(ctx, old.RangesKey(), "4"); err != nil {
		t.Fatal(err)
	}
	if err := newDirectory(t, cli, old).Init(ctx, 4, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if m, err := etcdepoch.ReadMeta(ctx, cli, old.Prefix); err != nil || m.Ranges != 4 || m.LeaseTTL != old.TTL {
		t.Fatalf("metadata of an upgraded cluster: %+v %v", m, err)
	}

	// Metadata without a range count (deleted by hand): Init restores it.
	if _, err := cli.Delete(ctx, cfg.RangesKey()); err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx, 8, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, cfg.RangesKey()); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "8" {
		t.Fatalf("range count after Init: %v %v", resp, err)
	}
	if _, err := cli.Delete(ctx, cfg.RangesKey()); err != nil {
		t.Fatal(err)
	}
	if err := newDirectory(t, cli, other).Init(ctx, 8, []string{"a"}); !errors.Is(err, etcdepoch.ErrMetaMismatch) {
		t.Fatalf("Init with other parameters over metadata without a range count: %v", err)
	}

	// Hostile values: readers and Init refuse them by name.
	bad := epochtest.Config(t, 4)
	for _, v := range []string{`{"layout":1,"ranges":4,"leaseTTLMs":-1,"maxSkewMs":0}`, `garbage`, `{"layout":9}`} {
		if _, err := cli.Put(ctx, etcdepoch.MetaKey(bad), v); err != nil {
			t.Fatal(err)
		}
		if _, err := etcdepoch.ReadMeta(ctx, cli, bad.Prefix); err == nil || !strings.Contains(err.Error(), "meta/cluster") {
			t.Fatalf("ReadMeta of %s: %v", v, err)
		}
		if err := newDirectory(t, cli, bad).Init(ctx, 4, []string{"a"}); err == nil || !strings.Contains(err.Error(), "meta/cluster") {
			t.Fatalf("Init over %s: %v", v, err)
		}
	}
	if resp, err := cli.Get(ctx, bad.PinsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("Init over bad metadata created pins: %v %v", resp, err)
	}
}

func newDirectory(t *testing.T, cli *clientv3.Client, cfg epoch.Config) *etcdepoch.Directory {
	t.Helper()
	d, err := etcdepoch.NewDirectory(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
