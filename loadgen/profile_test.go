package loadgen

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"likes/region"
)

// TestProfileRegion runs a region in-process under load so that
//
//	LOADGEN_PROFILE=10s go test -run TestProfileRegion -cpuprofile cpu.out ./loadgen
//	go tool pprof -top -focus 'likes/(api|edge|store|pipeline|counts)|pebble' loadgen.test cpu.out
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
