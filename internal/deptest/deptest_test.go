package deptest

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// rule forbids packages matching From (a path.Match pattern over the import
// path; a suffix /... matches the tree), except those matching Except, to
// depend, transitively, on anything matching one of Deny, unless the
// dependency matches Allow.
type rule struct {
	From   []string
	Except []string
	Deny   []string
	Allow  []string
	Reason string
}

var rules = []rule{
	{
		From: []string{"github.com/likes-dev/likes/crdt"}, Deny: []string{"github.com/likes-dev/likes/..."},
		Reason: "crdt is the merge laws: pure, imports nothing of ours",
	},
	{
		From: []string{"github.com/likes-dev/likes/edge"}, Deny: []string{"github.com/likes-dev/likes/..."}, Allow: []string{"github.com/likes-dev/likes/crdt", "github.com/likes-dev/likes/clock"},
		Reason: "edge is the write rule (Decide) and its contracts: only crdt and clock under it",
	},
	{
		From: []string{"github.com/likes-dev/likes/epoch"}, Deny: []string{"go.etcd.io/...", "google.golang.org/grpc/...", "github.com/likes-dev/likes/..."},
		Allow:  []string{"github.com/likes-dev/likes/edge", "github.com/likes-dev/likes/crdt", "github.com/likes-dev/likes/clock"},
		Reason: "epoch is the pure pin rule; its etcd implementation is epoch/etcdepoch",
	},
	{
		From: []string{"github.com/likes-dev/likes/store/...", "github.com/likes-dev/likes/stream/...", "github.com/likes-dev/likes/cache/...", "github.com/likes-dev/likes/replica"},
		Deny: []string{"google.golang.org/grpc/...", "github.com/hashicorp/memberlist/...", "go.etcd.io/etcd/server/...",
			"github.com/likes-dev/likes/replication/...", "github.com/likes-dev/likes/region/...", "github.com/likes-dev/likes/api/..."},
		Reason: "stores and streams implement contracts; the region-to-region plane and etcd's server are above them",
	},
	{
		From: []string{"github.com/likes-dev/likes/client"}, Deny: []string{"github.com/likes-dev/likes/..."}, Allow: []string{"github.com/likes-dev/likes/clock"},
		Reason: "client is imported by other teams' programs: the standard library and our clock only, never the server",
	},
	{
		From: []string{"github.com/likes-dev/likes/internal/clustermeta"}, Deny: []string{"go.etcd.io/...", "github.com/likes-dev/likes/..."},
		Reason: "cluster metadata is a pure codec and its checks; etcdepoch reads and writes it",
	},
	{
		From: []string{"github.com/likes-dev/likes/internal/backupfmt"}, Deny: []string{"github.com/likes-dev/likes/..."},
		Reason: "the backup stream is a codec read by likectl from a remote region: no store, no network, nothing of ours",
	},
	{
		From: []string{"github.com/likes-dev/likes/sim/..."}, Deny: []string{"go.etcd.io/...", "github.com/likes-dev/likes/epoch/etcdepoch/...", "github.com/likes-dev/likes/epoch/etcdembed/..."},
		Reason: "the simulation simulates etcd; it runs the pure pin rule, never an etcd server or client",
	},
	{
		From: []string{"github.com/likes-dev/likes/chaos/..."}, Deny: []string{"go.etcd.io/etcd/server/...", "github.com/likes-dev/likes/epoch/etcdembed/..."},
		Reason: "chaos drives likesd processes (their etcd is `likesd etcd`); it links only the etcd client",
	},
	{
		From: []string{"github.com/likes-dev/likes/..."},
		Deny: []string{"github.com/likes-dev/likes/store/...", "github.com/likes-dev/likes/stream/...", "github.com/likes-dev/likes/cache/inproc/...", "github.com/likes-dev/likes/cache/rediscache/...", "github.com/likes-dev/likes/epoch/etcdepoch/...", "github.com/likes-dev/likes/epoch/etcdembed/..."},
		Except: []string{"github.com/likes-dev/likes/region/...", "github.com/likes-dev/likes/cmd/...", "github.com/likes-dev/likes/chaos/...", "github.com/likes-dev/likes/sim/...", "github.com/likes-dev/likes/store/...", "github.com/likes-dev/likes/stream/...",
			"github.com/likes-dev/likes/epoch/...", "github.com/likes-dev/likes/cache/..."},
		Reason: "only region and the commands wire backends (chaos and the simulation drive them as harnesses; test suites sit beside their contracts)",
	},
}

// match reports whether import path p matches pattern pat ("x/..." matches x
// and everything under it).
func match(pat, p string) bool {
	if base, ok := strings.CutSuffix(pat, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	ok, _ := path.Match(pat, p)
	return ok
}

func matchAny(pats []string, p string) bool {
	for _, pat := range pats {
		if match(pat, p) {
			return true
		}
	}
	return false
}

// deps lists every package of the module with its transitive imports.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Deps \",\"}}", "github.com/likes-dev/likes/...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, ds, _ := strings.Cut(line, "|")
		if ds != "" {
			m[pkg] = strings.Split(ds, ",")
		} else {
			m[pkg] = nil
		}
	}
	return m
}

// TestLayers fails on any forbidden dependency.
func TestLayers(t *testing.T) {
	all := deps(t)
	if len(all) < 20 {
		t.Fatalf("go list found only %d packages", len(all))
	}
	for _, r := range rules {
		for pkg, ds := range all {
			if !matchAny(r.From, pkg) || matchAny(r.Except, pkg) {
				continue
			}
			for _, d := range ds {
				if matchAny(r.Deny, d) && !matchAny(r.Allow, d) && d != pkg {
					t.Errorf("%s depends on %s: %s", pkg, d, r.Reason)
					break // one per package and rule: `go list -deps` shows the rest
				}
			}
		}
	}
}

// TestRulesBite: each rule matches a package and the matcher is right, so a
// rule cannot silently stop applying after a rename.
func TestRulesBite(t *testing.T) {
	all := deps(t)
	for _, r := range rules {
		found := false
		for pkg := range all {
			found = found || matchAny(r.From, pkg)
		}
		if !found {
			t.Errorf("rule %q matches no package", r.Reason)
		}
	}
	for _, c := range []struct {
		pat, p string
		want   bool
	}{
		{"github.com/likes-dev/likes/store/...", "github.com/likes-dev/likes/store", true},
		{"github.com/likes-dev/likes/store/...", "github.com/likes-dev/likes/store/pebblestore", true},
		{"github.com/likes-dev/likes/store/...", "github.com/likes-dev/likes/storex", false},
		{"github.com/likes-dev/likes/edge", "github.com/likes-dev/likes/edge/edgetest", false},
	} {
		if got := match(c.pat, c.p); got != c.want {
			t.Errorf("match(%q, %q) = %v", c.pat, c.p, got)
		}
	}
}
