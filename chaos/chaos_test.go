package chaos

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The suite's tests start real processes: skipped under -short.

var (
	buildOnce sync.Once
	buildBin  string
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// likesd builds the binary once per test process (without -race).
func likesd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "likes-chaos-bin-")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		buildBin, buildErr = BuildLikesd(ctx, buildDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func run(t *testing.T, o Options) *Report {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and three likesd processes; skipped under -short")
	}
	o.Binary = likesd(t)
	out, err := os.MkdirTemp("", "likes-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	o.Out = out
	o.Progress = testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		if rep != nil && rep.WorkDir != "" {
			_ = os.RemoveAll(rep.WorkDir)
		}
		if rep != nil {
			t.Logf("output in %s; replay: %s", rep.OutDir, rep.Replay)
		}
		t.Fatalf("run could not be carried out: %v", err)
	}
	t.Log("\n" + rep.Summary())
	// A failing test keeps its report, history and process logs (the data
	// folders are large and always removed).
	t.Cleanup(func() {
		if rep.WorkDir != "" {
			_ = os.RemoveAll(rep.WorkDir)
		}
		if t.Failed() {
			t.Logf("output kept in %s", out)
		} else {
			_ = os.RemoveAll(out)
		}
	})
	return rep
}

// ciNemeses is every nemesis kind but the restarts, which
// TestRestartNemeses runs (a rolling restart alone takes longer than the
// normal schedule's other episodes together).
func ciNemeses() []string {
	var out []string
	for _, k := range AllNemeses {
		if k != NemRestart && k != NemRollingRestart {
			out = append(out, k)
		}
	}
	return out
}

// TestNormalSchedule runs the seeded schedule (every nemesis kind of
// ciNemeses once) under load and expects every guarantee to hold.
func TestNormalSchedule(t *testing.T) {
	kinds := ciNemeses()
	rep := run(t, Options{Seed: 5, Duration: 80 * time.Second, Kinds: kinds})
	if !rep.Pass {
		t.Errorf("%d violations %v (seed %d); replay with: %s", rep.Mismatches, rep.Check.ByCheck, rep.Seed, rep.Replay)
	}
	if got := len(rep.FaultsByKind); got != len(kinds) {
		t.Errorf("schedule injected %d kinds of faults %v, want all %d", got, rep.FaultsByKind, len(kinds))
	}
	if rep.Ops.AckedWrites < 1000 || rep.Check.SamplesChecked < 100 || rep.Check.EventsChecked < 1000 || rep.Check.SessionReads < 100 {
		t.Errorf("too little checked: %d acknowledged writes, %d samples, %d log events, %d session reads", rep.Ops.AckedWrites,
			rep.Check.SamplesChecked, rep.Check.EventsChecked, rep.Check.SessionReads)
	}
}

// TestErasureDuringUnplannedFailover (issue 17): erasures, half of them of
// the user with the newest acknowledged like, while regions acknowledge likes
// they cannot replicate and then lose their ranges to an unplanned failover.
// An erasure acknowledged by the new owner must still remove the old owner's
// late like, exactly once.
func TestErasureDuringUnplannedFailover(t *testing.T) {
	rep := run(t, Options{Seed: 416500, Duration: 45 * time.Second, Kinds: []string{NemFailover},
		Workload: WorkloadConfig{PErase: 0.05}})
	if !rep.Pass {
		t.Errorf("%d violations %v (seed %d); replay with: %s", rep.Mismatches, rep.Check.ByCheck, rep.Seed, rep.Replay)
	}
	// The erasures are a share of the operations, and how many operations
	// run depends on the machine: the load slows to a trickle for about ten
	// seconds after each failover (the progress lines show it), so a loaded
	// 2-core runner got 46 where a quiet one got 89. 30 still puts erasures
	// around both failovers.
	if rep.FaultsByKind[NemFailover] < 2 || rep.Check.ErasedUsers < 30 {
		t.Errorf("too little exercised: %v faults, %d erased users", rep.FaultsByKind, rep.Check.ErasedUsers)
	}
}

// expectViolations asserts the checker caught a broken guarantee.
func expectViolations(t *testing.T, rep *Report, checks ...string) {
	t.Helper()
	for _, c := range checks {
		if rep.Check.ByCheck[c] > 0 {
			t.Logf("caught: %d %s violations (seed %d; replay: %s)", rep.Check.ByCheck[c], c, rep.Seed, rep.Replay)
			return
		}
	}
	t.Errorf("--break %s: want %v violations, got %v", rep.Break, checks, rep.Check.ByCheck)
}

// TestBreakFence: aggregators that replay from 0 without the fence double
// count after a kill -9 and restart.
func TestBreakFence(t *testing.T) {
	rep := run(t, Options{Seed: 101, Break: "fence", Tail: 4 * time.Second,
		Schedule: []Episode{{At: 4 * time.Second, Kind: NemKill, Region: "us", Duration: time.Second}}})
	expectViolations(t, rep, CheckCountEdges, CheckCountLog)
}

// TestBreakIdempotency: without idempotency records a stale retry of an old
// like after an unlike re-likes (deep-dive 1).
func TestBreakIdempotency(t *testing.T) {
	rep := run(t, Options{Seed: 102, Break: "idempotency", Tail: 12 * time.Second, Schedule: []Episode{},
		Workload: WorkloadConfig{PStale: 0.3}})
	expectViolations(t, rep, CheckAcked)
}

