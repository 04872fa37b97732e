package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/likes-dev/likes/region"
)

// The deployment files (deploy/) are checked against likesd itself: every
// flag, config key and LIKES_* variable they use exists for the command they
// run, their probes hit endpoints a real region serves, and every grace
// period exceeds the graceful stop it must wait for.

const deployDir = "../../deploy"

// unitFile is a parsed systemd unit: section → key → values (in order).
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" || strings.HasSuffix(line, "\\") {
			t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
		}
		u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unitFile) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// systemdSeconds parses a systemd time span such as 60s, 2min or 90.
func systemdSeconds(t *testing.T, v string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(strings.ReplaceAll(v, "min", "m"))
	if err != nil {
		t.Fatalf("time span %q: %v", v, err)
	}
	return d
}

// checkedCommand parses a likesd command line (args after the binary) with
// the command's own flag set, the config file it names read from local
// (the deploy/ copy of the file) and env applied as the deployment does. It
// returns the flag set with every value set.
func checkedCommand(t *testing.T, where string, args []string, local func(string) string, env map[string]string) *flag.FlagSet {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("%s: no likesd command", where)
	}
	var fs *flag.FlagSet
	for _, f := range commandFlagSets() {
		if f.Name() == "likesd "+args[0] {
			fs = f
		}
	}
	if fs == nil {
		t.Fatalf("%s: likesd has no command %q", where, args[0])
	}
	rest := slices.Clone(args[1:])
	for i := range rest {
		if rest[i] == "--config" && i+1 < len(rest) {
			rest[i+1] = local(rest[i+1])
		} else if v, ok := strings.CutPrefix(rest[i], "--config="); ok {
			rest[i] = "--config=" + local(v)
		}
	}
	clearLikesEnv(t)
	for k, v := range env {
		if _, ok := reservedEnv[k]; !ok && !isReservedEnv(k) && fs.Lookup(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, envPrefix), "_", "-"))) == nil {
			t.Errorf("%s: $%s is neither a flag of %s nor a variable likesd reads", where, k, fs.Name())
		}
		t.Setenv(k, v)
	}
	if err := parseCommand(fs, rest, io.Discard, ""); err != nil {
		t.Errorf("%s: %s %s: %v", where, fs.Name(), strings.Join(rest, " "), err)
	}
	clearLikesEnv(t)
	return fs
}

func flagDuration(t *testing.T, fs *flag.FlagSet, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(fs.Lookup(name).Value.String())
	if err != nil {
		t.Fatalf("--%s: %v", name, err)
	}
	return d
}

// stopBudget is the longest a graceful stop of `likesd run` takes: the
// hand-off, then the HTTP drain.
func stopBudget(t *testing.T, fs *flag.FlagSet) time.Duration {
	if fs.Lookup("drain-timeout") == nil {
		return httpShutdownTimeout
	}
	return flagDuration(t, fs, "drain-timeout") + httpShutdownTimeout
}

