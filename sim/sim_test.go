package sim

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// seedsFromEnv returns the seeds TestSim runs: LIKES_SIM_SEED=S alone, or
// LIKES_SIM_SEEDS=N (default 300; 50 under -short, 80 under -race) starting
// at LIKES_SIM_SEED_BASE (default 1).
func seedsFromEnv(t *testing.T) (seeds []uint64, single bool) {
	if v := os.Getenv("LIKES_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LIKES_SIM_SEED=%q: %v", v, err)
		}
		return []uint64{s}, true
	}
	n := 300
	switch {
	case testing.Short():
		n = 50
	case raceEnabled:
		n = 80
	}
	if v := os.Getenv("LIKES_SIM_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("LIKES_SIM_SEEDS=%q: want a positive count", v)
		}
	}
	base := uint64(1)
	if v := os.Getenv("LIKES_SIM_SEED_BASE"); v != "" {
		var err error
		if base, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("LIKES_SIM_SEED_BASE=%q: %v", v, err)
		}
	}
	for i := 0; i < n; i++ {
		seeds = append(seeds, base+uint64(i))
	}
	return seeds, false
}

// runSeeds runs seeds on GOMAXPROCS workers and returns the stats of each and
// the failures, by seed.
func runSeeds(seeds []uint64, opts func(seed uint64) Options) ([]Stats, []error) {
	stats := make([]Stats, len(seeds))
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				stats[i], errs[i] = Run(opts(seeds[i]))
			}
		}()
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	return stats, errs
}

// TestSim runs many seeds of the whole simulation. A failing seed replays
// exactly, with a trace: LIKES_SIM_SEED=S go test ./sim -run TestSim -v
func TestSim(t *testing.T) {
	seeds, single := seedsFromEnv(t)
	if single {
		replay(t, Options{Seed: seeds[0]})
		return
	}
	start := time.Now()
	stats, errs := runSeeds(seeds, func(seed uint64) Options { return Options{Seed: seed} })
	var total Stats
	for _, st := range stats {
		total = addStats(total, st)
	}
	t.Logf("%d seeds in %v; totals: %+v", len(seeds), time.Since(start).Round(time.Millisecond), total)
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
			if len(failed) <= 5 {
				t.Errorf("%v", err)
			}
			_ = i
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		var list []string
		for i, err := range errs {
			if err != nil {
				msg, _, _ := strings.Cut(err.Error(), "\n")
				list = append(list, fmt.Sprintf("seed %d: %s", seeds[i], msg))
			}
		}
		t.Logf("failing seeds:\n%s", strings.Join(list, "\n"))
		t.Fatalf("%d of %d seeds failed; replay one with: LIKES_SIM_SEED=<seed> go test ./sim -run TestSim -v", len(failed), len(seeds))
	}
}

// replay runs one seed, with a trace on stdout under -v.
func replay(t *testing.T, o Options) {
	if testing.Verbose() {
		o.Trace = os.Stdout
	}
	st, err := Run(o)
	t.Logf("stats: %+v", st)
	if err != nil {
		t.Fatal(err)
	}
}

// TestSimDeterministic: the same seed gives the same run, trace line for
// trace line, twice.
func TestSimDeterministic(t *testing.T) {
	for _, o := range []Options{{Seed: 3}, {Seed: 17}, {Seed: 42}, {Seed: 20_001, Fixed: erasureHeavy}} {
		seed := o.Seed
		var ta, tb bytes.Buffer
		oa, ob := o, o
		oa.Trace, ob.Trace = &ta, &tb
		a, errA := Run(oa)
		b, errB := Run(ob)
		if fmt.Sprint(errA) != fmt.Sprint(errB) || a != b {
			t.Fatalf("seed %d is not deterministic:\n%+v\n%v\n%+v\n%v", seed, a, errA, b, errB)
		}
		if la, lb := strings.Split(ta.String(), "\n"), strings.Split(tb.String(), "\n"); ta.String() != tb.String() {
			for i := range min(len(la), len(lb)) {
				if la[i] != lb[i] {
					t.Fatalf("seed %d: traces differ at line %d:\n%s\n%s", seed, i, la[i], lb[i])
				}
			}
			t.Fatalf("seed %d: traces differ in length (%d, %d lines)", seed, len(la), len(lb))
		}
	}
}

