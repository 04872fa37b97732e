package region

// The end-to-end test of one region on the production engines: Cassandra
// (edges, outbox, cells), Kafka (the committed log the aggregators read, fed
// by the relay) and Redis (count cache, overlay, limiters), against the real
// servers of scripts/servers.sh (`make test-engines` runs it), and etcd
// (LIKES_TEST_ETCD_ENDPOINTS): the Cassandra region is a peerless Cluster
// member, taking its pins, epochs and lease from the external etcd (through a
// fault-injecting proxy, so the test can cut it and see writes fail closed).

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/cache/rediscache"
	"github.com/likes-dev/likes/chaos/proxy"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/store/cassandra"
)

// engineEnv names the real servers; ok is false (with the reason) when one is missing.
type engineEnv struct {
	cassandra []string
	kafka     []string
	redis     string
}

func realEngines(t testing.TB) engineEnv {
	t.Helper()
	e := engineEnv{
		cassandra: cassandra.ParseHosts(os.Getenv("LIKES_TEST_CASSANDRA_HOSTS")),
		kafka:     cassandra.ParseHosts(os.Getenv("LIKES_TEST_KAFKA_BROKERS")),
		redis:     strings.TrimSpace(os.Getenv("LIKES_TEST_REDIS_ADDR")),
	}
	var missing []string
	if len(e.cassandra) == 0 {
		missing = append(missing, "LIKES_TEST_CASSANDRA_HOSTS")
	}
	if len(e.kafka) == 0 {
		missing = append(missing, "LIKES_TEST_KAFKA_BROKERS")
	}
	if e.redis == "" {
		missing = append(missing, "LIKES_TEST_REDIS_ADDR")
	}
	if len(missing) > 0 {
		t.Skipf("%s not set: no real engines to run the region on (make test-engines starts them; "+
			"or bash scripts/servers.sh up redis kafka cassandra && eval \"$(bash scripts/servers.sh env)\")", strings.Join(missing, ", "))
	}
	return e
}

// engineConfig migrates a fresh keyspace, names a fresh topic and Redis
// prefix, and drops them when t ends.
func engineConfig(t testing.TB, env engineEnv, name string) Engines {
	t.Helper()
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	ks := "likes_e2e_" + name + "_" + tag
	sess, err := cassandra.Connect(cassandra.SessionConfig{Hosts: env.cassandra, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := cassandra.Migrate(ctx, sess, ks, ""); err != nil {
		sess.Close()
		t.Fatalf("migrate %s: %v", ks, err)
	}
	t.Logf("keyspace %s migrated in %v", ks, time.Since(start).Round(time.Millisecond))
	topic := "likes-e2e." + name + "." + tag
	t.Cleanup(func() {
		defer sess.Close()
		if os.Getenv("LIKES_TEST_CASSANDRA_KEEP") == "" {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := sess.Query("DROP KEYSPACE IF EXISTS " + ks).WithContext(ctx).Exec(); err != nil {
				t.Logf("drop keyspace %s: %v", ks, err)
			}
		}
	})
	DeleteTopicsAtEnd(t, env.kafka, topic)
	return Engines{
		Store:     StoreCassandra,
		Cassandra: CassandraEngine{Hosts: env.cassandra, Keyspace: ks, Timeout: 20 * time.Second, SequenceGroups: seqGroupsFromEnv(t)},
		Log:       LogKafka,
		Kafka:     KafkaEngine{Brokers: env.kafka, Topic: topic, PollInterval: 10 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond},
		Cache:     CacheRedis,
		Redis:     rediscache.Config{Addr: env.redis, Prefix: "likes-e2e:" + tag + ":", Timeout: 500 * time.Millisecond},
	}
}

// seqGroupsFromEnv is LIKES_MEASURE_SEQUENCE_GROUPS (default 0: the
// store's default), for measurements comparing sequence layouts.
func seqGroupsFromEnv(t testing.TB) int {
	v := os.Getenv("LIKES_MEASURE_SEQUENCE_GROUPS")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("LIKES_MEASURE_SEQUENCE_GROUPS=%q: want a count of groups, at least 1", v)
	}
	return n
}

var e2eSecret = []byte("engines-e2e-secret")

// answer is a write's JSON answer.
type answer struct {
	Liked   bool `json:"liked"`
	Changed bool `json:"changed"`
}

// e2eClient sends writes and retries each until it is acknowledged.
type e2eClient struct {
	t      *testing.T
	base   string
	http   *http.Client
	tokens map[string]string
	// Retried counts transient failures (429, 5xx, transport) retried with the same key.
	retried atomic.Int64
}

type op struct {
	item, user, key string
	like            bool
}

// send sends op once: ok is false for a transient failure worth retrying.
func (c *e2eClient) send(ctx context.Context, o op) (answer, bool, error) {
	method, path := http.MethodPost, "/v1/items/"+url.PathEscape(o.item)+"/likes"
	if !o.like {
		method, path = http.MethodDelete, path+"/"+url.PathEscape(o.user)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return answer{}, false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[o.user])
	req.Header.Set("Idempotency-Key", o.key)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{}, false, ctx.Err()
		}
		return answer{}, false, nil // transport failure: the write may or may not have happened
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusOK:
		var a answer
		if err := json.Unmarshal(body, &a); err != nil {
			return answer{}, false, fmt.Errorf("answer %q: %v", body, err)
		}
		if a.Liked != o.like {
			return answer{}, false, fmt.Errorf("%+v answered liked=%v", o, a.Liked)
		}
		return a, true, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return answer{}, false, nil
	default:
		return answer{}, false, fmt.Errorf("%+v: HTTP %d %s", o, resp.StatusCode, body)
	}
}