// TestDeploySystemd: each unit runs a likesd command whose flags and config
// keys exist, with the hardening a region needs, and a stop timeout longer
// than the graceful stop.
func TestDeploySystemd(t *testing.T) {
	dir := filepath.Join(deployDir, "systemd")
	units, _ := filepath.Glob(filepath.Join(dir, "*.service"))
	if len(units) < 2 {
		t.Fatalf("want a unit per role in %s, found %v", dir, units)
	}
	roles := map[string]bool{}
	for _, path := range units {
		u := parseUnit(t, path)
		exec := strings.Fields(u.get("Service", "ExecStart"))
		if len(exec) < 2 || filepath.Base(exec[0]) != "likesd" {
			t.Fatalf("%s: ExecStart %v does not run likesd", path, exec)
		}
		roles[exec[1]] = true
		env := map[string]string{}
		if ef := u.get("Service", "EnvironmentFile"); ef != "" {
			example := filepath.Join(dir, filepath.Base(ef)+".example")
			b, err := os.ReadFile(example)
			if err != nil {
				t.Fatalf("%s: EnvironmentFile %s has no example in deploy/systemd: %v", path, ef, err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				line = strings.TrimPrefix(strings.TrimSpace(line), "#")
				if k, _, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, envPrefix) {
					if r, ok := reservedEnv[k]; !ok || !r.secret {
						t.Errorf("%s: %s sets %s, which is not a secret: put settings in the config file", example, ef, k)
					}
				}
			}
		} else if exec[1] == "run" {
			t.Errorf("%s: a region unit needs an EnvironmentFile for its secrets", path)
		}
		fs := checkedCommand(t, path, exec[1:], func(p string) string { return filepath.Join(dir, filepath.Base(p)) }, env)

		want := map[string]string{"NoNewPrivileges": "yes", "Restart": "on-failure", "KillSignal": "SIGTERM"}
		for k, v := range want {
			if got := u.get("Service", k); got != v {
				t.Errorf("%s: %s=%q, want %q", path, k, got, v)
			}
		}
		if ps := u.get("Service", "ProtectSystem"); ps != "strict" && ps != "full" {
			t.Errorf("%s: ProtectSystem=%q", path, ps)
		}
		if user := u.get("Service", "User"); user == "" || user == "root" || user == "0" {
			t.Errorf("%s: User=%q: run as a dedicated user", path, user)
		}
		if n, err := strconv.Atoi(u.get("Service", "LimitNOFILE")); err != nil || n < 65536 {
			t.Errorf("%s: LimitNOFILE=%q, want at least 65536", path, u.get("Service", "LimitNOFILE"))
		}
		data := fs.Lookup("data").Value.String()
		if !slices.Contains(strings.Fields(u.get("Service", "ReadWritePaths")), data) {
			t.Errorf("%s: ReadWritePaths=%q does not hold the data folder %s", path, u.get("Service", "ReadWritePaths"), data)
		}
		if stop, need := systemdSeconds(t, u.get("Service", "TimeoutStopSec")), stopBudget(t, fs); stop <= need {
			t.Errorf("%s: TimeoutStopSec %v does not exceed the graceful stop (%v: --drain-timeout + the HTTP drain)", path, stop, need)
		}
	}
	if !roles["run"] || !roles["etcd"] {
		t.Errorf("units cover %v; want a region (likesd run) and an etcd (likesd etcd)", roles)
	}
	verifyUnits(t, units)
}

// verifyUnits runs systemd-analyze verify, when installed, on copies of the
// units whose binary and EnvironmentFile are replaced by ones that exist:
// it knows every directive and its syntax.
func verifyUnits(t *testing.T, units []string) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the units' directives are not verified")
		return
	}
	dir := t.TempDir()
	var copies []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "/usr/local/bin/likesd", "/bin/true")
		s = strings.ReplaceAll(s, "EnvironmentFile=/", "EnvironmentFile=-/")
		p := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, p)
	}
	out, err := exec.Command(tool, append([]string{"verify"}, copies...)...).CombinedOutput()
	for _, p := range copies {
		if strings.Contains(string(out), filepath.Base(p)) {
			t.Errorf("systemd-analyze verify: %s", out)
			return
		}
	}
	if err != nil {
		t.Logf("systemd-analyze verify could not run here (%v): %s", err, out)
	}
}

// yamlDocs decodes every YAML document of a file.
func yamlDocs(t *testing.T, b []byte, where string) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// at walks a decoded YAML value along keys (string: a map key, int: a list index).
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }
func str(v any) string { s, _ := v.(string); return s }

