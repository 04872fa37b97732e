package region_test

// TestMeasureNodes produces the "one node vs two nodes per region" figures
// of BENCHMARKS.md (issue 12). Opt-in (CI never runs it), on the real servers:
//
//	bash scripts/servers.sh up && eval "$(bash scripts/servers.sh env)"
//	LIKES_MEASURE=1 go test ./region -run TestMeasureNodes -v -timeout 20m
//
// Three regions on Cassandra + Kafka + Redis, us served by us-1; in one run:
// (A) writes to users whose ranges us owns, through us-1 alone; (B) us-2
// joins and the writes go through both nodes; us-2 stops and the time until
// us-1 folds every partition and ships again is measured; (C) us-1 alone
// again (A and C bracket the machine's load). Each phase: LIKES_MEASURE_WORKERS
// (default 32) writers for LIKES_MEASURE_DURATION (default 15s), first
// attempts only (a 503 counts as an error, not retried), and a reader of
// counts through us's nodes every 50 ms for the staleness (now − asOf).

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/loadgen"
)

type nodePhase struct {
	name             string
	rate, p50, p99   float64 // writes/s, ms
	stale99          float64 // ms
	acks, errs       int64
	cpuUs, cassCPUUs float64 // per acknowledged write: this process (3 regions + load), Cassandra
	load0, load1     string
}

func TestMeasureNodes(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") != "1" {
		t.Skip("opt-in measurement for BENCHMARKS.md: LIKES_MEASURE=1 go test ./region -run TestMeasureNodes -v -timeout 20m (with the servers of scripts/servers.sh)")
	}
	dur := 15 * time.Second
	if v := os.Getenv("LIKES_MEASURE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	workers := 32
	if v := os.Getenv("LIKES_MEASURE_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		workers = n
	}
	const parts = 16
	c := startEnginesUS1(t, parts, nil) // the tri configuration already has no per-user rate limit
	us1 := c.byName["us"]
	ps := c.mustPins(t)
	var users []string
	for _, u := range triUsers(64) {
		if triOwner(ps, u).Region == "us" {
			users = append(users, u)
		}
	}
	var out []nodePhase
	out = append(out, measureNodePhase(t, c, "one node (A)", []*triNode{us1}, users, workers, dur))

	us2 := startSecondNode(t, c, us1, "us-2")
	c.poll(t, 30*time.Second, "us's partitions split over both nodes", func() (bool, string) {
		a, b := us1.r.OwnedPartitionsForTest(), us2.r.OwnedPartitionsForTest()
		return len(a) > 0 && len(b) > 0 && len(a)+len(b) == parts, fmt.Sprintf("us-1 %v us-2 %v", a, b)
	})
	out = append(out, measureNodePhase(t, c, "two nodes (B)", []*triNode{us1, us2}, users, workers, dur))

	stopAt := time.Now()
	us2.stop(t)
	c.nodes = slices.DeleteFunc(c.nodes, func(n *triNode) bool { return n == us2 })
	c.poll(t, 30*time.Second, "us-1 folds every partition and ships", func() (bool, string) {
		return len(us1.r.OwnedPartitionsForTest()) == parts && us1.r.ShippingForTest(), ""
	})
	takeover := time.Since(stopAt)
	out = append(out, measureNodePhase(t, c, "one node (C)", []*triNode{us1}, users, workers, dur))

	t.Logf("one node vs two nodes of region us (%d workers, %v per phase, writes to us's own ranges):", workers, dur)
	for _, p := range out {
		t.Logf("  %-14s %6.0f writes/s  p50 %6.1f ms  p99 %7.1f ms  staleness p99 %6.0f ms  errors %d/%d  CPU/write: process %.0f µs, Cassandra %.0f µs  load %s → %s",
			p.name, p.rate, p.p50, p.p99, p.stale99, p.errs, p.acks+p.errs, p.cpuUs, p.cassCPUUs, p.load0, p.load1)
	}
	one := func(f func(nodePhase) float64) float64 { return (f(out[0]) + f(out[2])) / 2 }
	b := out[1]
	t.Logf("  two ÷ mean(one): throughput %.2f, p99 %.2f, staleness p99 %.2f, process CPU/write %.2f, Cassandra CPU/write %.2f",
		b.rate/one(func(p nodePhase) float64 { return p.rate }), b.p99/one(func(p nodePhase) float64 { return p.p99 }),
		b.stale99/one(func(p nodePhase) float64 { return p.stale99 }), b.cpuUs/one(func(p nodePhase) float64 { return p.cpuUs }),
		b.cassCPUUs/one(func(p nodePhase) float64 { return p.cassCPUUs }))
	t.Logf("  us-2 stopped (graceful) → us-1 folds all %d partitions and ships: %v", parts, takeover.Round(time.Millisecond))
}