// do sends op until acknowledged (the same key every time), within ctx.
func (c *e2eClient) do(ctx context.Context, o op) (answer, error) {
	for attempt := 0; ; attempt++ {
		a, ok, err := c.send(ctx, o)
		if err != nil {
			return answer{}, err
		}
		if ok {
			return a, nil
		}
		c.retried.Add(1)
		select {
		case <-ctx.Done():
			return answer{}, fmt.Errorf("%+v not acknowledged after %d attempts: %w", o, attempt+1, ctx.Err())
		case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond): // back off before a retry
		}
	}
}

func (c *e2eClient) getJSON(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// TestEnginesEndToEnd: one region on Cassandra + Kafka + Redis takes
// concurrent likes and unlikes through its HTTP API, with retries of the same
// idempotency key (after transient failures, and stale retries of an earlier
// write after a later one) and concurrent duplicates; its aggregator group and
// its relay are killed mid-load and restarted. After convergence every item's
// count == its LIKED edges == the model of acknowledged writes, its likers are
// the model's, and reconciliation finds no mismatch.
func TestEnginesEndToEnd(t *testing.T) {
	env := realEngines(t)
	t.Run("cassandra-kafka-redis-etcd", func(t *testing.T) {
		endToEnd(t, engineConfig(t, env, "one"), "", etcdThroughProxy(t))
	})
	// The embedded store with the Kafka log: the relay publishes the Pebble
	// log, the aggregators read Kafka and commit to Pebble.
	t.Run("pebble-kafka", func(t *testing.T) {
		e := engineConfig(t, env, "peb")
		e.Store, e.Cassandra, e.Cache, e.Redis = StorePebble, CassandraEngine{}, CacheInproc, rediscache.Config{}
		endToEnd(t, e, t.TempDir(), nil)
	})
}

// etcdLink is the region's etcd client, dialled through a proxy the test can cut.
type etcdLink struct {
	cluster *Cluster
	proxy   *proxy.Proxy
}

// etcdThroughProxy is a peerless Cluster on the external etcd under a fresh
// prefix (TTL 2s), or nil (with a log line) when LIKES_TEST_ETCD_ENDPOINTS is unset.
func etcdThroughProxy(t *testing.T) *etcdLink {
	t.Helper()
	eps := strings.TrimSpace(os.Getenv(epochtest.EnvEndpoints))
	if eps == "" {
		t.Logf("%s is unset: the region runs without etcd", epochtest.EnvEndpoints)
		return nil
	}
	u, err := url.Parse(strings.Split(eps, ",")[0])
	if err != nil {
		t.Fatalf("%s: %v", epochtest.EnvEndpoints, err)
	}
	px, err := proxy.New("us->etcd", "127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cli, err := etcdepoch.NewClient([]string{"http://" + px.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return &etcdLink{proxy: px, cluster: &Cluster{Etcd: cli, Epoch: epochtest.Config(t, 16), Regions: []string{"us"}}}
}

func endToEnd(t *testing.T, engines Engines, dataDir string, etcd *etcdLink) {
	const (
		users       = 24
		items       = 6
		opsPerUser  = 32
		partitions  = 4
		loadTimeout = 4 * time.Minute
	)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx := context.Background()
	cfg := Config{
		Name: "us", DataDir: dataDir, Partitions: partitions, Window: 100 * time.Millisecond, Secret: e2eSecret,
		UserRate: 500, Engines: engines, Logger: logger,
	}
	if etcd != nil {
		cfg.Cluster = etcd.cluster
	}
	r, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open on the engines: %v", err)
	}
	srv := httptest.NewServer(r.API)
	defer func() {
		srv.Close()
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	onCassandra := engines.Store == StoreCassandra
	if (r.Store == nil) != onCassandra || (r.Cassandra != nil) != onCassandra || r.Relay == nil || r.KafkaLog == nil ||
		(r.Redis != nil) != (engines.Cache == CacheRedis) {
		t.Fatalf("engines not wired: Store %v Cassandra %v Relay %v KafkaLog %v Redis %v", r.Store, r.Cassandra, r.Relay, r.KafkaLog, r.Redis)
	}

	c := &e2eClient{t: t, base: srv.URL, http: &http.Client{Timeout: 30 * time.Second}, tokens: map[string]string{}}
	userIDs := make([]string, users)
	for i := range userIDs {
		userIDs[i] = fmt.Sprintf("u%02d", i)
		tok, err := auth.Sign(e2eSecret, userIDs[i], false, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c.tokens[userIDs[i]] = tok
	}
	adminTok, err := auth.Sign(e2eSecret, "operator", true, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	itemIDs := make([]string, items)
	for i := range itemIDs {
		itemIDs[i] = fmt.Sprintf("item-%d", i)
	}

	// The model: each user's writes are sequential and each is retried until
	// acknowledged, so an edge's state is the target of the user's last
	// acknowledged write on it. Stale retries must replay, never re-apply.
	var (
		mu    sync.Mutex
		model = map[[2]string]bool{} // (item, user) → liked
	)
	var done, dups, stale atomic.Int64
	loadCtx, cancelLoad := context.WithTimeout(ctx, loadTimeout)
	defer cancelLoad()
	errc := make(chan error, users)
	var wg sync.WaitGroup
	for ui, user := range userIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(ui), 7))
			var prev *op
			var prevAns answer
			for n := range opsPerUser {
				o := op{item: itemIDs[rng.IntN(items)], user: user, key: fmt.Sprintf("%s-k%d", user, n), like: rng.IntN(3) > 0}
				var a answer
				var err error
				if rng.IntN(4) == 0 {
					// A concurrent duplicate: the same request twice at once.
					dups.Add(1)
					var a2 answer
					var err2 error
					var dw sync.WaitGroup
					dw.Add(1)
					go func() { defer dw.Done(); a2, err2 = c.do(loadCtx, o) }()
					a, err = c.do(loadCtx, o)
					dw.Wait()
					if err == nil && err2 == nil && a != a2 {
						err = fmt.Errorf("duplicates of %+v answered %+v and %+v", o, a, a2)
					} else if err == nil {
						err = err2
					}
				} else {
					a, err = c.do(loadCtx, o)
				}
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				model[[2]string{o.item, o.user}] = o.like
				mu.Unlock()
				if prev != nil && rng.IntN(5) == 0 {
					// A stale retry of the previous write (its 200 "lost"):
					// it replays the recorded answer and changes nothing.
					stale.Add(1)
					sa, err := c.do(loadCtx, *prev)
					if err != nil {
						errc <- err
						return
					}
					if sa != prevAns {
						errc <- fmt.Errorf("stale retry of %+v answered %+v, first answer %+v", *prev, sa, prevAns)
						return
					}
				}
				p := o
				prev, prevAns = &p, a
				done.Add(1)
			}
		}()
	}

	// Kill the aggregators and the relay mid-load, restart them later.
	total := int64(users * opsPerUser)
	waitProgress := func(what string, n int64) {
		t.Helper()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for done.Load() < n {
			select {
			case <-loadCtx.Done():
				t.Fatalf("load did not reach %d writes (%s) in time: %d done", n, what, done.Load())
			case err := <-errc:
				t.Fatal(err)
			case <-tick.C:
			}
		}
	}
	waitProgress("first kill", total/5)
	r.stopAggregators()
	r.stopRelay()
	t.Logf("killed the aggregators and the relay at %d/%d writes", done.Load(), total)
	waitProgress("first restart", 2*total/5)
	if err := r.startRelay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.startAggregators(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted them at %d/%d writes", done.Load(), total)
	waitProgress("second kill", 3*total/5)
	r.stopRelay()
	r.stopAggregators()
	if err := r.startAggregators(ctx); err != nil { // the aggregators catch up on Kafka while the relay is down
		t.Fatal(err)
	}
	waitProgress("second restart", 4*total/5)
	if err := r.startRelay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed and restarted both again by %d/%d writes", done.Load(), total)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("load done: %d writes acknowledged, %d concurrent duplicates, %d stale retries, %d transient failures retried",
		done.Load(), dups.Load(), stale.Load(), c.retried.Load())

	want := map[string]int64{}
	likers := map[string][]string{}
	for k, liked := range model {
		if liked {
			want[k[0]]++
			likers[k[0]] = append(likers[k[0]], k[1])
		}
	}

	// Convergence: every count through the API equals the model.
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, item := range itemIDs {
		var last string
		for {
			var cnt struct {
				Count int64 `json:"count"`
			}
			err := c.getJSON(ctx, "/v1/items/"+item+"/count", &cnt)
			if err == nil && cnt.Count == want[item] {
				break
			}
			last = fmt.Sprintf("count %d, want %d (err %v)", cnt.Count, want[item], err)
			if time.Now().After(deadline) {
				t.Fatalf("%s did not converge: %s; aggregators %+v", item, last, r.aggStats())
			}
			<-tick.C
		}
	}
	// Converged: every event published and folded. Now the store agrees: Σ
	// cells == LIKED edges == model, per item, and the likers are the model's.
	for _, item := range itemIDs {
		rc, err := r.recount(ctx, item)
		if err != nil {
			t.Fatal(err)
		}
		if rc.Liked != want[item] || rc.Cells != want[item] {
			t.Errorf("%s: LIKED edges %d, Σ cells %d, model %d", item, rc.Liked, rc.Cells, want[item])
		}
		var page struct {
			UserIDs []string `json:"userIds"`
		}
		if err := c.getJSON(ctx, "/v1/items/"+item+"/likes?limit=500", &page); err != nil {
			t.Fatal(err)
		}
		slices.Sort(page.UserIDs)
		slices.Sort(likers[item])
		if !slices.Equal(page.UserIDs, likers[item]) {
			t.Errorf("%s: likers %v, model %v", item, page.UserIDs, likers[item])
		}
	}
	// Reconciliation through the admin endpoint (Cassandra's RecountItem and
	// Items; heal checks that the relay and the aggregators have no lag):
	// every item checked, none mismatched.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/admin/reconcile", strings.NewReader(`{"heal":true}`))
	req.Header.Set("Authorization", "Bearer "+adminTok)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep ReconcileReport
	if resp.StatusCode != 200 || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("reconcile: HTTP %d %s", resp.StatusCode, body)
	}
	if rep.Items < len(want) || len(rep.Mismatched) != 0 || rep.Healed != 0 {
		t.Errorf("reconcile: %s", body)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/admin/status", nil)
	req.Header.Set("Authorization", "Bearer "+adminTok)
	if resp, err = c.http.Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var st Status
	if resp.StatusCode != 200 || json.Unmarshal(body, &st) != nil || st.RelayLag == nil || *st.RelayLag != 0 ||
		st.AggregatorLag != 0 || !strings.Contains(st.Engines, "store="+engines.Store) {
		t.Errorf("status: HTTP %d %s", resp.StatusCode, body)
	}
	if etcd != nil {
		if st.PinsOwned != 16 || st.LastKeepaliveAgo == "" {
			t.Errorf("status on etcd: %d pins owned (want 16), last keepalive %q", st.PinsOwned, st.LastKeepaliveAgo)
		}
		leaseLoss(t, ctx, c, etcd, want)
	}
	var relayed, polled uint64
	for _, s := range r.Relay.Stats() {
		relayed += s.Events
	}
	for _, s := range r.aggStats() {
		polled += s.Events
	}
	t.Logf("converged: counts %v; last relay published %d events, last aggregator group folded %d, cell writes %d",
		want, relayed, polled, r.CellWrites())
}