// TestDeployKubernetes: every YAML document under deploy/k8s parses; the
// kustomizations name files that exist; the StatefulSet runs likesd with
// flags, config keys (the ConfigMap's likes.yaml) and LIKES_* variables
// that exist, probes /readyz and /healthz on the HTTP port, has a volume for
// the data folder and a grace period longer than the graceful stop. When
// kubectl is installed each overlay is built and checked as applied: one
// StatefulSet per region, a PodDisruptionBudget, and a NetworkPolicy that
// opens the gRPC port only to the other regions.
func TestDeployKubernetes(t *testing.T) {
	root := filepath.Join(deployDir, "k8s")
	docs := map[string][]map[string]any{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		docs[p] = yamlDocs(t, b, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, ds := range docs {
		if filepath.Base(p) != "kustomization.yaml" {
			continue
		}
		k := ds[0]
		for _, r := range list(k["resources"]) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), str(r))); err != nil {
				t.Errorf("%s: resource %v: %v", p, r, err)
			}
		}
		for _, g := range list(k["configMapGenerator"]) {
			for _, f := range list(at(g, "files")) {
				if _, err := os.Stat(filepath.Join(filepath.Dir(p), str(f))); err != nil {
					t.Errorf("%s: configMapGenerator file %v: %v", p, f, err)
				}
			}
		}
	}
	for _, r := range []string{"us", "eu", "ap"} {
		if _, ok := docs[filepath.Join(root, "overlays", r, "kustomization.yaml")]; !ok {
			t.Errorf("no overlay for region %s", r)
		}
	}
	base := filepath.Join(root, "base")
	checkStatefulSet(t, docs[filepath.Join(base, "statefulset.yaml")], base, map[string]string{"LIKES_REGION": "us"})

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl is not installed: the overlays are not built")
		return
	}
	for _, r := range []string{"us", "eu", "ap"} {
		var out, errb bytes.Buffer
		cmd := exec.Command(kubectl, "kustomize", filepath.Join(root, "overlays", r))
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Errorf("kubectl kustomize overlays/%s: %v: %s", r, err, errb.String())
			continue
		}
		built := yamlDocs(t, out.Bytes(), "overlays/"+r)
		checkBuiltRegion(t, r, built)
	}
}

// checkStatefulSet checks the likesd container of the StatefulSet in docs
// (files relative to dir); extraEnv stands for what an overlay adds.
func checkStatefulSet(t *testing.T, docs []map[string]any, dir string, extraEnv map[string]string) {
	t.Helper()
	var sts map[string]any
	for _, d := range docs {
		if d["kind"] == "StatefulSet" {
			sts = d
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet")
	}
	spec := at(sts, "spec", "template", "spec")
	var c any
	for _, x := range list(at(spec, "containers")) {
		if str(at(x, "name")) == "likesd" {
			c = x
		}
	}
	if c == nil {
		t.Fatal("the StatefulSet has no likesd container")
	}
	var args []string
	for _, a := range list(at(c, "args")) {
		args = append(args, str(a))
	}
	env := map[string]string{}
	for _, e := range list(at(c, "env")) {
		name := str(at(e, "name"))
		if !strings.HasPrefix(name, envPrefix) {
			continue
		}
		v := str(at(e, "value"))
		if at(e, "valueFrom", "secretKeyRef") != nil {
			if r, ok := reservedEnv[name]; !ok || !r.secret {
				t.Errorf("$%s comes from a Secret but is not a secret likesd reads", name)
			}
			continue
		}
		env[name] = strings.ReplaceAll(v, "$(POD_IP)", "10.0.0.1")
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	// The config file is the ConfigMap generated from dir/likes.yaml, mounted
	// at the folder --config names.
	fs := checkedCommand(t, "StatefulSet likesd", args, func(p string) string { return filepath.Join(dir, filepath.Base(p)) }, env)

	mounts := map[string]string{}
	for _, m := range list(at(c, "volumeMounts")) {
		mounts[str(at(m, "name"))] = str(at(m, "mountPath"))
	}
	cfg := ""
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			cfg = args[i+1]
		}
	}
	if filepath.Dir(cfg) != mounts["config"] {
		t.Errorf("--config %s is not in the config volume's mount %s", cfg, mounts["config"])
	}
	data := fs.Lookup("data").Value.String()
	var claims []string
	for _, v := range list(at(sts, "spec", "volumeClaimTemplates")) {
		claims = append(claims, str(at(v, "metadata", "name")))
	}
	if mounts["data"] != data || !slices.Contains(claims, "data") {
		t.Errorf("data folder %s: mounted %q, claims %v; want a PersistentVolumeClaim mounted there", data, mounts["data"], claims)
	}

	// Probes: the HTTP port's name, on the port --http listens on, and paths
	// a real region serves with the answer the probe wants.
	_, httpPort, err := splitPort("http", fs.Lookup("http").Value.String())
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, p := range list(at(c, "ports")) {
		n, _ := at(p, "containerPort").(int)
		ports[str(at(p, "name"))] = n
	}
	probes := map[string]string{}
	for _, kind := range []string{"readinessProbe", "livenessProbe", "startupProbe"} {
		p := at(c, kind, "httpGet")
		if p == nil {
			if kind != "startupProbe" {
				t.Errorf("%s is not an httpGet probe", kind)
			}
			continue
		}
		probes[kind] = str(at(p, "path"))
		port := at(p, "port")
		if s, ok := port.(string); ok {
			port = ports[s]
		}
		if port != httpPort {
			t.Errorf("%s on port %v, likesd serves HTTP on %d", kind, at(p, "port"), httpPort)
		}
	}
	if probes["readinessProbe"] != "/readyz" || probes["livenessProbe"] != "/healthz" {
		t.Errorf("probes %v: readiness must be /readyz, liveness /healthz (a liveness on /readyz would restart a region that is only catching up)", probes)
	}
	checkProbePaths(t, probes)
	for _, name := range []string{"grpc", "gossip"} {
		_, p, err := splitPort(name, fs.Lookup(name).Value.String())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range ports {
			found = found || n == p
		}
		if !found {
			t.Errorf("--%s port %d is not a containerPort (%v)", name, p, ports)
		}
	}

	grace, _ := at(spec, "terminationGracePeriodSeconds").(int)
	if need := stopBudget(t, fs); time.Duration(grace)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d does not exceed the graceful stop %v (--drain-timeout + the HTTP drain)", grace, need)
	}
	if at(spec, "securityContext", "runAsNonRoot") != true {
		t.Error("the pod does not run as non-root")
	}
}

