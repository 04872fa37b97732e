// Command likesd runs likes regions.
//
//	likesd dev [--regions us] [--http-port 8080] [--data ./likes-data]
//
// starts the embedded default (Pebble, no servers) on loopback. Ctrl-C shuts down
// cleanly; a restart on the same --data keeps every acknowledged like.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"likes/api"
	"likes/auth"
	"likes/region"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "likesd:", err)
		os.Exit(2)
	}
}

const usage = `usage: likesd <command> [flags]

commands:
  dev    run the embedded default (Pebble, no servers) on loopback
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "dev":
		return dev(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likesd dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	regions := fs.String("regions", "us", "comma-separated region names")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("http-port", 8080, "HTTP port of the first region (region i listens on port+i)")
	data := fs.String("data", "./likes-data", "data folder (one subfolder per region)")
	partitions := fs.Int("partitions", 16, "log partitions per region (fixed when the data folder is created)")
	window := fs.Duration("window", 250*time.Millisecond, "aggregator window")
	inflight := fs.Int("max-inflight-writes", 1024, "writes admitted at once; more get 503 + Retry-After")
	userRate := fs.Float64("user-rate", 20, "writes per second per user (negative: unlimited)")
	ipRate := fs.Float64("ip-rate", 0, "requests per second per client IP (0: unlimited)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := strings.Split(*regions, ",")
	for _, n := range names {
		if err := api.ValidateID("region", n); err != nil || strings.ContainsAny(n, "/\\ ") {
			return fmt.Errorf("bad region name %q", n)
		}
	}
	if len(names) != 1 {
		return fmt.Errorf("--regions %s: this build runs one region per process; multi-region replication is not available yet", *regions)
	}
	if *port < 0 || *port > 65535 {
		return fmt.Errorf("--http-port %d out of range", *port)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	secret, isDefault := auth.SecretFromEnv()
	if isDefault {
		logger.Warn("LIKES_AUTH_SECRET is not set: using the PUBLIC development secret; anyone can mint tokens. Set it in any real deployment.")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	r, err := region.Open(ctx, region.Config{
		Name: names[0], DataDir: *data, Partitions: *partitions, Window: *window, Secret: secret,
		MaxInFlightWrites: *inflight, UserRate: *userRate, IPRate: *ipRate, Logger: logger,
	})
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(*host, fmt.Sprint(*port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = r.Close()
		return err
	}
	srv := &http.Server{Handler: r.API, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "likes: region %q serving %s (data %s)\n", names[0], base, *data)
	fmt.Fprintf(stdout, "  get a token:  TOKEN=$(go run ./cmd/likectl token --user alice)\n")
	fmt.Fprintf(stdout, "  like:         curl -X POST -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: k1' %s/v1/items/item1/likes\n", base)
	fmt.Fprintf(stdout, "  count:        curl %s/v1/items/item1/count\n", base)
	fmt.Fprintf(stdout, "  Ctrl-C stops cleanly.\n")

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	logger.Info("shutting down: draining HTTP, then stopping aggregators and the store")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		logger.Warn("http shutdown", "err", err)
	}
	closeErr := r.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	if closeErr == nil {
		logger.Info("stopped cleanly")
	}
	return closeErr
}
