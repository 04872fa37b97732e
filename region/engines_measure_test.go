package region

// TestMeasureEngines produces the engines figures of BENCHMARKS.md: the same
// loadgen load against one region on the embedded default and one region on
// Cassandra + Kafka + Redis, in the same run, so the engines' figures are
// ratios against embedded figures taken minutes apart under the same machine
// load. Opt-in (CI never runs it), and it needs the real servers:
//
//	bash scripts/servers.sh up redis kafka cassandra && eval "$(bash scripts/servers.sh env)"
//	LIKES_MEASURE=1 go test ./region -run TestMeasureEngines -v -timeout 30m
//
// For each region (embedded, engines, embedded again to bracket the load):
//
//  1. loadgen uniform-writes for LIKES_MEASURE_DURATION (default 15s) with
//     LIKES_MEASURE_WORKERS (default 32) over HTTP (loopback), on
//     LIKES_MEASURE_PARTITIONS log partitions (default 16): throughput,
//     write p50/p99, staleness p99 (now − asOf of counts read every 50ms);
//  2. wait until the aggregators (and the relay) have no lag;
//  3. loadgen viral-writes (every user flips their like on one item) for the
//     same duration, wait for no lag again, and divide the cell writes the
//     aggregators committed meanwhile by the viral item's changed likes.
//
// LIKES_MEASURE_LINGER sets the Kafka relay's linger (default: the region's;
// 0: none) and LIKES_MEASURE_SEQUENCE_GROUPS the store's sequence groups, to
// compare them; LIKES_MEASURE_ONLY=engines skips the embedded runs (and the
// ratios), for quicker A/B runs of engines code. LIKES_MEASURE_PROFILE=FILE writes a CPU profile of this
// process during the engines' uniform phase.
//
// CPU: the process CPU per write covers the region and the load generator (one
// process); with the engines, the CPU of the Cassandra, Kafka and Redis
// processes (their pid files from scripts/servers.sh) is reported apart.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/loadgen"
	"github.com/likes-dev/likes/store/cassandra"
)

type measEngines struct {
	name                  string
	rate, p50, p99, stale float64 // writes/s, ms, ms, ms (uniform)
	vRate, vP99, vStale   float64 // viral
	errs, vErrs           int64
	cpuUs                 float64 // process CPU per uniform write (region + loadgen)
	engineCPUUs           float64 // engines' processes CPU per uniform write
	perEngineUs           string  // the same, per process
	cellWrites, vChanged  uint64
	cellsPerLike          float64
	paxosPerLike          float64 // Cassandra requests per uniform like: Paxos (LWTs, SERIAL reads)
	plainPerLike          float64 // and every other one
	load0, load1          string
}

