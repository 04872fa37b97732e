package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/store/cassandra"
)

// Engines puts every region of a run on the production engines (likesd run
// --store cassandra --log kafka --cache redis): one keyspace, one topic and
// one Redis prefix per region, fresh for each run (a replay with the same
// seed gets new ones). The engines' own processes are shared and never
// faulted: the nemeses act on the regions, their links and etcd as in an
// embedded run; the disk-full nemesis, which fills a Pebble folder, is left
// out.
type Engines struct {
	Cassandra []string // contact points host:port (required)
	Kafka     []string // brokers host:port (required)
	Redis     string   // host:port (required)
}

// EnginesFromEnv reads the servers of scripts/servers.sh env
// (LIKES_TEST_CASSANDRA_HOSTS, LIKES_TEST_KAFKA_BROKERS,
// LIKES_TEST_REDIS_ADDR); the error names what is missing.
func EnginesFromEnv() (Engines, error) {
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	e := Engines{Cassandra: split(os.Getenv("LIKES_TEST_CASSANDRA_HOSTS")), Kafka: split(os.Getenv("LIKES_TEST_KAFKA_BROKERS")),
		Redis: os.Getenv("LIKES_TEST_REDIS_ADDR")}
	return e, e.validate()
}

func (e Engines) validate() error {
	var missing []string
	if len(e.Cassandra) == 0 {
		missing = append(missing, "LIKES_TEST_CASSANDRA_HOSTS")
	}
	if len(e.Kafka) == 0 {
		missing = append(missing, "LIKES_TEST_KAFKA_BROKERS")
	}
	if e.Redis == "" {
		missing = append(missing, "LIKES_TEST_REDIS_ADDR")
	}
	if len(missing) > 0 {
		return fmt.Errorf("chaos: engines: %s not set (bash scripts/servers.sh up redis kafka cassandra && eval \"$(bash scripts/servers.sh env)\")",
			strings.Join(missing, ", "))
	}
	return nil
}

// engineKinds is kinds (default: every nemesis) without the ones that
// need the embedded store; naming one of those is an error.
func engineKinds(kinds []string) ([]string, error) {
	if len(kinds) == 0 {
		return slices.DeleteFunc(slices.Clone(AllNemeses), func(k string) bool { return k == NemDiskFull }), nil
	}
	if slices.Contains(kinds, NemDiskFull) {
		return nil, fmt.Errorf("chaos: the %s nemesis fills a Pebble folder; regions on the engines have none", NemDiskFull)
	}
	return kinds, nil
}

// engineRun is one run's keyspaces, topics and prefixes.
type engineRun struct {
	e      Engines
	tag    string
	spaces map[string]string // region → keyspace
	topics map[string]string // region → topic
}

// prepare migrates a fresh keyspace per region and names the topics and
// prefixes; args are the likesd flags of each region.
func (e Engines) prepare(ctx context.Context, seed uint64, regions []string, logf func(string, ...any)) (*engineRun, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	var rnd [3]byte
	_, _ = crand.Read(rnd[:])
	run := &engineRun{e: e, tag: fmt.Sprintf("%d_%s", seed%1_000_000, hex.EncodeToString(rnd[:])), spaces: map[string]string{}, topics: map[string]string{}}
	sess, err := cassandra.Connect(cassandra.SessionConfig{Hosts: e.Cassandra, Timeout: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("chaos: engines: %w", err)
	}
	defer sess.Close()
	for _, r := range regions {
		ks := "likes_chaos_" + run.tag + "_" + r
		if !cassandra.ValidKeyspace(ks) {
			return nil, fmt.Errorf("chaos: engines: region %q makes no valid keyspace name (%s)", r, ks)
		}
		start := time.Now()
		if _, err := cassandra.Migrate(ctx, sess, ks, ""); err != nil {
			return run, fmt.Errorf("chaos: engines: migrate %s: %w", ks, err)
		}
		logf("keyspace %s migrated in %v", ks, time.Since(start).Round(time.Millisecond))
		run.spaces[r] = ks
		run.topics[r] = "likes-chaos." + run.tag + "." + r
	}
	return run, nil
}

// args are region r's engine flags.
func (run *engineRun) args(r string) []string {
	return []string{
		"--store", "cassandra", "--cassandra", strings.Join(run.e.Cassandra, ","), "--keyspace", run.spaces[r],
		"--log", "kafka", "--kafka", strings.Join(run.e.Kafka, ","), "--topic", run.topics[r],
		"--cache", "redis", "--redis", run.e.Redis, "--redis-prefix", "likes-chaos:" + run.tag + ":" + r + ":",
	}
}

// drop removes the run's keyspaces and topics (Redis keys carry no TTL of
// their own beyond the caches'; the prefix is unique to the run).
func (run *engineRun) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	sess, err := cassandra.Connect(cassandra.SessionConfig{Hosts: run.e.Cassandra, Timeout: 30 * time.Second})
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, ks := range run.spaces {
			errs = append(errs, sess.Query("DROP KEYSPACE IF EXISTS "+ks).WithContext(ctx).Exec())
		}
		sess.Close()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(run.e.Kafka...))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer cl.Close()
	var topics []string
	for _, t := range run.topics {
		topics = append(topics, t, t+".dlq")
	}
	_, err = kadm.NewClient(cl).DeleteTopics(ctx, topics...)
	return errors.Join(append(errs, err)...)
}
