// Command likes-chaos runs the chaos suite: etcd and three likesd regions as
// real processes on loopback, every region's peer and etcd links through
// fault-injecting proxies, a seeded schedule of partitions, etcd splits,
// kill -9s, pauses, pin moves and failovers under a concurrent client load,
// then a checker over the healed cluster.
//
//	go run ./chaos/cmd/likes-chaos [--seed N] [--duration 60s] [--soak] [--out DIR] [--break fence|idempotency|lease] [--engines]
//
// --engines puts the regions on Cassandra + Kafka + Redis: the servers named
// by LIKES_TEST_CASSANDRA_HOSTS, LIKES_TEST_KAFKA_BROKERS and
// LIKES_TEST_REDIS_ADDR (bash scripts/servers.sh up && eval "$(bash
// scripts/servers.sh env)"), a fresh keyspace, topic and prefix per region.
//
// It exits 0 when every guarantee held, 1 when the checker found violations
// (the seed and the replay command are printed), 2 when the run could not be
// carried out. Ctrl-C stops the run and kills every process it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/likes-dev/likes/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("likes-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 0, "schedule and workload seed (0: pick one from the clock)")
	duration := fs.Duration("duration", 0, "length of the nemesis schedule (default 60s; 10m with --soak)")
	soak := fs.Bool("soak", false, "soak: a long run with more clients")
	out := fs.String("out", "", "folder for report.json, summary.txt, history.jsonl and process logs (default: a new temp folder)")
	brk := fs.String("break", "", "switch a guarantee off in the regions (fence, idempotency or lease) to see the checker fail")
	kinds := fs.String("nemeses", "", "comma-separated nemesis kinds to draw from (default all: "+strings.Join(chaos.AllNemeses, ",")+")")
	bin := fs.String("likesd", "", "a prebuilt likesd binary (default: go build it)")
	keep := fs.Bool("keep-data", false, "keep the data folders even when the run passes")
	recheck := fs.String("recheck", "", "re-judge the run saved in this output folder (no processes) and exit")
	pStale := fs.Float64("p-stale", 0, "probability that a client op is a stale retry of an old like (default 0.04; negative: none)")
	engines := fs.Bool("engines", false, "regions on Cassandra + Kafka + Redis (the servers in $LIKES_TEST_CASSANDRA_HOSTS, $LIKES_TEST_KAFKA_BROKERS, $LIKES_TEST_REDIS_ADDR)")
	nodes := fs.String("nodes", "", "regions served by several likesd nodes, e.g. us=2 (needs --engines); adds the "+strings.Join(chaos.NodeNemeses, ",")+" nemeses")
	pErase := fs.Float64("p-erase", 0, "probability that a client op is an account erasure (default 0.008; negative: no erasures)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *recheck != "" {
		return recheckDir(*recheck, stdout, stderr)
	}
	switch *brk {
	case "", "fence", "idempotency", "lease":
	default:
		fmt.Fprintf(stderr, "likes-chaos: --break must be fence, idempotency or lease, not %q\n", *brk)
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	o := chaos.Options{Seed: *seed, Duration: *duration, Soak: *soak, Out: *out, Break: *brk,
		Binary: *bin, KeepData: *keep, Progress: stdout, Workload: chaos.WorkloadConfig{PErase: *pErase, PStale: *pStale}}
	if *engines {
		e, err := chaos.EnginesFromEnv()
		if err != nil {
			fmt.Fprintf(stderr, "likes-chaos: --engines: %v\n", err)
			return 2
		}
		o.Engines = &e
	}
	if *kinds != "" {
		o.Kinds = strings.Split(*kinds, ",")
		for _, k := range o.Kinds {
			if !contains(chaos.AllNemeses, k) && !contains(chaos.NodeNemeses, k) {
				fmt.Fprintf(stderr, "likes-chaos: unknown nemesis %q\n", k)
				return 2
			}
		}
	}
	if *nodes != "" {
		var err error
		if o.Nodes, err = chaos.ParseNodes(*nodes); err != nil {
			fmt.Fprintf(stderr, "likes-chaos: --nodes: %v\n", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "likes-chaos: seed %d (replay: %s)\n", *seed, replay(o))
	rep, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "likes-chaos: %v\n", err)
		if rep != nil {
			fmt.Fprintf(stderr, "  output in %s; replay: %s\n", rep.OutDir, rep.Replay)
		}
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 2
	}
	fmt.Fprint(stdout, rep.Summary())
	if !rep.Pass {
		fmt.Fprintf(stdout, "FAILED: seed %d; replay with: %s\n", rep.Seed, rep.Replay)
		return 1
	}
	return 0
}

func recheckDir(dir string, stdout, stderr io.Writer) int {
	in, err := chaos.LoadCheckInput(dir)
	if err != nil {
		fmt.Fprintf(stderr, "likes-chaos: %v\n", err)
		return 2
	}
	res := chaos.Check(in)
	fmt.Fprintf(stdout, "re-checked %s: %d ops, %d nemesis events, %d pin versions, %d asOf samples\n",
		dir, len(in.Ops), len(in.Nemesis), len(in.Pins), len(in.Samples))
	fmt.Fprintf(stdout, "  excused %d ops in %d failover windows; violations %v\n", res.ExcusedOps, len(res.Windows), res.ByCheck)
	for _, v := range res.Violations {
		fmt.Fprintf(stdout, "  %s\n", v)
	}
	if len(res.ByCheck) > 0 {
		return 1
	}
	return 0
}

func replay(o chaos.Options) string {
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
		if o.Soak {
			o.Duration = 10 * time.Minute
		}
	}
	return chaos.ReplayCommand(o)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
