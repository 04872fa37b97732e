package loadgen

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch/etcdembed"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/region"
)

// TestProfileRegion runs a region in-process under load so that
//
//	LOADGEN_PROFILE=10s go test -run TestProfileRegion -cpuprofile cpu.out ./loadgen
//	go tool pprof -top -focus 'github.com/likes-dev/likes/(api|edge|store|pipeline|counts)|pebble' loadgen.test cpu.out
//
// profiles the server's write and read paths (the client shares the process;
// focus on the server packages). Skipped unless LOADGEN_PROFILE is set to a
// phase duration; LOADGEN_PHASES picks phases (default all).
func TestProfileRegion(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LOADGEN_PROFILE"))
	if err != nil || d <= 0 || d > 2*time.Minute {
		t.Skip("set LOADGEN_PROFILE to a phase duration (<= 2m) to profile a region under load")
	}
	secret := []byte("loadgen-profile-secret")
	reg, err := region.Open(context.Background(), region.Config{
		Name: "us", DataDir: t.TempDir(), Secret: secret, UserRate: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg.API)
	defer func() { srv.Close(); _ = reg.Close() }()
	cfg := Config{URL: srv.URL, Secret: secret, PhaseDuration: d}
	if p := os.Getenv("LOADGEN_PHASES"); p != "" {
		cfg.Phases = strings.Split(p, ",")
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	_ = rep.WriteTable(&sb)
	t.Log("\n" + sb.String())
}

// freePort returns a loopback port that was free a moment ago (TCP and UDP).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			pc.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestProfileCluster is TestProfileRegion for the default three regions in one
// process (what `likesd dev` runs): embedded etcd, pins, forwarding and
// replication. The load targets the first region.
//
//	LOADGEN_PROFILE_CLUSTER=10s go test -run TestProfileCluster -cpuprofile cpu.out ./loadgen
func TestProfileCluster(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LOADGEN_PROFILE_CLUSTER"))
	if err != nil || d <= 0 || d > 2*time.Minute {
		t.Skip("set LOADGEN_PROFILE_CLUSTER to a phase duration (<= 2m) to profile three regions under load")
	}
	dir := t.TempDir()
	e, err := etcdembed.StartEmbedded(etcdembed.EmbeddedConfig{
		Dir:        filepath.Join(dir, "etcd"),
		ClientAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
		PeerAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	secret := []byte("loadgen-profile-secret")
	names := []string{"us", "eu", "ap"}
	var regs []*region.Region
	var first *httptest.Server
	seed := ""
	for i, name := range names {
		gp := freePort(t)
		var seeds []string
		if i > 0 {
			seeds = []string{seed}
		} else {
			seed = net.JoinHostPort("127.0.0.1", strconv.Itoa(gp))
		}
		r, err := region.Open(context.Background(), region.Config{
			Name: name, DataDir: dir, Secret: secret, UserRate: -1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Cluster: &region.Cluster{
				Etcd: cli, Regions: names, GossipBind: "127.0.0.1", GossipPort: gp, Seeds: seeds,
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
		srv := httptest.NewServer(r.API)
		defer srv.Close()
		if i == 0 {
			first = srv
		}
	}
	defer func() {
		for _, r := range regs {
			_ = r.Close()
		}
	}()
	cfg := Config{URL: first.URL, Secret: secret, PhaseDuration: d}
	if p := os.Getenv("LOADGEN_PHASES"); p != "" {
		cfg.Phases = strings.Split(p, ",")
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	_ = rep.WriteTable(&sb)
	t.Log("\n" + sb.String())
}
