package cassandra

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
)

// The tests run against a real Cassandra named by LIKES_TEST_CASSANDRA_HOSTS
// (scripts/servers.sh up cassandra; eval "$(scripts/servers.sh env)"), each
// test in a fresh keyspace, dropped afterwards unless
// LIKES_TEST_CASSANDRA_KEEP is set.

var (
	sessOnce sync.Once
	sess     *gocql.Session
	sessErr  error
	ksSeq    atomic.Int64
)

// SharedSession returns the shared test session, or skips t when no Cassandra
// is configured.
func SharedSession(t testing.TB) *gocql.Session {
	t.Helper()
	hosts := os.Getenv("LIKES_TEST_CASSANDRA_HOSTS")
	if hosts == "" {
		t.Skip("LIKES_TEST_CASSANDRA_HOSTS is not set: no Cassandra to run the Cassandra backend tests against " +
			"(start one with scripts/servers.sh up cassandra, then eval \"$(scripts/servers.sh env)\")")
	}
	sessOnce.Do(func() {
		sess, sessErr = Connect(SessionConfig{Hosts: ParseHosts(hosts), Timeout: 20 * time.Second})
	})
	if sessErr != nil {
		t.Fatalf("connect to Cassandra at %s: %v", hosts, sessErr)
	}
	return sess
}

// CloseTestSession closes the shared session (TestMain).
func CloseTestSession() {
	close(poolStop)
	if pool != nil {
		select { // the prefetcher is migrating one more keyspace: wait, drop it
		case <-prefetchDone:
		case <-time.After(3 * time.Minute):
			return // it may still send to drops: leave the channel open
		}
		select {
		case ks := <-pool:
			drops <- ks.name
		default:
		}
	}
	if drops != nil {
		close(drops)
		select {
		case <-dropDone:
		case <-time.After(5 * time.Minute):
		}
	}
	if sess != nil {
		sess.Close()
	}
}

// keyspace pool: migrating a keyspace takes seconds (a dozen schema changes),
// so one goroutine migrates the next ones while tests run.
var (
	poolOnce     sync.Once
	pool         chan poolKS
	poolStop     = make(chan struct{})
	prefetchDone = make(chan struct{})
)

type poolKS struct {
	name string
	took time.Duration
	err  error
}

func prefetch(s *gocql.Session) {
	defer close(prefetchDone)
	for {
		select {
		case <-poolStop:
			return
		default:
		}
		name := fmt.Sprintf("likes_t%d_%d_%d", os.Getpid()%100000, time.Now().UnixMilli()%1000000, ksSeq.Add(1))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		start := time.Now()
		_, err := Migrate(ctx, s, name, "")
		cancel()
		select {
		case pool <- poolKS{name, time.Since(start), err}:
		case <-poolStop:
			drops <- name
			return
		}
	}
}

// Dropped keyspaces: every test keyspace is dropped when its test ends, in the
// background (a drop takes seconds), because each table holds heap on the
// server and a 1 GiB Cassandra runs out of memory after a few hundred tables.
var (
	dropOnce sync.Once
	drops    chan string
	dropDone = make(chan struct{})
)

func dropper(s *gocql.Session) {
	defer close(dropDone)
	for name := range drops {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_ = s.Query("DROP KEYSPACE IF EXISTS " + name).WithContext(ctx).Exec()
		cancel()
	}
}

// FreshKeyspace returns a new, migrated keyspace, dropped (in the background)
// when t ends unless LIKES_TEST_CASSANDRA_KEEP is set.
func FreshKeyspace(t testing.TB) string {
	t.Helper()
	s := SharedSession(t)
	dropOnce.Do(func() {
		drops = make(chan string, 1024)
		go dropper(s)
	})
	poolOnce.Do(func() {
		pool = make(chan poolKS, 1)
		go prefetch(s)
	})
	var ks poolKS
	select {
	case ks = <-pool:
	case <-time.After(5 * time.Minute):
		t.Fatal("no migrated keyspace within 5 minutes")
	}
	if ks.err != nil {
		drops <- ks.name // it may be half made
		t.Fatalf("migrate %s: %v", ks.name, ks.err)
	}
	t.Logf("keyspace %s (migrated in %v)", ks.name, ks.took.Round(time.Millisecond))
	name := ks.name
	t.Cleanup(func() {
		if os.Getenv("LIKES_TEST_CASSANDRA_KEEP") != "" {
			t.Logf("keeping keyspace %s", name)
			return
		}
		drops <- name
	})
	return name
}

// MakeLegacySequence writes keyspace ks's store row as a release before
// schema 10 did (no seq_groups): a store opened on it keeps one sequence row
// per log partition (outbox_seq). createdMs is the store's creation time
// (the sweeper scans relay intents from it), on the clock the test gives it.
func MakeLegacySequence(t testing.TB, ks, region string, partitions int, createdMs int64) {
	t.Helper()
	err := SharedSession(t).Query(fmt.Sprintf("INSERT INTO %s.meta (name, region, partitions, created_ms) VALUES ('store', ?, ?, ?)", ks),
		region, partitions, createdMs).Exec()
	if err != nil {
		t.Fatal(err)
	}
}

// SequenceGroups is the keyspace's sequence layout (0: one row per partition).
func (s *Store) SequenceGroups() int { return s.seqGroups }

// SetTestHook installs a hook called at the named stages of a write; a
// non-nil error makes the write stop there, as a crash would.
func (s *Store) SetTestHook(h func(stage string) error) { s.hook.Store(&h) }

// HeadOf returns a log partition's head as the sequence row says.
func (s *Store) HeadOf(ctx context.Context, part uint32) (uint64, int, error) {
	r, err := s.readSeq(ctx, part, true)
	return r.head, len(r.inflight), err
}

// FeedPart is the outbox partition of the cell-change feed.
const FeedPart = feedPart

// OutboxRows counts the outbox rows of partition part (FeedPart: the feed)
// at positions 1..through.
func (s *Store) OutboxRows(ctx context.Context, part uint32, through uint64) (int, error) {
	total := 0
	for c := int64(0); c <= chunkOf(through); c++ {
		var n int64
		if err := s.read(ctx, "SELECT COUNT(*) FROM "+s.opts.Keyspace+".outbox WHERE partition = ? AND chunk = ? AND pos <= ?",
			int(part), c, int64(through)).Scan(&n); err != nil {
			return 0, err
		}
		total += int(n)
	}
	return total, nil
}

// DedupeRows counts this region's dedupe rows.
func (s *Store) DedupeRows(ctx context.Context) (int, error) {
	it := s.read(ctx, s.q.dedupeScan, s.opts.Region).PageSize(1000).Iter()
	n := 0
	var item, user string
	var shard int
	var at, wt int64
	for it.Scan(&item, &shard, &user, &at, &wt) {
		n++
	}
	return n, it.Close()
}

// TableRows counts the rows of one of the keyspace's tables (a full scan:
// small test tables only).
func (s *Store) TableRows(ctx context.Context, table string) (int, error) {
	var n int64
	err := s.read(ctx, "SELECT COUNT(*) FROM "+s.opts.Keyspace+"."+table).Scan(&n)
	return int(n), err
}
