package region_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/region"
)

// TestEtcdAuthorizationLossFailsClosed: a region on an etcd with mutual TLS
// and auth serves while its credentials work; once its role loses its
// permissions it cannot prove its lease, so writes answer 503 and /readyz
// answers 503. A region with a wrong password does not start.
func TestEtcdAuthorizationLossFailsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	s := epochtest.StartSecureEmbedded(t)
	ecfg := epochtest.Config(t, 8)

	wrong := s.Client()
	wrong.Password = "guessed"
	wrong.DialTimeout = 3 * time.Second
	if cli, err := etcdepoch.NewClientWith(wrong); err == nil {
		_ = cli.Close()
		t.Fatal("an etcd client with a wrong password was built")
	}

	cli, err := etcdepoch.NewClientWith(s.Client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg := config(t.TempDir())
	cfg.Cluster = &region.Cluster{Etcd: cli, Epoch: ecfg, Regions: []string{"us"}}
	r, srv := open(t, cfg)

	ready := func() int {
		res, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	epochtest.Eventually(t, 10*time.Second, "the region to write", func() bool {
		_, err := write(t, srv, "alice", "i", "k1", true)
		return err == nil
	})
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz = %d with working credentials", code)
	}

	root := s.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := root.RoleRevokePermission(ctx, "likes", "\x00", "\x00"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, "/probe", "x"); err != nil {
		t.Fatal(err)
	}
	epochtest.Eventually(t, 20*time.Second, "/readyz to answer 503", func() bool { return ready() == http.StatusServiceUnavailable })
	if err := r.Ready(ctx); err == nil {
		t.Fatal("Ready() nil after losing etcd authorization")
	}
	if _, err := write(t, srv, "alice", "j", "k2", true); err == nil {
		t.Fatal("a write was accepted without etcd authorization")
	}

	// Authorization restored: the region proves its lease again.
	if _, err := root.RoleGrantPermission(ctx, "likes", "\x00", "\x00", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	epochtest.Eventually(t, 20*time.Second, "/readyz to answer 200 again", func() bool { return ready() == http.StatusOK })
}
