package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/region"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond * 10) // 10µs .. 100ms
	}
	check := func(q float64, want time.Duration) {
		t.Helper()
		got := h.Quantile(q)
		if diff := float64(got-want) / float64(want); diff < -0.02 || diff > 0.02 {
			t.Errorf("q%.3f = %v, want %v ±2%%", q, got, want)
		}
	}
	check(0.5, 50*time.Millisecond)
	check(0.99, 99*time.Millisecond)
	check(0.01, time.Millisecond)
	if h.Max() != 100*time.Millisecond || h.Count() != 10000 {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
	var m Histogram
	m.Merge(&h)
	m.Record(time.Hour)
	if m.Max() != time.Hour || m.Count() != 10001 || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merge: max %v count %d", m.Max(), m.Count())
	}
	for v := uint64(0); v < 1<<20; v += 997 {
		if i := histIndex(v); histValue(i) > v+v/64+1 || histValue(i)+histValue(i)/64+1 < v {
			t.Fatalf("bucket of %d has midpoint %d", v, histValue(i))
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "http://127.1.2.3", "http://localhost:1/", "http://[::1]:80", "https://LOCALHOST"} {
		if _, err := CheckLoopback(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:8080", "http://example.com", "http://192.168.1.1", "http://[2001:db8::1]/", "ftp://127.0.0.1", "127.0.0.1:8080", "http://0.0.0.0:80", "http://localhost.evil.com"} {
		if _, err := CheckLoopback(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := Run(context.Background(), Config{URL: "http://10.1.1.1:8080", Secret: []byte("x")}); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Run on a non-loopback URL: %v", err)
	}
}

func TestTinyBench(t *testing.T) {
	ctx := context.Background()
	secret := []byte("loadgen-test-secret")
	reg, err := region.Open(ctx, region.Config{
		Name: "us", DataDir: t.TempDir(), Secret: secret, Window: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg.API)
	t.Cleanup(func() {
		srv.Close()
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	progress := 0
	rep, err := Run(ctx, Config{
		URL: srv.URL, Secret: secret, Workers: 4, Items: 50, PhaseDuration: time.Second,
		Progress: func(Progress) { progress++ }, ProgressEvery: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := rep.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sb.String())
	if rep.Interrupted || len(rep.Phases) != 3 || rep.Users != 200 {
		t.Fatalf("report: interrupted=%v phases=%d users=%d", rep.Interrupted, len(rep.Phases), rep.Users)
	}
	for _, p := range rep.Phases {
		if p.Requests == 0 || p.OK != p.Requests || p.ErrorCount() != 0 {
			t.Errorf("%s: requests=%d ok=%d errors=%v", p.Name, p.Requests, p.OK, p.Errors)
		}
		if p.Throughput <= 0 || p.Latency.Samples != uint64(p.OK) || p.Latency.P50Ms <= 0 ||
			p.Latency.P50Ms > p.Latency.P99Ms || p.Latency.P99Ms > p.Latency.MaxMs {
			t.Errorf("%s: throughput %.1f latency %+v", p.Name, p.Throughput, p.Latency)
		}
		if p.DurationS < 0.9 || p.DurationS > 10 {
			t.Errorf("%s: ran %.2fs for a 1s phase", p.Name, p.DurationS)
		}
		if p.Name == PhaseReads {
			if p.Staleness != nil {
				t.Errorf("reads phase has staleness samples")
			}
			continue
		}
		// Every write alternates like/unlike from a fresh state, so every one flips.
		if p.Changed != p.OK {
			t.Errorf("%s: %d of %d writes changed the edge", p.Name, p.Changed, p.OK)
		}
		s := p.Staleness
		if s == nil || s.Samples == 0 || len(s.Errors) != 0 || s.P50Ms > s.P99Ms || s.P99Ms > 10_000 {
			t.Errorf("%s: staleness %+v", p.Name, s)
		}
	}
	if progress == 0 {
		t.Error("no progress callbacks")
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}

	// The viral item's count equals the users whose last write was a like.
	res, err := reg.Counts.Fresh(ctx, rep.ViralItem)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count < 0 || res.Count > int64(rep.Users) {
		t.Errorf("viral count %d out of [0, %d]", res.Count, rep.Users)
	}
}

func TestInterrupted(t *testing.T) {
	secret := []byte("loadgen-test-secret")
	reg, err := region.Open(context.Background(), region.Config{
		Name: "us", DataDir: t.TempDir(), Secret: secret, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg.API)
	t.Cleanup(func() { srv.Close(); _ = reg.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, Config{URL: srv.URL, Secret: secret, Workers: 2, Items: 10, PhaseDuration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("interrupted run took %v", time.Since(start))
	}
	if !rep.Interrupted || len(rep.Phases) != 1 || !rep.Phases[0].Partial || rep.Phases[0].OK == 0 || rep.Phases[0].ErrorCount() != 0 {
		t.Errorf("partial report: %+v", rep)
	}
}
