// Package epochtest is the contract suite of the epoch package, written once
// and run against any etcd: the embedded server (epoch's own tests) or an
// external cluster (LIKES_TEST_ETCD_ENDPOINTS). Every test works under its
// own fresh key prefix, so runs can share one etcd and be repeated.
//
// Timing: leases use a 2s TTL (etcd's floor with its default 100ms tick), so
// the suite waits on real lease expiry only where it tests it; everything
// else is polled with a deadline, never slept.
package epochtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdembed"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// EnvEndpoints names the environment variable with comma-separated client
// URLs of an external etcd for the suite.
const EnvEndpoints = "LIKES_TEST_ETCD_ENDPOINTS"

// EndpointsFromEnv returns the endpoints in EnvEndpoints, or skips t with a
// message saying how to run it.
func EndpointsFromEnv(t testing.TB) []string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(EnvEndpoints))
	if v == "" {
		t.Skipf("%s is unset; set it to an etcd's client URLs (e.g. http://127.0.0.1:2379) to run the contract suite against it", EnvEndpoints)
	}
	var eps []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// Clients returns a client factory for endpoints: each call dials a new
// client, closed when the calling test ends.
func Clients(endpoints []string) func(t *testing.T) *clientv3.Client {
	return func(t *testing.T) *clientv3.Client {
		t.Helper()
		cli, err := etcdepoch.NewClient(endpoints)
		if err != nil {
			t.Fatalf("dial etcd %v: %v", endpoints, err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// StartEmbedded starts an embedded etcd on free loopback ports with a data
// dir under t.TempDir, closed when t ends (register it before any client so
// clients close first).
func StartEmbedded(t testing.TB) *etcdembed.Embedded {
	t.Helper()
	var lastErr error
	for range 3 { // a just-freed port can be taken by someone else
		e, err := etcdembed.StartEmbedded(etcdembed.EmbeddedConfig{
			Dir:        t.TempDir(),
			ClientAddr: FreeAddr(t),
			PeerAddr:   FreeAddr(t),
			Knobs:      &etcdembed.TestingKnobs{NoFsync: true},
		})
		if err == nil {
			t.Cleanup(e.Close)
			return e
		}
		lastErr = err
	}
	t.Fatalf("start embedded etcd: %v", lastErr)
	return nil
}

var prefixSeq atomic.Int64

// Config is the suite's configuration under a fresh prefix for t.
func Config(t testing.TB, ranges int) epoch.Config {
	name := strings.NewReplacer("/", "_", " ", "_", "#", "_").Replace(t.Name())
	return epoch.Config{
		Prefix:  fmt.Sprintf("/likes-test/%s-%d-%d/", name, time.Now().UnixNano(), prefixSeq.Add(1)),
		Ranges:  ranges,
		TTL:     2 * time.Second,
		Margin:  500 * time.Millisecond,
		MaxSkew: 500 * time.Millisecond,
	}
}

// Eventually polls cond every 20ms until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		<-tick.C
	}
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func newDir(t testing.TB, cli *clientv3.Client, cfg epoch.Config) *etcdepoch.Directory {
	t.Helper()
	d, err := etcdepoch.NewDirectory(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func isEpochChanged(err error) bool { return errors.Is(err, epoch.ErrEpochChanged) }
