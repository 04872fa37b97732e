// Command likectl is the operator and developer tool of likes.
//
//	likectl token --user alice [--admin] [--ttl 1h] [--private-key key.pem] [--iss I] [--aud A]
//	likectl bench [flags]
//	likectl pins list|move|drain|settle|rebalance, likectl regions, likectl reconcile
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/likes-dev/likes/store/cassandra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "likectl:", err)
		os.Exit(2)
	}
}

const usage = `usage: likectl <command> [flags]

commands:
  token      print a bearer token signed with --private-key (Ed25519/P-256) or $LIKES_AUTH_SECRET
  token-key  write a new Ed25519 key pair: --out FILE (for --private-key) and FILE.pub (likesd --auth-public-key)
  bench      drive a region's HTTP API on loopback and report throughput and latency
  pins       list | move --range N --to REGION | drain --from REGION --to REGION | settle --range N | rebalance
             (moves are planned: the new owner catches up on every live region's log
             before writing; --unplanned skips that, as a failover does)
  regions    live regions: lease health, watermarks, aggregator and replication lag
  reconcile  recount items from edges, report mismatches, --heal through the fenced path
  migrate    create or upgrade the Cassandra schema (versioned, idempotent)
  certs      init (a CA and a gossip key) | issue --region NAME (a region certificate)
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "token":
		return token(args[1:], stdout, stderr)
	case "certs":
		return certs(args[1:], stdout, stderr)
	case "token-key":
		return tokenKey(args[1:], stdout, stderr)
	case "bench":
		return bench(ctx, args[1:], stdout, stderr)
	case "pins":
		return pins(ctx, args[1:], stdout, stderr)
	case "regions":
		return regions(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return reconcile(ctx, args[1:], stdout, stderr)
	case "backup", "restore": // backup.go
		return backupCommand(ctx, args, stdout, stderr)
	case "migrate":
		return cassandra.MigrateCommand(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func token(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likectl token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("user", "", "the token's subject (required)")
	admin := fs.Bool("admin", false, "grant admin (retractions, erasing other users)")
	ttl := fs.Duration("ttl", time.Hour, "validity")
	s := signer{warn: stderr}
	s.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("token: --user is required")
	}
	tok, err := s.sign(*user, *admin, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