// leaseLoss cuts the region's etcd link: within the lease TTL its writes fail
// closed (503 not_authoritative, nothing written); once the link heals they
// are accepted again, and the counts still equal the model (want gains the
// one like written after the heal).
func leaseLoss(t *testing.T, ctx context.Context, c *e2eClient, etcd *etcdLink, want map[string]int64) {
	t.Helper()
	const item = "lease-item"
	likeStatus := func(key string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/items/"+item+"/likes", nil)
		req.Header.Set("Authorization", "Bearer "+c.tokens["u00"])
		req.Header.Set("Idempotency-Key", key)
		resp, err := c.http.Do(req)
		if err != nil {
			return 0
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && !strings.Contains(string(body), "not_authoritative") {
			t.Errorf("503 without not_authoritative: %s", body)
		}
		return resp.StatusCode
	}
	unlike := op{item: item, user: "u00", key: "lease-unlike", like: false}
	etcd.proxy.SetMode(proxy.Mode{Kind: proxy.Blackhole})
	cut := time.Now()
	// Writes acknowledged before the proof expired are fine; undo them after.
	epochtest.Eventually(t, 3*etcd.cluster.Epoch.TTL+5*time.Second, "writes to fail closed after the etcd link is cut", func() bool {
		return likeStatus(fmt.Sprintf("lease-%d", time.Now().UnixNano())) == http.StatusServiceUnavailable
	})
	t.Logf("writes failed closed %v after the etcd link was cut", time.Since(cut).Round(10*time.Millisecond))
	etcd.proxy.SetMode(proxy.Mode{Kind: proxy.Pass})
	healed := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := c.do(ctx, unlike); err != nil {
		t.Fatal(err)
	}
	t.Logf("writes accepted again %v after the heal", time.Since(healed).Round(10*time.Millisecond))
	if _, err := c.do(ctx, op{item: item, user: "u01", key: "lease-after", like: true}); err != nil {
		t.Fatal(err)
	}
	want[item] = 1 // u00's likes were undone, u01's stays
	epochtest.Eventually(t, time.Minute, "the counts to equal the model after the heal", func() bool {
		for it, n := range want {
			var cnt struct {
				Count int64 `json:"count"`
			}
			if err := c.getJSON(ctx, "/v1/items/"+it+"/count", &cnt); err != nil || cnt.Count != n {
				return false
			}
		}
		return true
	})
}

// DeleteTopicsAtEnd deletes a test's log topic and its dead-letter topic
// from the real Kafka when the test ends.
func DeleteTopicsAtEnd(t testing.TB, brokers []string, topic string) {
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := kadm.NewClient(cl).DeleteTopics(ctx, topic, topic+".dlq"); err != nil {
			t.Logf("delete topics: %v", err)
		}
	})
}