// focusedSeeds are the seeds of a test with a fixed fault mix: 60 from base
// (20 under -short or -race), or $LIKES_SIM_SEEDS of them.
func focusedSeeds(base uint64) []uint64 {
	n := 60
	if testing.Short() || raceEnabled {
		n = 20
	}
	if v := os.Getenv("LIKES_SIM_SEEDS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	return seeds
}

// TestSimChains: schedules heavy in unplanned failovers commonly move a range
// A→B→C through three regions while tails are unreplicated, and corrections
// arise, and everything still converges exactly.
func TestSimChains(t *testing.T) {
	seeds := focusedSeeds(10_000)
	opts := func(seed uint64) Options {
		return Options{Seed: seed, Steps: 600, Test: "TestSimChains", Fixed: func(k *Knobs) {
			k.WUnplanned = 6
			k.WPlanned = 1
			k.WEtcd = 4
			k.WClock = 14
			k.PUnplannedIsolate = 0.8
		}}
	}
	if seeds, single := seedsFromEnv(t); single {
		replay(t, opts(seeds[0]))
		return
	}
	stats, errs := runSeeds(seeds, opts)
	n := len(seeds)
	withChain, withCorr := 0, 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if stats[i].Chains > 0 {
			withChain++
		}
		if stats[i].Corrections > 0 {
			withCorr++
		}
	}
	t.Logf("%d seeds: %d with an A→B→C chain, %d with corrections", n, withChain, withCorr)
	if withChain < n/3 {
		t.Errorf("only %d of %d seeds had an unplanned A→B→C chain", withChain, n)
	}
	if withCorr < n/4 {
		t.Errorf("only %d of %d seeds produced a branch correction", withCorr, n)
	}
}

// TestSimErasures: schedules heavy in erasures and unplanned failovers
// commonly erase a user whose edges an old owner accepted and had not
// replicated (issue 17's interleaving and its relatives: the edge reaches the
// job's region after the job started), and every erasure still holds.
func TestSimErasures(t *testing.T) {
	seeds := focusedSeeds(20_000)
	opts := func(seed uint64) Options {
		return Options{Seed: seed, Test: "TestSimErasures", Fixed: erasureHeavy}
	}
	if seeds, single := seedsFromEnv(t); single {
		replay(t, opts(seeds[0]))
		return
	}
	stats, errs := runSeeds(seeds, opts)
	n := len(seeds)
	withLate := 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if stats[i].LateEdges > 0 {
			withLate++
		}
	}
	t.Logf("%d seeds: %d with an edge that reached an erasure's region after the job started", n, withLate)
	if withLate < n/4 {
		t.Errorf("only %d of %d seeds had an edge reach an erasure's region after the job started", withLate, n)
	}
}

// erasureHeavy is TestSimErasures' fault mix.
func erasureHeavy(k *Knobs) {
	k.WErase = 4
	k.WEraseTick = 4
	k.WRetract = 3
	k.WUnplanned = 5
	k.WClock = 12
	k.PUnplannedIsolate = 0.8
	k.MaxErased = 4
}

func addStats(a, b Stats) Stats {
	a.Steps += b.Steps
	a.Requests += b.Requests
	a.Accepted += b.Accepted
	a.Writes += b.Writes
	a.Replays += b.Replays
	a.Conflicts += b.Conflicts
	a.StaleRetries += b.StaleRetries
	a.Overtaken += b.Overtaken
	a.Forwarded += b.Forwarded
	a.LostReplies += b.LostReplies
	a.Refused += b.Refused
	a.AggSteps += b.AggSteps
	a.Pushes += b.Pushes
	a.Dropped += b.Dropped
	a.Duplicated += b.Duplicated
	a.Reordered += b.Reordered
	a.Partitions += b.Partitions
	a.EtcdCuts += b.EtcdCuts
	a.PlannedMoves += b.PlannedMoves
	a.Settled += b.Settled
	a.UnplannedMoves += b.UnplannedMoves
	a.Chains += b.Chains
	a.Crashes += b.Crashes
	a.Syncs += b.Syncs
	a.Corrections += b.Corrections
	a.HonestyChecks += b.HonestyChecks
	a.AntiEntropy += b.AntiEntropy
	a.HealRounds += b.HealRounds
	a.Retractions += b.Retractions
	a.Erasures += b.Erasures
	a.ErasuresAcked += b.ErasuresAcked
	a.ErasedUsers += b.ErasedUsers
	a.EraseTicks += b.EraseTicks
	a.EraseWrites += b.EraseWrites
	a.ErasedRefusals += b.ErasedRefusals
	a.LateEdges += b.LateEdges
	return a
}
