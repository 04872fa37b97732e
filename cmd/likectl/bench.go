package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/loadgen"
)

const benchLong = `Drives a running region on loopback through three phases of --duration each:
uniform like/unlike writes, writes on one viral item, and count reads; during the
write phases a sampler records count staleness. Tokens are signed with
$LIKES_AUTH_SECRET (the server's secret). Start the server with --user-rate -1,
or keep --users large enough that no user exceeds the per-user write limit.
Ctrl-C stops early and prints a partial report (exit 1). Only loopback URLs are accepted.
-o json prints the report as JSON (loadgen.Report's fields) on stdout.
`

func benchCommand() *command {
	return &command{
		name:    "bench",
		summary: "drive a region's HTTP API on loopback and report throughput and latency",
		usage:   "bench [--url http://127.0.0.1:8080] [--duration 10s] [--workers 64] [--items 10000] [--json FILE] [-o table|json]",
		long:    benchLong,
		setup:   benchSetup,
	}
}

func benchSetup(fs *flag.FlagSet, e *env) runFunc {
	stdout, stderr := e.stdout, e.stderr
	target := fs.String("url", "http://127.0.0.1:8080", "the region's base URL (loopback only)")
	duration := fs.Duration("duration", 10*time.Second, "length of each phase")
	workers := fs.Int("workers", 64, "concurrent workers")
	users := fs.Int("users", 0, "users in all (default workers*50)")
	items := fs.Int("items", 10000, "distinct items of the uniform and read phases")
	phases := fs.String("phases", strings.Join(loadgen.AllPhases, ","), "phases to run, in order")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	serverPID := fs.Int("server-pid", 0, "if set, report the CPU this local process (the server) spends per request, from /proc/PID/stat")
	var out outputFlag
	out.register(fs)
	return func(ctx context.Context, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		if len(args) != 0 {
			return usagef("bench: unexpected arguments %q", args)
		}
		if _, err := loadgen.CheckLoopback(*target); err != nil {
			return usagef("bench: --url: %v", err)
		}
		if *duration <= 0 || *duration > time.Hour {
			return usagef("bench: --duration %v must be in (0, 1h]", *duration)
		}
		secret, isDefault := auth.SecretFromEnv()
		if isDefault {
			fmt.Fprintln(stderr, "likectl: LIKES_AUTH_SECRET is not set; signing with the public development secret (the server must use it too)")
		}
		cfg := loadgen.Config{
			URL: *target, Secret: secret, Workers: *workers, Users: *users, Items: *items,
			PhaseDuration: *duration, Phases: strings.Split(*phases, ","),
		}
		if *serverPID > 0 {
			pid := *serverPID
			if _, err := loadgen.ProcessCPU(pid); err != nil {
				return fmt.Errorf("bench: --server-pid: %w", err)
			}
			cfg.ServerCPU = func() (time.Duration, error) { return loadgen.ProcessCPU(pid) }
		}
		if !*quiet {
			cfg.Progress = func(p loadgen.Progress) {
				fmt.Fprintf(stderr, "bench: %-15s %5.1fs  requests=%d ok=%d errors=%d  %.0f req/s\n",
					p.Phase, p.Elapsed.Seconds(), p.Requests, p.OK, p.Errors, p.Rate)
			}
		}
		fmt.Fprintf(stderr, "bench: %s, %d workers, %d phases of %v (Ctrl-C stops early)\n", *target, *workers, len(cfg.Phases), *duration)
		rep, err := loadgen.Run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if out.json() {
			err = writeJSON(stdout, rep)
		} else {
			err = rep.WriteTable(stdout)
		}
		if err != nil {
			return err
		}
		if *jsonOut != "" {
			b, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
				return fmt.Errorf("bench: --json: %w", err)
			}
			fmt.Fprintf(stderr, "bench: wrote %s\n", *jsonOut)
		}
		if rep.Interrupted {
			if !out.json() {
				fmt.Fprintln(stdout, "PARTIAL: interrupted before every phase ran its --duration")
			}
			return findingf("bench: interrupted; the report above is partial")
		}
		return nil
	}
}
