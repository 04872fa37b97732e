package cassandra

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// MigrateCommand is `likectl migrate`: it creates (or upgrades) a region's
// keyspace to SchemaVersion and prints what it did. args are the flags after
// the command name:
//
//	--hosts      contact points, comma-separated (default $LIKES_CASSANDRA_HOSTS, else 127.0.0.1:9042)
//	--keyspace   the region's keyspace (required)
//	--replication  CQL replication map (default SimpleStrategy, RF 1)
//	--timeout    overall deadline (default 2m)
//	--status     only print the applied versions, change nothing
//	--sequence-groups N  then move the log's sequence rows to N groups
//	             (Regroup; the region's processes stopped)
func MigrateCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likectl migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defHosts := os.Getenv("LIKES_CASSANDRA_HOSTS")
	if defHosts == "" {
		defHosts = "127.0.0.1:9042"
	}
	hosts := fs.String("hosts", defHosts, "Cassandra contact points, comma-separated host[:port]")
	keyspace := fs.String("keyspace", "", "the region's keyspace (required)")
	replication := fs.String("replication", DefaultReplication, "keyspace replication, a CQL map literal")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall deadline")
	status := fs.Bool("status", false, "print the applied schema versions and change nothing")
	groups := fs.Int("sequence-groups", 0, "then move the log's sequence rows to this many groups (1: one transaction serves every log partition); stop the region's processes first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("migrate: unexpected arguments %q", fs.Args())
	}
	if *keyspace == "" {
		return errors.New("migrate: --keyspace is required")
	}
	if !ValidKeyspace(*keyspace) {
		return fmt.Errorf("migrate: invalid keyspace name %q", *keyspace)
	}
	if *groups < 0 || (*groups > 0 && *status) {
		return fmt.Errorf("migrate: --sequence-groups wants a count of at least 1, without --status")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	session, err := Connect(SessionConfig{Hosts: ParseHosts(*hosts)})
	if err != nil {
		return err
	}
	defer session.Close()
	if *status {
		done, err := AppliedVersions(ctx, session, *keyspace)
		if err != nil {
			return err
		}
		for _, st := range Steps {
			mark := "pending"
			if done[st.Version] {
				mark = "applied"
			}
			fmt.Fprintf(stdout, "%s version %d %s: %s\n", *keyspace, st.Version, mark, st.Description)
		}
		return nil
	}
	start := time.Now()
	applied, err := Migrate(ctx, session, *keyspace, *replication)
	for _, v := range applied {
		for _, st := range Steps {
			if st.Version == v {
				fmt.Fprintf(stdout, "%s: applied version %d: %s\n", *keyspace, v, st.Description)
			}
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: at schema version %d (%d step(s) applied now, %v)\n",
		*keyspace, SchemaVersion, len(applied), time.Since(start).Round(time.Millisecond))
	if *groups > 0 {
		return Regroup(ctx, session, *keyspace, *groups, func(line string) { fmt.Fprintln(stdout, line) })
	}
	return nil
}