func TestMeasureEngines(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") != "1" {
		t.Skip("opt-in measurement for BENCHMARKS.md: LIKES_MEASURE=1 go test ./region -run TestMeasureEngines -v -timeout 30m (with the servers of scripts/servers.sh)")
	}
	env := realEngines(t)
	dur := 15 * time.Second
	if v := os.Getenv("LIKES_MEASURE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 2*time.Minute {
			t.Fatalf("LIKES_MEASURE_DURATION=%q: want a duration in (0, 2m]", v)
		}
		dur = d
	}
	workers := 32
	if v := os.Getenv("LIKES_MEASURE_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1024 {
			t.Fatalf("LIKES_MEASURE_WORKERS=%q", v)
		}
		workers = n
	}
	parts := 16
	if v := os.Getenv("LIKES_MEASURE_PARTITIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 256 {
			t.Fatalf("LIKES_MEASURE_PARTITIONS=%q: want 1..256", v)
		}
		parts = n
	}
	runs := []string{"embedded", "engines", "embedded"}
	if os.Getenv("LIKES_MEASURE_ONLY") == "engines" {
		runs = []string{"engines"} // A/B runs of engines code: no reference, no ratios
	}
	var results []measEngines
	for i, name := range runs {
		cfg := Config{
			Name: "us", Partitions: parts, Window: 250 * time.Millisecond, Secret: e2eSecret, UserRate: -1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		if name == "engines" {
			cfg.Engines = engineConfig(t, env, "meas")
			cfg.Engines.Kafka.PollInterval, cfg.Engines.Kafka.HeartbeatInterval = 0, 0 // the defaults
			if v := os.Getenv("LIKES_MEASURE_LINGER"); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 || d > time.Second {
					t.Fatalf("LIKES_MEASURE_LINGER=%q: want a duration in [0, 1s]", v)
				}
				cfg.Engines.Kafka.Linger = -1 // 0: none
				if d > 0 {
					cfg.Engines.Kafka.Linger = d
				}
			}
		} else {
			cfg.DataDir = t.TempDir()
		}
		res := measureOne(t, cfg, name, fmt.Sprintf("m%d", i), dur, workers)
		t.Logf("%s: %+v", name, res)
		results = append(results, res)
	}
	t.Logf("RESULTS (workers %d, phases %v each)", workers, dur)
	for _, r := range results {
		t.Logf("  %-8s uniform %.0f writes/s p50 %.0f ms p99 %.0f ms staleness p99 %.0f ms errors %d | viral %.0f writes/s p99 %.0f ms staleness p99 %.0f ms errors %d | cell writes %d / viral changed likes %d = %.4f per like event | process CPU/write %.0f µs, engines' CPU/write %.0f µs (%s) | Cassandra requests per like: %.2f Paxos, %.2f plain | load %s → %s",
			r.name, r.rate, r.p50, r.p99, r.stale, r.errs, r.vRate, r.vP99, r.vStale, r.vErrs, r.cellWrites, r.vChanged, r.cellsPerLike, r.cpuUs, r.engineCPUUs, r.perEngineUs, r.paxosPerLike, r.plainPerLike, r.load0, r.load1)
	}
	if len(results) < 3 {
		return
	}
	emb, eng, emb2 := results[0], results[1], results[2]
	avg := func(a, b float64) float64 { return (a + b) / 2 }
	t.Logf("  engines ÷ embedded (mean of the two embedded runs): write throughput %.2f, write p99 %.2f, staleness p99 %.2f, viral throughput %.2f, viral p99 %.2f, viral staleness p99 %.2f, cell writes per viral like %.4f vs %.4f",
		eng.rate/avg(emb.rate, emb2.rate), eng.p99/avg(emb.p99, emb2.p99), eng.stale/avg(emb.stale, emb2.stale),
		eng.vRate/avg(emb.vRate, emb2.vRate), eng.vP99/avg(emb.vP99, emb2.vP99), eng.vStale/avg(emb.vStale, emb2.vStale),
		eng.cellsPerLike, avg(emb.cellsPerLike, emb2.cellsPerLike))
}

