// Command likectl is the operator and developer tool of likes. It follows
// kubectl/etcdctl conventions:
//
//	likectl <command> [<subcommand>] [flags]
//	likectl token --user alice [--admin] [--ttl 1h] [--private-key key.pem]
//	likectl pins list|move|drain|settle|rebalance   likectl regions   likectl cluster
//	likectl reconcile [--heal]   likectl dlq list|replay   likectl bench   likectl migrate
//	likectl certs init|issue   likectl backup|restore   likectl completion bash|zsh   likectl help [command...]
//
// Every command and subcommand has help (-h, --help, or `likectl help
// CMD...`): it prints to stdout, exits 0 and never touches the network,
// because flags are parsed before anything dials. Read commands take `-o
// table|json`; their JSON field names are stable and listed in each command's
// help, and a partial result says so (`"truncated": true`, a line in the
// table, and the exit status). Exit status: 0 done, 1 done with a finding
// (mismatches, a partial or truncated result, a refused record), 2 a usage
// error or a failure (bad flag, cannot connect); run returns typed errors
// (errUsage, errFinding) and main maps them. Long runs (pins drain and
// rebalance, reconcile, dlq replay, bench) print progress lines on stderr,
// off with --quiet.
//
// The cluster's parameters (ranges, lease TTL, max skew, key layout version)
// are read from the cluster metadata in etcd (internal/clustermeta, written
// when the cluster is created), never typed by hand: `likectl pins` refuses a
// deprecated --ranges/--lease-ttl/--max-skew that disagrees with them.
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

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/store/cassandra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "likectl:", err)
	}
	os.Exit(exitCode(err))
}

// run runs likectl with args; exitCode maps its error to the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return execute(ctx, rootCommand(), args, &env{stdout: stdout, stderr: stderr, clock: clock.Real{}})
}

// extraCommands are top-level commands other files register in init (they
// appear after the built-in ones).
var extraCommands []*command

func rootCommand() *command {
	root := &command{
		name: "likectl",
		long: `The operator and developer tool of likes. Every command has help: likectl CMD -h, or likectl help CMD.`,
		subs: []*command{
			tokenCommand(),
			tokenKeyCommand(),
			pinsCommand(),
			regionsGroup(),
			clusterCommand(),
			reconcileCommand(),
			dlqCommand(),
			benchCommand(),
			migrateCommand(),
			certsCommand(),
		},
	}
	root.subs = append(root.subs, extraCommands...)
	root.subs = append(root.subs, completionCommand(root))
	return root
}

func tokenCommand() *command {
	return &command{
		name:    "token",
		summary: "print a bearer token signed with --private-key (Ed25519/P-256) or $LIKES_AUTH_SECRET",
		usage:   "token --user NAME [--admin] [--ttl 1h] [--private-key key.pem] [--iss I] [--aud A] [--kid K]",
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			user := fs.String("user", "", "the token's subject (required)")
			admin := fs.Bool("admin", false, "grant admin (retractions, erasing other users)")
			ttl := fs.Duration("ttl", time.Hour, "validity")
			s := signer{warn: e.stderr}
			s.register(fs)
			return func(ctx context.Context, args []string) error {
				if err := noArgs("token", args); err != nil {
					return err
				}
				if *user == "" {
					return usagef("token: --user is required")
				}
				tok, err := s.sign(*user, *admin, *ttl)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, tok)
				return nil
			}
		},
	}
}

func migrateCommand() *command {
	return &command{
		name:     "migrate",
		summary:  "create or upgrade the Cassandra schema (versioned, idempotent)",
		rawFlags: []string{"hosts", "keyspace", "replication", "timeout", "status"},
		raw: func(ctx context.Context, args []string, e *env) error {
			if hasHelp(args) { // its flag set prints defaults on its error output
				fmt.Fprintln(e.stdout, "Usage: likectl migrate --keyspace NAME [--hosts h:p,...] [--replication MAP] [--timeout 2m] [--status]")
				fmt.Fprintln(e.stdout, "\ncreate or upgrade the Cassandra schema of a region's keyspace (versioned, idempotent)")
				fmt.Fprintln(e.stdout, "\nFlags:")
				err := cassandra.MigrateCommand(ctx, []string{"-h"}, e.stdout, e.stdout)
				if err != nil && !errors.Is(err, flag.ErrHelp) {
					return err
				}
				return nil
			}
			err := cassandra.MigrateCommand(ctx, args, e.stdout, e.stderr)
			if err != nil && isFlagError(err) {
				return usagef("%v (see likectl migrate -h)", err)
			}
			return err
		},
	}
}

// isFlagError reports whether err comes from parsing migrate's flags (the
// flag package's errors are plain strings).
func isFlagError(err error) bool {
	for _, p := range []string{"flag provided but not defined", "invalid value", "bad flag syntax",
		"flag needs an argument", "migrate: --keyspace is required", "migrate: unexpected arguments", "migrate: invalid keyspace"} {
		if strings.Contains(err.Error(), p) {
			return true
		}
	}
	return false
}

// noArgs refuses positional arguments of a command that takes none.
func noArgs(name string, args []string) error {
	if len(args) > 0 {
		return usagef("%s: unexpected arguments %q (flags go before them? see likectl %s -h)", name, args, name)
	}
	return nil
}
