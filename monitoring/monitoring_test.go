package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"sigs.k8s.io/yaml"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/region"
)

var secret = []byte("monitoring-test-secret")

// runbooks are the alerts and their runbooks (relative to the repository).
var runbooks = map[string]string{
	"LikesWriteAvailabilityBurnFast": "docs/runbooks/write-slo.md",
	"LikesWriteAvailabilityBurnSlow": "docs/runbooks/write-slo.md",
	"LikesWriteLatencyBurnFast":      "docs/runbooks/write-slo.md",
	"LikesWriteLatencyBurnSlow":      "docs/runbooks/write-slo.md",
	"LikesStalenessHigh":             "docs/runbooks/staleness.md",
	"LikesReplicationLagHigh":        "docs/runbooks/replication-lag.md",
	"LikesConsumerLagHigh":           "docs/runbooks/replication-lag.md",
	"LikesReconcileMismatch":         "docs/runbooks/counter-rebuild.md",
	"LikesDLQNotEmpty":               "docs/runbooks/dlq.md",
	"LikesLeaseLost":                 "docs/runbooks/region-failover.md",
	"LikesPinsCatchingUpTooLong":     "docs/runbooks/pin-move.md",
	"LikesStorageUnavailable":        "docs/runbooks/disk-loss-restore.md",
	"LikesEtcdUnavailable":           "docs/runbooks/etcd-quorum-loss.md",
	"LikesHotItem":                   "docs/runbooks/bucket-growth.md",
	"LikesWatchdog":                  "docs/runbooks/watchdog.md",
}

// ruleFile is the part of a Prometheus rule file the test reads.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	return rf
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// Metric names are found in PromQL with a small lexer rather than the
// Prometheus parser (a very large module for a test): Grafana's variables
// become a duration, then string literals, label matchers {…}, ranges […]
// and grouping clauses (by, without, on, ignoring, group_left, group_right
// with their label lists) are cut out; what remains are identifiers, which
// are metric names unless they are a function (followed by "("), a keyword
// or operator word, or part of a number or duration (preceded by a digit).
var (
	grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$__[a-z_]+|\$[A-Za-z_]+`)
	strLit     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	matchers   = regexp.MustCompile(`\{[^{}]*\}`)
	ranges     = regexp.MustCompile(`\[[^\[\]]*\]`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	ident      = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords   = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true,
	}
)

// metricNames returns the metric names a PromQL expression reads.
func metricNames(expr string) []string {
	s := grafanaVar.ReplaceAllString(expr, "5m")
	s = strLit.ReplaceAllString(s, `""`)
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // 1e-3, 5m
		}
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || keywords[strings.ToLower(name)] {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNamesLexer(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (le) (rate(likes_write_duration_seconds_bucket{op=~"like|unlike",le="0.15"}[$__rate_interval])))`: "likes_write_duration_seconds_bucket",
		`1 - sum(increase(a_total{x="y"}[30d])) / sum(increase(b_total[30d])) / 0.0005`:                                                    "a_total b_total",
		`likes:write_errors:ratio_rate1h > (14.4 * 0.0005) and likes:write_errors:ratio_rate5m > 1e-3`:                                     "likes:write_errors:ratio_rate1h likes:write_errors:ratio_rate5m",
		`count(up == 0) / count(up) > 0.5 or vector(1) unless on(instance) foo offset 5m`:                                                  "up up foo",
		`max by (instance, peer) (lag_seconds) > 30`:                                                                                       "lag_seconds",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// TestRulesAndRunbooks: every alert of the issue is there, with its runbook
// link relative to the repository.
func TestRulesAndRunbooks(t *testing.T) {
	rf := loadRules(t)
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			seen[r.Alert] = true
			want, ok := runbooks[r.Alert]
			if !ok {
				t.Errorf("alert %s has no runbook in this test's list", r.Alert)
				continue
			}
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
		}
	}
	for a := range runbooks {
		if !seen[a] {
			t.Errorf("alert %s is missing from alerts.yaml", a)
		}
	}
	// Once the runbooks are in the repository, every link must name one.
	if _, err := os.Stat("../docs/runbooks"); err == nil {
		for a, rb := range runbooks {
			if _, err := os.Stat("../" + rb); err != nil {
				t.Errorf("alert %s links %s: %v", a, rb, err)
			}
		}
	}
}

// TestQueriesUseExportedMetrics starts two regions, makes a few writes and
// reads, scrapes both registries and checks every metric name read by an
// alert or a dashboard panel.
func TestQueriesUseExportedMetrics(t *testing.T) {
	exported := scrapeRegions(t)
	rf := loadRules(t)
	d := loadDashboard(t)

	known := map[string]bool{}
	for n := range exported {
		known[n] = true
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	var qs []query
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: "alerts.yaml " + r.Record + r.Alert, expr: r.Expr})
		}
	}
	panels := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, query{where: "dashboard panel " + p.Title, expr: tg.Expr})
		}
	}
	if panels < 10 {
		t.Fatalf("the dashboard has %d panels", panels)
	}
	used := 0
	for _, q := range qs {
		names := metricNames(q.expr)
		if len(names) == 0 && !strings.Contains(q.expr, "vector(") {
			t.Errorf("%s: no metric name found in %q", q.where, q.expr)
		}
		for _, n := range names {
			used++
			if !known[n] {
				t.Errorf("%s reads %s, which no region exports", q.where, n)
			}
		}
	}
	t.Logf("%d queries, %d metric reads, %d names exported", len(qs), used, len(exported))
}