// checkProbePaths serves a real standalone region and asks it each probe's
// path: liveness must answer 200, readiness 200 when the region is ready.
func checkProbePaths(t *testing.T, probes map[string]string) {
	t.Helper()
	clearLikesEnv(t)
	t.Setenv("LIKES_AUTH_SECRET", testSecret)
	rc := newRunCmd()
	if err := parseCommand(rc.fs, []string{"--region", "us", "--data", t.TempDir(), "--partitions", "2"}, io.Discard, ""); err != nil {
		t.Fatal(err)
	}
	p, err := rc.plan(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := region.Open(context.Background(), p.rc)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	srv := httptest.NewServer(r.API)
	defer srv.Close()
	for kind, path := range probes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			if resp.StatusCode == http.StatusNotFound || time.Now().After(deadline) {
				t.Errorf("%s %s: a ready region answers %d", kind, path, resp.StatusCode)
				break
			}
			time.Sleep(20 * time.Millisecond) // polling the probe, as the kubelet does
		}
	}
}

// checkBuiltRegion checks one overlay as kubectl would apply it.
func checkBuiltRegion(t *testing.T, r string, docs []map[string]any) {
	t.Helper()
	kinds := map[string][]map[string]any{}
	for _, d := range docs {
		kinds[str(d["kind"])] = append(kinds[str(d["kind"])], d)
	}
	if n := len(kinds["StatefulSet"]); n != 1 {
		t.Fatalf("overlay %s: %d StatefulSets, want 1", r, n)
	}
	sts := kinds["StatefulSet"][0]
	podLabels, _ := at(sts, "spec", "template", "metadata", "labels").(map[string]any)
	if podLabels["likes.dev/region"] != r {
		t.Errorf("overlay %s: pods labelled %v", r, podLabels)
	}
	env := map[string]string{}
	for _, e := range list(at(sts, "spec", "template", "spec", "containers", 0, "env")) {
		env[str(at(e, "name"))] = str(at(e, "value"))
	}
	if env["LIKES_REGION"] != r {
		t.Errorf("overlay %s: LIKES_REGION=%q", r, env["LIKES_REGION"])
	}
	// The built container as it would start: its args, its literal LIKES_*
	// variables and the generated ConfigMap's likes.yaml.
	var cfgText string
	for _, cm := range kinds["ConfigMap"] {
		if v := str(at(cm, "data", "likes.yaml")); v != "" {
			cfgText = v
		}
	}
	if cfgText == "" {
		t.Fatalf("overlay %s: no ConfigMap carries likes.yaml", r)
	}
	cfgFile := writeFile(t, "likes.yaml", cfgText)
	var args []string
	for _, a := range list(at(sts, "spec", "template", "spec", "containers", 0, "args")) {
		args = append(args, str(a))
	}
	literal := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, envPrefix) && v != "" {
			literal[k] = strings.ReplaceAll(v, "$(POD_IP)", "10.0.0.1")
		}
	}
	fs := checkedCommand(t, "overlay "+r, args, func(string) string { return cfgFile }, literal)
	if got := fs.Lookup("region").Value.String(); got != r {
		t.Errorf("overlay %s: the region starts as %q", r, got)
	}
	p := planDeployed(t, "overlay "+r, args, cfgFile, literal)
	if cl := p.rc.Cluster; cl == nil || cl.GRPCAdvertise != "10.0.0.1:9080" || cl.GossipAdvertise != "10.0.0.1:7946" || p.httpAdvertise != "http://10.0.0.1:8080" {
		t.Errorf("overlay %s: advertises http %q, cluster %+v; want the pod's IP", r, p.httpAdvertise, cl)
	}
	selects := func(sel any) bool {
		m, _ := at(sel, "matchLabels").(map[string]any)
		for k, v := range m {
			if podLabels[k] != v {
				return false
			}
		}
		return len(m) > 0
	}
	if len(kinds["PodDisruptionBudget"]) != 1 || !selects(at(kinds["PodDisruptionBudget"][0], "spec", "selector")) {
		t.Errorf("overlay %s: want one PodDisruptionBudget selecting the region's pods", r)
	}
	secrets := map[string]bool{}
	for _, s := range kinds["Secret"] {
		secrets[str(at(s, "metadata", "name"))] = true
	}
	for _, e := range list(at(sts, "spec", "template", "spec", "containers", 0, "env")) {
		if n := str(at(e, "valueFrom", "secretKeyRef", "name")); n != "" && !secrets[n] {
			t.Errorf("overlay %s: env %s reads Secret %s, which the overlay does not define", r, str(at(e, "name")), n)
		}
	}
	for _, v := range list(at(sts, "spec", "template", "spec", "volumes")) {
		if n := str(at(v, "secret", "secretName")); n != "" && !secrets[n] {
			t.Errorf("overlay %s: volume %s mounts Secret %s, which the overlay does not define", r, str(at(v, "name")), n)
		}
		if n := str(at(v, "configMap", "name")); n != "" {
			found := false
			for _, cm := range kinds["ConfigMap"] {
				found = found || str(at(cm, "metadata", "name")) == n
			}
			if !found {
				t.Errorf("overlay %s: volume %s mounts ConfigMap %s, which the overlay does not define", r, str(at(v, "name")), n)
			}
		}
	}
	if len(kinds["NetworkPolicy"]) != 1 {
		t.Fatalf("overlay %s: want one NetworkPolicy", r)
	}
	np := kinds["NetworkPolicy"][0]
	if !selects(at(np, "spec", "podSelector")) {
		t.Errorf("overlay %s: the NetworkPolicy does not select the region's pods", r)
	}
	for _, rule := range list(at(np, "spec", "ingress")) {
		var ports []int
		for _, p := range list(at(rule, "ports")) {
			n, _ := at(p, "port").(int)
			ports = append(ports, n)
		}
		from := list(at(rule, "from"))
		if len(from) == 0 {
			t.Errorf("overlay %s: an ingress rule for ports %v is open to everyone", r, ports)
		}
		if !slices.Contains(ports, 9080) {
			if slices.Contains(ports, 8080) {
				for _, f := range from {
					if at(f, "namespaceSelector") == nil {
						t.Errorf("overlay %s: HTTP is open beyond the ingress and monitoring namespaces: %v", r, f)
					}
				}
			}
			continue
		}
		for _, f := range from {
			if at(f, "ipBlock") != nil {
				continue
			}
			ok := false
			for _, ex := range list(at(f, "podSelector", "matchExpressions")) {
				if str(at(ex, "key")) != "likes.dev/region" || str(at(ex, "operator")) != "In" {
					continue
				}
				var vals []string
				for _, v := range list(at(ex, "values")) {
					vals = append(vals, str(v))
				}
				ok = len(vals) == 2 && !slices.Contains(vals, r) && !slices.Contains(vals, "OTHER-REGIONS")
			}
			if !ok {
				t.Errorf("overlay %s: the gRPC port is open to %v, want only the other regions' pods", r, f)
			}
		}
	}
}