func measureOne(t *testing.T, cfg Config, name, runID string, dur time.Duration, workers int) measEngines {
	t.Helper()
	r, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%s: Open: %v", name, err)
	}
	srv := httptest.NewServer(r.API)
	defer func() {
		srv.Close()
		if err := r.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}()
	out := measEngines{name: name, load0: loadgen.LoadAverage()}
	run := func(phase string) *loadgen.PhaseReport {
		ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
		defer cancel()
		rep, err := loadgen.Run(ctx, loadgen.Config{
			URL: srv.URL, Secret: e2eSecret, Workers: workers, Items: 10000, PhaseDuration: dur,
			Phases: []string{phase}, RunID: runID + phase[:1], Seed: 42,
		})
		if err != nil {
			t.Fatalf("%s: loadgen %s: %v", name, phase, err)
		}
		ph := rep.Phase(phase)
		if ph == nil {
			t.Fatalf("%s: no %s phase", name, phase)
		}
		if ph.ErrorCount() > 0 {
			t.Logf("%s %s errors: %v", name, phase, ph.Errors)
		}
		return ph
	}
	settle := func(what string) {
		t.Helper()
		start := time.Now()
		deadline := start.Add(5 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			lag, err := r.aggregatorLag(ctx)
			if err == nil && lag == 0 && cfg.Engines.Log == LogKafka {
				var rl uint64
				rl, err = newAdmin2(r).relayLag(ctx)
				lag += rl
			}
			cancel()
			if err == nil && lag == 0 {
				t.Logf("%s: settled after %s in %v", name, what, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still lagging %d events (err %v) 5 minutes after %s", name, lag, err, what)
			}
			time.Sleep(50 * time.Millisecond) // poll interval of a bounded wait
		}
	}
	var ops0, ops1 cassandra.Ops
	var by0 map[string]uint64
	if r.Cassandra != nil {
		ops0, by0 = r.Cassandra.Ops(), r.Cassandra.OpsByStatement()
	}
	eng0 := engineCPU(t)
	cpu0 := cpuOf(os.Getpid())
	stopProfile := profileEngines(t, r.Cassandra != nil)
	u := run(loadgen.PhaseUniform)
	stopProfile()
	cpu1 := cpuOf(os.Getpid())
	eng1 := engineCPU(t)
	if r.Cassandra != nil {
		ops1 = r.Cassandra.Ops()
	}
	if r.Cassandra != nil && u.OK > 0 {
		logOpsPerLike(t, name, by0, r.Cassandra.OpsByStatement(), u.OK)
	}
	if u.OK > 0 {
		out.paxosPerLike = float64(ops1.Paxos-ops0.Paxos) / float64(u.OK)
		out.plainPerLike = float64(ops1.Plain-ops0.Plain) / float64(u.OK)
	}
	out.rate, out.p50, out.p99, out.errs = u.Throughput, u.Latency.P50Ms, u.Latency.P99Ms, u.ErrorCount()
	if u.Staleness != nil {
		out.stale = u.Staleness.P99Ms
	}
	if u.OK > 0 {
		out.cpuUs = float64((cpu1 - cpu0).Microseconds()) / float64(u.OK)
		var parts []string
		for _, name := range engineNames {
			d := float64((eng1[name] - eng0[name]).Microseconds()) / float64(u.OK)
			out.engineCPUUs += d
			parts = append(parts, fmt.Sprintf("%s %.0f", name, d))
		}
		out.perEngineUs = strings.Join(parts, ", ")
	}
	settle("uniform writes")
	cw0 := r.CellWrites()
	v := run(loadgen.PhaseViral)
	settle("viral writes")
	out.cellWrites = r.CellWrites() - cw0
	out.vRate, out.vP99, out.vErrs, out.vChanged = v.Throughput, v.Latency.P99Ms, v.ErrorCount(), uint64(v.Changed)
	if v.Staleness != nil {
		out.vStale = v.Staleness.P99Ms
	}
	if out.vChanged > 0 {
		out.cellsPerLike = float64(out.cellWrites) / float64(out.vChanged)
	}
	out.load1 = loadgen.LoadAverage()
	return out
}

// newAdmin2 is an admin view of r without registering its metrics again.
func newAdmin2(r *Region) *admin { return &admin{r: r} }

// cpuOf is a process's CPU time (0 if unreadable).
func cpuOf(pid int) time.Duration {
	d, _ := loadgen.ProcessCPU(pid)
	return d
}

var engineNames = []string{"cassandra", "kafka", "redis"}

// profileEngines starts a CPU profile of this process into the file
// LIKES_MEASURE_PROFILE names, when set and the region runs on the engines;
// the returned func stops it. Only the uniform phase is profiled, so the
// profile shows the engines' write path alone.
func profileEngines(t *testing.T, engines bool) func() {
	path := os.Getenv("LIKES_MEASURE_PROFILE")
	if path == "" || !engines {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("LIKES_MEASURE_PROFILE: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatalf("LIKES_MEASURE_PROFILE: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Errorf("LIKES_MEASURE_PROFILE: %v", err)
		}
	}
}

// engineCPU reads the CPU time of each server scripts/servers.sh started,
// found by its pid file.
func engineCPU(t *testing.T) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	home := os.Getenv("LIKES_SERVERS_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return out
		}
		home = filepath.Join(h, ".cache", "likes-servers")
	}
	for _, name := range engineNames {
		b, err := os.ReadFile(filepath.Join(home, "run", name+".pid"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				out[name] = cpuOf(pid)
			}
		}
	}
	return out
}

// logOpsPerLike prints where a uniform like's Cassandra requests went: each
// statement's requests between the two counts per like written, largest
// first (those under 0.01 per like are summed).
func logOpsPerLike(t *testing.T, name string, before, after map[string]uint64, likes int64) {
	t.Helper()
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	per := func(k string) float64 { return float64(after[k]-before[k]) / float64(likes) }
	sort.Slice(keys, func(i, j int) bool { return per(keys[i]) > per(keys[j]) })
	rest := 0.0
	for _, k := range keys {
		if v := per(k); v >= 0.01 {
			t.Logf("%s: %.3f requests per like: %s", name, v, k)
		} else {
			rest += v
		}
	}
	t.Logf("%s: %.3f requests per like: every other statement", name, rest)
}