// scrapeRegions runs regions us and eu (embedded etcd, plaintext peers)
// and a region "solo" on the Kafka log (an in-process fake Kafka), writes
// and reads through their HTTP APIs until every series a panel needs
// has a sample, and returns the metric names they export, histograms and
// summaries expanded with their series suffixes.
func scrapeRegions(t *testing.T) map[string]bool {
	t.Helper()
	e := epochtest.StartEmbedded(t)
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ecfg := epochtest.Config(t, 8)
	names := []string{"us", "eu"}
	data := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var regions []*region.Region
	var srvs []*httptest.Server
	var seeds []string
	for _, name := range names {
		r, err := region.Open(context.Background(), region.Config{
			Name: name, DataDir: data, Partitions: 4, Window: 20 * time.Millisecond, Secret: secret, UserRate: -1,
			MinFreeBytes: 1, ReconcileRate: 50, Logger: logger,
			Cluster: &region.Cluster{
				Etcd: cli, Epoch: ecfg, Regions: names, GRPCListen: "127.0.0.1:0",
				GossipBind: "127.0.0.1", Seeds: seeds, AntiEntropy: 200 * time.Millisecond,
			},
		})
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		srv := httptest.NewServer(r.API)
		t.Cleanup(func() { srv.Close(); _ = r.Close() })
		if seeds == nil {
			seeds = []string{r.GossipAddr()}
		}
		regions, srvs = append(regions, r), append(srvs, srv)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	solo, err := region.Open(context.Background(), region.Config{
		Name: "solo", DataDir: data, Partitions: 4, Window: 20 * time.Millisecond, Secret: secret, UserRate: -1,
		MinFreeBytes: 1, ReconcileRate: 50, Logger: logger,
		Engines: region.Engines{Log: region.LogKafka, Kafka: region.KafkaEngine{Brokers: kc.ListenAddrs()}},
	})
	if err != nil {
		t.Fatalf("open solo: %v", err)
	}
	soloSrv := httptest.NewServer(solo.API)
	t.Cleanup(func() { soloSrv.Close(); _ = solo.Close() })
	regions, srvs = append(regions, solo), append(srvs, soloSrv)
	clusterOnly := map[string]bool{
		"likes_replication_lag_seconds": true, "likes_replication_lag_events": true, "grpc_server_handled_total": true,
		"grpc_client_handling_seconds": true, "likes_lease_age_seconds": true,
	}
	kafkaOnly := []string{"likes_relay_lag_events", "likes_relay_lag_seconds", "likes_kafka_produced_records_total", "likes_kafka_broker_read_bytes_total", "likes_kafka_log_fetches_total"}
	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(srv *httptest.Server, method, path, user string, body string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if user != "" {
			tok, err := auth.Sign(secret, user, false, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%s-%d", method, path, time.Now().UnixNano()))
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := hc.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	// Wanted: series that appear only once something happened.
	wanted := []string{
		"likes_write_duration_seconds", "likes_write_outcomes_total", "likes_count_staleness_seconds",
		"likes_replication_lag_seconds", "likes_replication_lag_events", "grpc_server_handled_total",
		"grpc_client_handling_seconds", "likes_region_watermark_age_seconds", "likes_lease_age_seconds",
		"likes_storage_free_bytes", "likes_aggregator_lag_seconds",
	}
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		for i, srv := range srvs {
			item := fmt.Sprintf("item-%d", round%3)
			do(srv, http.MethodPost, "/v1/items/"+item+"/likes", fmt.Sprintf("user-%d-%d", i, round), "")
			do(srv, http.MethodGet, "/v1/items/"+item+"/count", "", "")
			do(srv, http.MethodPost, "/v1/likes:batchGet", "", `{"itemIds":["item-0","item-1"]}`)
		}
		missing := []string{}
		for _, r := range regions {
			got := gathered(t, r.Registry)
			want := wanted
			if r == solo {
				want = kafkaOnly
				for _, w := range wanted {
					if !clusterOnly[w] {
						want = append(want, w)
					}
				}
			}
			for _, w := range want {
				if _, ok := got[w]; !ok {
					missing = append(missing, r.Name()+":"+w)
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series never appeared: %v", missing)
		}
		time.Sleep(50 * time.Millisecond) // poll (bounded by the deadline)
	}
	out := map[string]bool{}
	for _, r := range regions {
		for name, typ := range gathered(t, r.Registry) {
			out[name] = true
			switch typ {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				out[name+"_sum"], out[name+"_count"] = true, true
			}
		}
	}
	return out
}

// gathered is the names and types of the metric families with samples.
func gathered(t *testing.T, g prometheus.Gatherer) map[string]dto.MetricType {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]dto.MetricType{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) > 0 {
			out[mf.GetName()] = mf.GetType()
		}
	}
	return out
}