// TestDeployDockerfile: a multi-stage build of a static binary that runs as
// a non-root user and checks `likesd version` (not built here: no engine).
func TestDeployDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	froms := regexp.MustCompile(`(?m)^FROM `).FindAllStringIndex(s, -1)
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindStringSubmatch(s)
	switch {
	case len(froms) < 2:
		t.Error("not a multi-stage build")
	case !strings.Contains(s, "CGO_ENABLED=0"):
		t.Error("the binary is not static (CGO_ENABLED=0)")
	case user == nil || strings.HasPrefix(user[1], "0") || strings.HasPrefix(user[1], "root"):
		t.Errorf("USER %v: run as non-root", user)
	case !strings.Contains(s, "likesd version"):
		t.Error("the build does not check `likesd version`")
	case !strings.Contains(s, `ENTRYPOINT ["/usr/local/bin/likesd"]`):
		t.Error("the entrypoint is not likesd")
	}
	for _, want := range []string{"./cmd/likesd", "./cmd/likectl"} {
		if !strings.Contains(s, want) {
			t.Errorf("the image does not build %s", want)
		}
	}
}

// planDeployed plans `likesd run` as a deployment file starts it (args, its
// config file at cfgFile, its literal LIKES_* variables), with the key
// material it names replaced by generated files of the same kind: every
// check of the plan runs (advertised addresses on 0.0.0.0 listeners, peer
// TLS matching the region, durations), nothing listens.
func planDeployed(t *testing.T, where string, args []string, cfgFile string, env map[string]string) *runPlan {
	t.Helper()
	dir := t.TempDir()
	if _, _, err := devPeerSecurity(dir, []string{"us", "eu", "ap"}); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "certs")
	rc := newRunCmd()
	if args[0] != "run" {
		t.Fatalf("%s: %v is not likesd run", where, args)
	}
	rest := slices.Clone(args[1:])
	for i := range rest {
		if rest[i] == "--config" && i+1 < len(rest) {
			rest[i+1] = cfgFile
		}
	}
	clearLikesEnv(t)
	defer clearLikesEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv("LIKES_AUTH_SECRET", testSecret)
	if err := parseCommand(rc.fs, rest, io.Discard, ""); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	region := rc.name
	for flag, file := range map[string]string{"tls-cert": region + ".crt", "tls-key": region + ".key", "tls-ca": "ca.crt", "gossip-key-file": "gossip.key", "etcd-cacert": "ca.crt"} {
		if f := rc.fs.Lookup(flag); f != nil && f.Value.String() != "" {
			if err := rc.fs.Set(flag, filepath.Join(certs, file)); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := rc.plan(io.Discard)
	if err != nil {
		t.Fatalf("%s: likesd run would refuse to start: %v", where, err)
	}
	return p
}

// TestDeployPlans: the region of each deployment would start (its whole
// plan validates), and tells its peers addresses they can dial.
func TestDeployPlans(t *testing.T) {
	dir := filepath.Join(deployDir, "systemd")
	u := parseUnit(t, filepath.Join(dir, "likesd-region.service"))
	cmdline := strings.Fields(u.get("Service", "ExecStart"))
	p := planDeployed(t, "likesd-region.service", cmdline[1:], filepath.Join(dir, "likes.yaml"), nil)
	cl := p.rc.Cluster
	if cl == nil || cl.GRPCAdvertise == "" || cl.GossipAdvertise == "" || p.httpAdvertise == "" {
		t.Fatalf("the systemd region binds 0.0.0.0 and must advertise: %+v", cl)
	}

	// Each Kubernetes overlay is planned in TestDeployKubernetes (checkBuiltRegion).
}
