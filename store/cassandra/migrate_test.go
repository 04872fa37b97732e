package cassandra_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/store/cassandra"
)

// TestMigrateAndReopen: Migrate is idempotent, Open refuses a keyspace without
// the schema or made for another region or partition count, and a reopened
// store keeps edges, records and log positions.
func TestMigrateAndReopen(t *testing.T) {
	sess := cassandra.SharedSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ks := cassandra.FreshKeyspace(t)
	applied, err := cassandra.Migrate(ctx, sess, ks, "")
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, %v; want nothing", applied, err)
	}
	done, err := cassandra.AppliedVersions(ctx, sess, ks)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range cassandra.Steps {
		if !done[st.Version] {
			t.Fatalf("version %d not recorded: %v", st.Version, done)
		}
	}
	for _, bad := range []string{"", "1abc", "a-b", "a;DROP", strings.Repeat("k", 49)} {
		if _, err := cassandra.Migrate(ctx, sess, bad, ""); err == nil {
			t.Fatalf("Migrate accepted keyspace name %q", bad)
		}
	}
	if _, err := cassandra.Migrate(ctx, sess, ks, "{'class': 'SimpleStrategy'}; DROP KEYSPACE x"); err == nil {
		t.Fatal("Migrate accepted a replication with a statement in it")
	}
	var out, errOut bytes.Buffer
	if err := cassandra.MigrateCommand(ctx, []string{"--hosts", "127.0.0.1:1", "--keyspace", ""}, &out, &errOut); err == nil {
		t.Fatal("MigrateCommand without a keyspace succeeded")
	}

	clk := clock.NewFake(time.UnixMilli(t0))
	s := openOn(t, ks, 2, clk)
	d, err := s.Apply(ctx, edgetest.Like("item", "a", "k", 1, t0))
	if err != nil || d.Event == nil || d.Event.Pos == 0 {
		t.Fatalf("first write = %+v, %v", d, err)
	}
	first := *d.Event
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Apply(ctx, edgetest.Like("item", "b", "k", 1, t0)); err == nil {
		t.Fatal("Apply after Close succeeded")
	}
	for _, o := range []cassandra.Options{
		{Session: sess, Keyspace: ks, Region: "r2", Partitions: 2},
		{Session: sess, Keyspace: ks, Region: "r1", Partitions: 3},
		{Session: sess, Keyspace: "likes_no_such_keyspace", Region: "r1", Partitions: 2},
		{Session: sess, Keyspace: ks, Region: "", Partitions: 2},
		{Keyspace: ks, Region: "r1", Partitions: 2},
	} {
		if s, err := cassandra.Open(ctx, o); err == nil {
			_ = s.Close()
			t.Fatalf("Open(%+v) succeeded", o)
		}
	}

	s = openOn(t, ks, 2, clk)
	if d, err := s.Apply(ctx, edgetest.Like("item", "a", "k", 1, t0+1)); err != nil || d.Action != edge.ActReplay {
		t.Fatalf("replay after reopen = %+v, %v", d, err)
	}
	// A new write in the same log partition continues after the first.
	user := ""
	for _, u := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		if edge.PartitionOf("item", edge.BucketOf(u), 2) == first.Partition {
			user = u
			break
		}
	}
	clk.Advance(time.Millisecond)
	d, err = s.Apply(ctx, edgetest.Like("item", user, "k", 1, t0+2))
	if err != nil || d.Event == nil || d.Event.Pos != first.Pos+1 || d.Event.EventTime < first.EventTime {
		t.Fatalf("write after reopen = %+v (event %+v), %v; want position %d", d, d.Event, err, first.Pos+1)
	}

	// likectl migrate --sequence-groups moves the rows (the store closed),
	// and the positions continue.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	hosts := os.Getenv("LIKES_TEST_CASSANDRA_HOSTS")
	if err := cassandra.MigrateCommand(ctx, []string{"--hosts", hosts, "--keyspace", ks, "--sequence-groups", "-1"}, &out, &errOut); err == nil {
		t.Fatal("--sequence-groups -1 accepted")
	}
	out.Reset()
	if err := cassandra.MigrateCommand(ctx, []string{"--hosts", hosts, "--keyspace", ks, "--sequence-groups", "2"}, &out, &errOut); err != nil {
		t.Fatalf("migrate --sequence-groups 2: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "moved from 1 to 2 group(s)") {
		t.Fatalf("migrate --sequence-groups 2 printed %q", out.String())
	}
	s = openOn(t, ks, 2, clk)
	if g := s.SequenceGroups(); g != 2 {
		t.Fatalf("after the move: %d sequence groups, want 2", g)
	}
	prev := *d.Event
	clk.Advance(time.Millisecond)
	d, err = s.Apply(ctx, edgetest.Unlike("item", user, "k2", 1, t0+3))
	if err != nil || d.Event == nil || d.Event.Pos != prev.Pos+1 {
		t.Fatalf("write after the move = %+v, %v; want position %d", d, err, prev.Pos+1)
	}
}
