package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const runbookDir = "../../docs/runbooks"

// alertRunbooks is the alert → runbook mapping of monitoring/alerts.yaml.
var alertRunbooks = map[string]string{
	"LikesWriteAvailabilityBurnFast": "write-slo.md",
	"LikesWriteAvailabilityBurnSlow": "write-slo.md",
	"LikesWriteLatencyBurnFast":      "write-slo.md",
	"LikesWriteLatencyBurnSlow":      "write-slo.md",
	"LikesStalenessHigh":             "staleness.md",
	"LikesReplicationLagHigh":        "replication-lag.md",
	"LikesConsumerLagHigh":           "replication-lag.md",
	"LikesReconcileMismatch":         "counter-rebuild.md",
	"LikesDLQNotEmpty":               "dlq.md",
	"LikesLeaseLost":                 "region-failover.md",
	"LikesPinsCatchingUpTooLong":     "pin-move.md",
	"LikesStorageUnavailable":        "disk-loss-restore.md",
	"LikesEtcdUnavailable":           "etcd-quorum-loss.md",
	"LikesHotItem":                   "bucket-growth.md",
	"LikesWatchdog":                  "watchdog.md",
}

// pendingLikectl are likectl commands being added: backup and restore (issue 14).
var pendingLikectl = []string{"backup", "restore"}

// knownMetrics are the likes_* names in the repository's non-test Go source
// and monitoring rules.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`likes_[a-z_]+`)
	known := map[string]bool{}
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "docs" || d.Name() == "likes-data") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(p, "_test.go") || !(strings.HasSuffix(p, ".go") || strings.HasPrefix(p, "../../monitoring/")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllString(string(b), -1) {
			known[m] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return known
}

// TestRunbooks: every alert has its page, listed in the index; every page has
// symptoms, the alert, diagnosis, fix and verification, names the alerts that
// send there, and names only metrics that exist and likectl commands that
// exist.
func TestRunbooks(t *testing.T) {
	index, err := os.ReadFile(filepath.Join(runbookDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	known := knownMetrics(t)
	ctl := likectlCommands(t)
	pages := map[string]bool{}
	for alert, page := range alertRunbooks {
		pages[page] = true
		row := "| " + alert + " | [" + page + "](" + page + ") |"
		if !strings.Contains(string(index), row) {
			t.Errorf("the runbook index has no row %q", row)
		}
		b, err := os.ReadFile(filepath.Join(runbookDir, page))
		if err != nil {
			t.Errorf("alert %s: %v", alert, err)
			continue
		}
		if !strings.Contains(string(b), "**"+alert+"**") {
			t.Errorf("%s does not name the alert %s that sends there", page, alert)
		}
	}
	for _, extra := range []string{"pin-move.md", "region-failover.md", "counter-rebuild.md", "dlq.md", "disk-loss-restore.md", "etcd-quorum-loss.md", "bucket-growth.md", "region-add-retire.md"} {
		pages[extra] = true
	}
	metric := regexp.MustCompile(`likes_[a-z_]+`)
	likectlCmd := regexp.MustCompile("likectl ([a-z-]+)")
	for page := range pages {
		b, err := os.ReadFile(filepath.Join(runbookDir, page))
		if err != nil {
			t.Error(err)
			continue
		}
		s := string(b)
		for _, sec := range []string{"## Symptoms", "## Alert", "## Diagnosis", "## Fix", "## Verify"} {
			if !strings.Contains(s, sec) {
				t.Errorf("%s has no %q section", page, sec)
			}
		}
		for _, m := range metric.FindAllString(s, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
			if !known[m] && !known[base] && !strings.HasPrefix(m, "likes_test") {
				t.Errorf("%s names the metric %s, which nothing exports", page, m)
			}
		}
		for _, c := range likectlCmd.FindAllStringSubmatch(s, -1) {
			cmd := c[1]
			if !ctl[cmd] && !contains(pendingLikectl, cmd) {
				t.Errorf("%s runs `likectl %s`, which likectl does not have", page, cmd)
			}
		}
	}
}

// likectlCommands are the command names likectl registers (name: "pins",
// or a dispatch case "pins":), read from its source.
func likectlCommands(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../likectl/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("likectl sources: %v", err)
	}
	re := regexp.MustCompile(`(?:name:\s*|case )"([a-z][a-z-]*)"`)
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestRunbooksMatchAlerts: every alert of monitoring/alerts.yaml points at
// the runbook this mapping (and the index) gives it, and every alert of the
// mapping is defined there.
func TestRunbooksMatchAlerts(t *testing.T) {
	b, err := os.ReadFile("../../monitoring/alerts.yaml")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no monitoring/alerts.yaml in this tree")
	}
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			seen[r.Alert] = true
			want, ok := alertRunbooks[r.Alert]
			if got := r.Annotations["runbook_url"]; !ok || !strings.HasSuffix(got, "docs/runbooks/"+want) {
				t.Errorf("alert %s: runbook_url %q, the runbook index says %q", r.Alert, got, want)
			}
		}
	}
	for a := range alertRunbooks {
		if !seen[a] {
			t.Errorf("alert %s has a runbook but no rule in monitoring/alerts.yaml", a)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
