package region_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/chaos/proxy"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/region"
)

// TestReadyzFollowsTheLease: /readyz answers 503 naming the lease while the
// region cannot reach etcd (its lease proof ages out) and 200 again once it
// can; /healthz stays 200 throughout.
func TestReadyzFollowsTheLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	u, err := url.Parse(e.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New("us->etcd", "127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cli, err := etcdepoch.NewClient([]string{"http://" + px.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg := config(t.TempDir())
	cfg.Cluster = &region.Cluster{Etcd: cli, Epoch: epochtest.Config(t, 8), Regions: []string{"us"}}
	_, srv := open(t, cfg)
	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	waitReady := func(what string, ok func(code int, body string) bool) string {
		t.Helper()
		var code int
		var body string
		deadline := time.Now().Add(15 * time.Second)
		for {
			if code, body = get("/readyz"); ok(code, body) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: /readyz %d %s", what, code, body)
			}
			pause(50 * time.Millisecond)
		}
	}
	waitReady("ready", func(code int, _ string) bool { return code == http.StatusOK })
	px.SetMode(proxy.Mode{Kind: proxy.Blackhole})
	body := waitReady("unready without etcd", func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, "lease")
	})
	t.Logf("without etcd: %s", strings.TrimSpace(body))
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz without etcd: %d, want 200 (liveness)", code)
	}
	px.SetMode(proxy.Mode{Kind: proxy.Pass})
	waitReady("ready again", func(code int, _ string) bool { return code == http.StatusOK })
}

// TestBuildInfoMetric: every region exports likes_build_info = 1.
func TestBuildInfoMetric(t *testing.T) {
	r, _ := open(t, config(t.TempDir()))
	if got := metricSum(t, r.Registry, "likes_build_info"); got != 1 {
		t.Fatalf("likes_build_info = %v, want 1", got)
	}
}
