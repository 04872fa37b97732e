package region_test

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMeasurePeerTLS is the cost of mutual TLS on the region-to-region plane:
// the same load against three in-process regions with the plane in plaintext
// and over mutual TLS with keyed gossip, alternating, in one run. The CPU per
// write is the whole process's (three regions replicating and forwarding,
// plus the load generator), so the ratio is what TLS adds to a like's total
// cost.
//
//	LIKES_MEASURE=1 go test ./region -run TestMeasurePeerTLS -v -timeout 20m
func TestMeasurePeerTLS(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") != "1" {
		t.Skip("opt-in measurement for BENCHMARKS.md: LIKES_MEASURE=1 go test ./region -run TestMeasurePeerTLS -v")
	}
	const dur, workers, rounds = 10 * time.Second, 16, 2
	got := map[bool][]measLoadResult{}
	for round := 1; round <= rounds; round++ {
		for _, tls := range []bool{false, true} {
			name := fmt.Sprintf("round%d/tls=%v", round, tls)
			t.Run(name, func(t *testing.T) {
				c := startTriWith(t, triOpts{plaintext: !tls})
				// Through eu, so about two thirds of the likes are forwarded to
				// their owner, and every like replicates to two peers.
				res, _ := measRun(t, c.byName["eu"].srv.URL, fmt.Sprintf("tls-%d-%v", round, tls), dur, workers)
				t.Logf("%s: %s", name, res)
				got[tls] = append(got[tls], res)
			})
		}
	}
	for i := range got[true] {
		p, s := got[false][i], got[true][i]
		t.Logf("round %d: TLS ÷ plaintext: throughput %.2f, CPU per write %.2f (%.0f vs %.0f µs), p99 %v vs %v",
			i+1, s.rate/p.rate, s.cpuUs/p.cpuUs, s.cpuUs, p.cpuUs, s.p99, p.p99)
	}
}
