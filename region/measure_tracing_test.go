package region_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/likes-dev/likes/internal/tracing"
	"github.com/likes-dev/likes/internal/tracing/tracingtest"
	"github.com/likes-dev/likes/region"
)

// TestMeasureTracing is the cost of tracing on the write path: the same load
// against three in-process regions without an exporter (the default: trace
// ids for the logs, nothing recorded) and with every trace recorded and
// exported over OTLP/gRPC (`--otlp-endpoint` at ratio 1) to a loopback
// stand-in collector, alternating, in one run. The CPU per write is the whole
// process's (three regions, the collector stand-in, and the load generator),
// so the ratio is what tracing adds to a like's total cost.
//
//	LIKES_MEASURE=1 go test ./region -run TestMeasureTracing -v -timeout 20m
func TestMeasureTracing(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") != "1" {
		t.Skip("opt-in measurement for BENCHMARKS.md: LIKES_MEASURE=1 go test ./region -run TestMeasureTracing -v")
	}
	const dur, workers, rounds = 10 * time.Second, 16, 2
	col, err := tracingtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	got := map[bool][]measLoadResult{}
	for round := 1; round <= rounds; round++ {
		for _, export := range []bool{false, true} {
			name := fmt.Sprintf("round%d/otlp=%v", round, export)
			t.Run(name, func(t *testing.T) {
				cfg := tracing.Config{}
				if export {
					cfg = tracing.Config{Endpoint: col.Addr(), Insecure: true}
				}
				p, err := tracing.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				spans0 := col.Spans()
				c := startTriWith(t, triOpts{region: func(_ string, rc *region.Config) { rc.Tracer = p.TracerProvider() }})
				res, _ := measRun(t, c.byName["eu"].srv.URL, fmt.Sprintf("otlp-%d-%v", round, export), dur, workers)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = p.Shutdown(ctx)
				spans := col.Spans() - spans0
				t.Logf("%s: %s; spans exported %d (%.1f per write)", name, res, spans, float64(spans)/float64(max(1, res.ok)))
				got[export] = append(got[export], res)
			})
		}
	}
	for i := range got[true] {
		off, on := got[false][i], got[true][i]
		t.Logf("round %d: OTLP export ÷ none: throughput %.2f, CPU per write %.2f (%.0f vs %.0f µs), p99 %v vs %v",
			i+1, on.rate/off.rate, on.cpuUs/off.cpuUs, on.cpuUs, off.cpuUs, on.p99, off.p99)
	}
}