// measureNodePhase runs one phase of writes through nodes (first attempts
// only) with a reader of counts for the staleness.
func measureNodePhase(t *testing.T, c *triCluster, name string, nodes []*triNode, users []string, workers int, dur time.Duration) nodePhase {
	t.Helper()
	p := nodePhase{name: name, load0: loadgen.LoadAverage()}
	cpu0, _ := loadgen.ProcessCPU(os.Getpid())
	cass0 := cassandraCPU()
	var (
		acks, errs atomic.Int64
		mu         sync.Mutex
		lat, stale []float64
		wg         sync.WaitGroup
	)
	deadline := time.Now().Add(dur)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(len(name))))
			var mine []float64
			for i := 0; time.Now().Before(deadline) && i < 1_000_000; i++ {
				n := nodes[(w+i)%len(nodes)]
				u := users[rng.IntN(len(users))]
				item := fmt.Sprintf("mn-%d", rng.IntN(1000))
				t0 := time.Now()
				res := c.set(n, u, item, fmt.Sprintf("mn-%s-%d-%d", name, w, i), rng.IntN(2) == 0)
				if res.code == http.StatusOK {
					acks.Add(1)
					mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
				} else {
					errs.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Go(func() {
		for i := 0; time.Now().Before(deadline); i++ {
			n := nodes[i%len(nodes)]
			got, err := c.count(n, fmt.Sprintf("mn-%d", i%1000))
			// An item nobody wrote yet has no asOf to age (zero time).
			if err == nil && got.AsOf.After(start.Add(-time.Hour)) {
				mu.Lock()
				stale = append(stale, float64(time.Since(got.AsOf).Milliseconds()))
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond) // the reader's pace, not a wait for a condition
		}
	})
	wg.Wait()
	el := time.Since(start)
	cpu1, _ := loadgen.ProcessCPU(os.Getpid())
	cass1 := cassandraCPU()
	p.acks, p.errs = acks.Load(), errs.Load()
	p.rate = float64(p.acks) / el.Seconds()
	slices.Sort(lat)
	slices.Sort(stale)
	p.p50, p.p99, p.stale99 = pct(lat, 0.50), pct(lat, 0.99), pct(stale, 0.99)
	if p.acks > 0 {
		p.cpuUs = float64((cpu1 - cpu0).Microseconds()) / float64(p.acks)
		p.cassCPUUs = float64((cass1 - cass0).Microseconds()) / float64(p.acks)
	}
	p.load1 = loadgen.LoadAverage()
	return p
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// cassandraCPU is the CPU time of the Cassandra that scripts/servers.sh
// started (0 when its pid file is not found).
func cassandraCPU() time.Duration {
	home := os.Getenv("LIKES_SERVERS_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return 0
		}
		home = filepath.Join(h, ".cache", "likes-servers")
	}
	b, err := os.ReadFile(filepath.Join(home, "run", "cassandra.pid"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	d, _ := loadgen.ProcessCPU(pid)
	return d
}