// TestBreakLease: a region cut from etcd keeps writing under its old epoch
// after its ranges failed over.
func TestBreakLease(t *testing.T) {
	rep := run(t, Options{Seed: 103, Break: "lease", Tail: 2 * time.Second,
		Schedule: []Episode{{At: 3 * time.Second, Kind: NemEtcdSplit, Region: "ap", Duration: 8 * time.Second}}})
	expectViolations(t, rep, CheckPin)
}

// TestDiskFullNemesis runs only the disk-full nemesis: the full region answers
// 503 storage_unavailable, resumes by itself when the knob clears, and every
// guarantee holds.
// TestRestartNemeses (issue 11): graceful restarts of one region and rolling
// restarts of all three under load: no unplanned failover (the graceful-stop
// check), every planned move clean, no acknowledged write lost, counts exact,
// and every region's home ranges back after each restart (the episode fails
// otherwise).
func TestRestartNemeses(t *testing.T) {
	rep := run(t, Options{Seed: 11, Duration: 50 * time.Second, Kinds: []string{NemRestart, NemRollingRestart}})
	if !rep.Pass {
		t.Errorf("%d violations %v (seed %d); replay with: %s", rep.Mismatches, rep.Check.ByCheck, rep.Seed, rep.Replay)
	}
	if rep.FaultsByKind[NemRestart] == 0 || rep.FaultsByKind[NemRollingRestart] == 0 {
		t.Errorf("not every restart kind ran: %v", rep.FaultsByKind)
	}
	for _, f := range rep.Faults {
		if f.Err != "" {
			t.Errorf("episode %s failed: %s", f.Kind, f.Err)
		}
		t.Logf("%s: %s", f.Kind, f.Detail)
	}
	if rep.Check.UnplannedMoves != 0 || rep.Check.Corrections != 0 {
		t.Errorf("%d unplanned moves and %d branch corrections during graceful restarts", rep.Check.UnplannedMoves, rep.Check.Corrections)
	}
	for code, n := range rep.Ops.ByCode {
		// Retryable 503s while a range is handed over, and the expected
		// refusal of an erased user's writes; nothing else.
		if code != "not_authoritative" && code != "user_erased" && code != "overloaded" {
			t.Errorf("%d operations ended with %q during graceful restarts", n, code)
		}
	}
	t.Logf("ops %+v; planned moves %d", rep.Ops, rep.Check.PlannedMoves)
}

func TestDiskFullNemesis(t *testing.T) {
	rep := run(t, Options{Seed: 19, Duration: 20 * time.Second, Kinds: []string{NemDiskFull}})
	if !rep.Pass {
		t.Errorf("%d violations %v (seed %d); replay with: %s", rep.Mismatches, rep.Check.ByCheck, rep.Seed, rep.Replay)
	}
	if rep.FaultsByKind[NemDiskFull] == 0 {
		t.Errorf("no disk-full episode ran: %v", rep.FaultsByKind)
	}
	for _, f := range rep.Faults {
		if f.Err != "" {
			t.Errorf("episode %s failed: %s", f.Kind, f.Err)
		}
	}
	t.Logf("ops %+v", rep.Ops)
}

// TestEnginesChaos (issue 12; in make test-engines): the regions on
// Cassandra + Kafka + Redis, us served by two nodes behind a load balancer,
// under a short schedule of partitions, a kill of a whole region, a kill and
// a pause of one us node, an etcd split, pin moves and an unplanned
// failover: every guarantee holds as on the embedded store, and both us
// nodes answer what their region does.
func TestEnginesChaos(t *testing.T) {
	e, err := EnginesFromEnv()
	if err != nil {
		t.Skip(err)
	}
	kinds := []string{NemPartition, NemKill, NemKillNode, NemPauseNode, NemEtcdSplit, NemMovePins, NemFailover}
	rep := run(t, Options{Seed: 12, Duration: 60 * time.Second, Kinds: kinds, Engines: &e, Nodes: map[string]int{"us": 2}})
	if !rep.Pass {
		t.Errorf("%d violations %v (seed %d); replay with: %s", rep.Mismatches, rep.Check.ByCheck, rep.Seed, rep.Replay)
	}
	for _, k := range kinds {
		if rep.FaultsByKind[k] == 0 {
			t.Errorf("no %s episode ran: %v", k, rep.FaultsByKind)
		}
	}
	for _, f := range rep.Faults {
		if f.Err != "" {
			t.Errorf("episode %s failed: %s", f.Kind, f.Err)
		}
	}
	// Clients and the other regions reached both us nodes.
	for _, l := range []string{"us-lb", "eu->us", "ap->us"} {
		if f := rep.Links[l].Forwarded; len(f) != 2 || f[0] == 0 || f[1] == 0 {
			t.Errorf("%s forwarded %v connections to us-1, us-2: want some to each", l, f)
		}
	}
	if rep.Ops.AckedWrites < 100 || rep.Check.EventsChecked < 100 {
		t.Errorf("too little checked: %d acknowledged writes, %d log events", rep.Ops.AckedWrites, rep.Check.EventsChecked)
	}
}
