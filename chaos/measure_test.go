package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"
)

// TestMeasureEnginesCluster (LIKES_MEASURE=1; the servers of
// scripts/servers.sh env) measures three regions on the engines against
// three embedded regions in the same run, with the chaos harness (real
// likesd processes, links through the proxies): 32 clients with 1 ms think
// time write for 20 s; from 12 s to 20 s region us is cut from its peers;
// the final heal is the partition's end. Runs: embedded, engines, embedded.
// Printed per run: acknowledged writes/s, write latency p50/p99 (first
// attempt's request to answer), count-read staleness p99 before the
// partition (answer time − asOf, reads through every region) and the time from the heal until every
// region is quiet (no lag, asOf past the heal).
func TestMeasureEnginesCluster(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 to measure")
	}
	e, err := EnginesFromEnv()
	if err != nil {
		t.Skip(err)
	}
	sched := []Episode{{At: 12 * time.Second, Kind: NemPartition, Region: "us", Duration: 8 * time.Second}}
	for _, c := range []struct {
		name string
		eng  *Engines
	}{{"embedded A", nil}, {"engines", &e}, {"embedded B", nil}} {
		rep := run(t, Options{Seed: 7, Duration: 20 * time.Second, Schedule: sched, Tail: time.Millisecond, Engines: c.eng,
			Workload: WorkloadConfig{Clients: 32, Think: time.Millisecond, PErase: -1, PStale: -1}})
		m := measureHistory(t, rep.History)
		t.Logf("MEASURE %-10s writes/s %6.0f  p50 %6.1f ms  p99 %7.1f ms  staleness p99 %7.0f ms  heal→quiet %v  pass %v",
			c.name, m.writesPerSec, m.p50, m.p99, m.staleP99, rep.ConvergedIn.Round(time.Millisecond), rep.Pass)
	}
}

type histMeasure struct {
	writesPerSec, p50, p99, staleP99 float64
}

func measureHistory(t *testing.T, path string) histMeasure {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lat []float64
	type read struct{ sent, asOf, recv time.Time }
	var reads []read
	var first, last time.Time
	acks := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var line struct {
			Type string          `json:"type"`
			Rec  json.RawMessage `json:"rec"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Type {
		case "attempt":
			var a struct {
				N      int       `json:"n"`
				Start  time.Time `json:"start"`
				End    time.Time `json:"end"`
				Status int       `json:"status"`
			}
			_ = json.Unmarshal(line.Rec, &a)
			if a.Status != 200 || a.N != 1 {
				continue
			}
			acks++
			lat = append(lat, float64(a.End.Sub(a.Start).Microseconds())/1000)
			if first.IsZero() || a.Start.Before(first) {
				first = a.Start
			}
			if a.End.After(last) {
				last = a.End
			}
		case "read":
			var r struct {
				AsOf time.Time `json:"asOf"`
				Sent time.Time `json:"sent"`
				Recv time.Time `json:"recv"`
			}
			if json.Unmarshal(line.Rec, &r) == nil && r.AsOf.Year() > 2000 {
				reads = append(reads, read{r.Sent, r.AsOf, r.Recv})
			}
		}
	}
	q := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[min(len(xs)-1, int(p*float64(len(xs))))]
	}
	// Staleness before the partition (the first 12 s): during it every
	// region's asOf stops, by design.
	var stale []float64
	for _, r := range reads {
		if r.sent.Before(first.Add(12 * time.Second)) {
			stale = append(stale, float64(r.recv.Sub(r.asOf).Milliseconds()))
		}
	}
	m := histMeasure{p50: q(lat, 0.5), p99: q(lat, 0.99), staleP99: q(stale, 0.99)}
	if d := last.Sub(first).Seconds(); d > 0 {
		m.writesPerSec = float64(acks) / d
	}
	return m
}
