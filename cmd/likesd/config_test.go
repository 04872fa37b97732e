package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// clearLikesEnv unsets every LIKES_* variable of the test's environment for
// the test (restored after it), so a developer's shell cannot change results.
func clearLikesEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, envPrefix) {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigPrecedence: a flag on the command line beats $LIKES_*, which
// beats the --config file, which beats the default; each source reaches the
// same variable the flag does.
func TestConfigPrecedence(t *testing.T) {
	clearLikesEnv(t)
	file := writeFile(t, "likes.yaml", `
# every source sets http-port; grpc-port only the file and env; window only the file
http-port: 1000
grpc-port: 2000
window: 1s
regions: [us, eu]
user-rate: 7
min-free-space: 5%
`)
	t.Setenv("LIKES_HTTP_PORT", "1001")
	t.Setenv("LIKES_GRPC_PORT", "2001")
	t.Setenv("LIKES_GOSSIP_PORT", "3001")
	d := newDevCmd()
	if err := parseCommand(d.fs, []string{"--config", file, "--http-port", "1002"}, io.Discard, ""); err != nil {
		t.Fatal(err)
	}
	if d.port != 1002 || d.grpcPort != 2001 || d.gossipPort != 3001 || d.c.window != time.Second ||
		d.regions != "us,eu" || d.c.userRate != 7 || d.c.minFree.fraction != 0.05 || d.etcdPort != 2379 {
		t.Fatalf("http %d (want flag 1002), grpc %d (want env 2001), gossip %d (want env 3001), window %v (want file 1s), regions %q, user-rate %v, min-free %v, etcd-port %d (want default)",
			d.port, d.grpcPort, d.gossipPort, d.c.window, d.regions, d.c.userRate, d.c.minFree.fraction, d.etcdPort)
	}

	// $LIKES_CONFIG names the file when --config does not.
	t.Setenv("LIKES_CONFIG", file)
	d = newDevCmd()
	if err := parseCommand(d.fs, nil, io.Discard, ""); err != nil {
		t.Fatal(err)
	}
	if d.c.window != time.Second || d.port != 1001 {
		t.Fatalf("with $LIKES_CONFIG: window %v, http-port %d", d.c.window, d.port)
	}
	// An empty variable is unset (a blank line of an EnvironmentFile template).
	t.Setenv("LIKES_HTTP_PORT", "")
	d = newDevCmd()
	if err := parseCommand(d.fs, nil, io.Discard, ""); err != nil || d.port != 1000 {
		t.Fatalf("empty $LIKES_HTTP_PORT: port %d, err %v (want the file's 1000)", d.port, err)
	}
}

// TestConfigRefusesBadFiles: an unknown key is named with its line (and a
// hint when it is another command's flag or a secret), a wrong type is
// refused, and so is anything that is not one mapping of flag names.
func TestConfigRefusesBadFiles(t *testing.T) {
	clearLikesEnv(t)
	for _, tc := range []struct {
		cmd, body string
		want      []string
	}{
		{"run", "region: us\nhtp-port: 8080\n", []string{":2:", `unknown key "htp-port"`, "likesd run -h"}},
		{"run", "region: us\nclient-port: 2379\n", []string{":2:", "it is a flag of likesd etcd"}},
		{"dev", "auth-secret: hunter2\n", []string{"secrets are not settings", "$LIKES_AUTH_SECRET"}},
		{"run", "etcd-password: x\n", []string{"$LIKES_ETCD_PASSWORD"}},
		{"run", "redis-password: x\n", []string{"$LIKES_REDIS_PASSWORD"}},
		{"run", "region: us\nranges: many\n", []string{":2:", "ranges", `"many" is not an integer`}},
		{"run", "ranges: 1.5\n", []string{"not an integer"}},
		{"run", "insecure-dev-secret: yes\n", []string{"not a boolean"}},
		{"run", "insecure-dev-secret: 1\n", []string{"not a boolean"}},
		{"run", "drain-timeout: 30\n", []string{"not a duration"}},
		{"run", "drain-timeout: soon\n", []string{"not a duration"}},
		{"run", "user-rate: fast\n", []string{"not a number"}},
		{"run", "region: [us, eu]\n", []string{"got a list"}},
		{"run", "etcd: {a: b}\n", []string{"got a mapping"}},
		{"run", "region:\n", []string{"no value"}},
		{"run", "store: true\n", []string{"is a boolean; want a string"}},
		{"run", "region: us\nregion: eu\n", []string{"given twice"}},
		{"run", "- region\n", []string{"must be a mapping"}},
		{"run", "region: us\n---\nregion: eu\n", []string{"second"}},
		{"run", "region: [us\n", []string{"likes.yaml"}},
		{"run", "unsafe-break: fence\n", []string{"command line only"}},
		{"run", "config: other.yaml\n", []string{"command line only"}},
		{"run", "min-free-space: lots\n", []string{"min-free-space"}},
		{"etcd", "host: 127.0.0.1\nregion: us\n", []string{":2:", "it is a flag of likesd"}},
	} {
		fs := flagSetOf(t, tc.cmd)
		file := writeFile(t, "likes.yaml", tc.body)
		err := parseCommand(fs, []string{"--config", file}, io.Discard, "")
		var ue *usageError
		if err == nil || !errors.As(err, &ue) || !errors.Is(err, errConfig) {
			t.Errorf("likesd %s with %q: error %v, want a usage error of the config", tc.cmd, tc.body, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("likesd %s with %q: error %q does not mention %q", tc.cmd, tc.body, err, w)
			}
		}
	}
	// A missing file is an error, an empty one sets nothing.
	if err := parseCommand(flagSetOf(t, "run"), []string{"--config", "/nonexistent/likes.yaml"}, io.Discard, ""); err == nil {
		t.Error("a missing --config file was accepted")
	}
	if err := parseCommand(flagSetOf(t, "run"), []string{"--config", writeFile(t, "e.yaml", "# nothing\n")}, io.Discard, ""); err != nil {
		t.Errorf("an empty config file: %v", err)
	}
	// A bad value overridden on the command line is still a bad file.
	if err := parseCommand(flagSetOf(t, "run"), []string{"--config", writeFile(t, "b.yaml", "ranges: x\n"), "--ranges", "8"}, io.Discard, ""); err == nil {
		t.Error("a config file with a bad value was accepted because the flag overrode it")
	}
}

func flagSetOf(t *testing.T, cmd string) *flag.FlagSet {
	t.Helper()
	for _, fs := range commandFlagSets() {
		if fs.Name() == "likesd "+cmd {
			return fs
		}
	}
	t.Fatalf("no command %q", cmd)
	return nil
}

// TestEnvOverrides: $LIKES_<FLAG> sets the flag, a bad value names the
// variable, a command-line-only flag refuses its variable, and the scripts'
// own variables never reach a flag.
func TestEnvOverrides(t *testing.T) {
	clearLikesEnv(t)
	t.Setenv("LIKES_REGION", "eu")
	t.Setenv("LIKES_INSECURE_PLAINTEXT_PEERS", "true")
	t.Setenv("LIKES_DRAIN_TIMEOUT", "45s")
	t.Setenv("LIKES_ETCD_PORT", "23790") // scripts/servers.sh's, not dev's --etcd-port
	rc := newRunCmd()
	if err := parseCommand(rc.fs, nil, io.Discard, ""); err != nil {
		t.Fatal(err)
	}
	if rc.name != "eu" || !rc.peerSec.insecure || rc.drain != 45*time.Second {
		t.Fatalf("region %q, insecure-plaintext-peers %v, drain %v", rc.name, rc.peerSec.insecure, rc.drain)
	}
	d := newDevCmd()
	if err := parseCommand(d.fs, nil, io.Discard, ""); err != nil || d.etcdPort != 2379 {
		t.Fatalf("dev --etcd-port %d with $LIKES_ETCD_PORT set (err %v): the scripts' variable reached a flag", d.etcdPort, err)
	}

	t.Setenv("LIKES_RANGES", "lots")
	err := parseCommand(newRunCmd().fs, nil, io.Discard, "")
	if err == nil || !strings.Contains(err.Error(), "$LIKES_RANGES") {
		t.Fatalf("bad $LIKES_RANGES: %v", err)
	}
	t.Setenv("LIKES_RANGES", "")
	t.Setenv("LIKES_UNSAFE_BREAK", "fence")
	err = parseCommand(newRunCmd().fs, nil, io.Discard, "")
	if err == nil || !strings.Contains(err.Error(), "command-line-only") {
		t.Fatalf("$LIKES_UNSAFE_BREAK: %v", err)
	}
}

// TestReservedSecrets: no flag of any command maps to a secret's variable
// (a flag named like one is refused), and the secrets are still read
// directly where they are used.
func TestReservedSecrets(t *testing.T) {
	clearLikesEnv(t)
	for _, fs := range commandFlagSets() {
		if err := checkFlagNames(fs); err != nil {
			t.Error(err)
		}
		fs.VisitAll(func(f *flag.Flag) {
			if isReservedEnv(envName(f.Name)) && !(fs.Name() == "likesd dev" && f.Name == "etcd-port") {
				t.Errorf("%s --%s maps to the reserved $%s", fs.Name(), f.Name, envName(f.Name))
			}
		})
	}
	for _, s := range []string{"LIKES_AUTH_SECRET", "LIKES_ETCD_PASSWORD", "LIKES_CASSANDRA_PASSWORD", "LIKES_REDIS_PASSWORD", "LIKES_CASSANDRA_USER"} {
		if r, ok := reservedEnv[s]; !ok || !r.secret {
			t.Errorf("%s is not reserved as a secret", s)
		}
	}
	bad := flag.NewFlagSet("likesd x", flag.ContinueOnError)
	registerConfig(bad)
	bad.String("auth-secret", "", "")
	if err := parseCommand(bad, nil, io.Discard, ""); err == nil || !strings.Contains(err.Error(), "LIKES_AUTH_SECRET") {
		t.Fatalf("a flag named like a secret: %v", err)
	}

	// $LIKES_AUTH_SECRET is still read by likesd run (a short one is refused by length).
	t.Setenv("LIKES_AUTH_SECRET", "short")
	err := run(context.Background(), []string{"run", "--region", "us", "--data", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "$LIKES_AUTH_SECRET is 5 bytes") {
		t.Fatalf("likesd run with a short $LIKES_AUTH_SECRET: %v", err)
	}
	// $LIKES_ETCD_PASSWORD reaches the etcd client configuration.
	t.Setenv("LIKES_ETCD_PASSWORD", "pw")
	var p publicFlags
	if c := p.etcdConfig("http://127.0.0.1:1"); c.Password != "pw" {
		t.Fatalf("etcd password %q", c.Password)
	}
}

// TestHelpAndExitCodes: -h of every command exits 0 and prints to stdout
// only, with no network and no data folder; a usage error exits 2 naming
// the problem and -h.
func TestHelpAndExitCodes(t *testing.T) {
	clearLikesEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "commands:"},
		{[]string{"--help"}, "commands:"},
		{[]string{"help"}, "commands:"},
		{[]string{"run", "-h"}, "--advertise-grpc"},
		{[]string{"run", "--help"}, "LIKES_DRAIN_TIMEOUT"},
		{[]string{"dev", "-h"}, "--http-port"},
		{[]string{"etcd", "-h"}, "--client-port"},
		{[]string{"version"}, "likes "},
		{[]string{"version", "-h"}, "usage: likesd version"},
		{[]string{"help", "run"}, "--advertise-http"},
	} {
		var out, errb bytes.Buffer
		code := exitCode(run(context.Background(), tc.args, &out, &errb), &errb)
		if code != 0 || !strings.Contains(out.String(), tc.want) || errb.Len() != 0 {
			t.Errorf("likesd %s: exit %d, stdout %.80q (want %q), stderr %q", strings.Join(tc.args, " "), code, out.String(), tc.want, errb.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"missing command"}},
		{[]string{"bogus"}, []string{`unknown command "bogus"`}},
		{[]string{"run", "--nope"}, []string{"-nope", "likesd run -h"}},
		{[]string{"dev", "--http-port", "x"}, []string{"http-port", "likesd dev -h"}},
		{[]string{"etcd", "extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"version", "x"}, []string{"unexpected argument"}},
		{[]string{"help", "bogus"}, []string{`unknown command "bogus"`}},
		{[]string{"run", "--region", "us", "--http", "0.0.0.0:8080", "--etcd", "http://127.0.0.1:1", "--insecure-plaintext-peers"}, []string{"--advertise-http"}},
	} {
		var out, errb bytes.Buffer
		code := exitCode(run(context.Background(), tc.args, &out, &errb), &errb)
		if code != 2 {
			t.Errorf("likesd %s: exit %d, want 2", strings.Join(tc.args, " "), code)
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("likesd %s: stderr %q does not mention %q", strings.Join(tc.args, " "), errb.String(), w)
			}
		}
	}
}

// TestLikesVariablesHaveOneMeaning: every LIKES_* variable the repository's
// code and scripts read is either reserved (never a flag's) or is no flag's
// variable: a new variable read directly that a flag's name would also map to
// (two meanings for one name) fails here, and so does a reserved name that a
// new flag takes.
func TestLikesVariablesHaveOneMeaning(t *testing.T) {
	flagVars := map[string]string{}
	for _, fs := range commandFlagSets() {
		fs.VisitAll(func(f *flag.Flag) { flagVars[envName(f.Name)] = fs.Name() + " --" + f.Name })
	}
	re := regexp.MustCompile(`LIKES_[A-Z0-9_]*[A-Z0-9]`)
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "likes-data" || p == "../../cmd/likesd") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(p, "_test.go") || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".sh")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, v := range re.FindAllString(string(b), -1) {
			if f, ok := flagVars[v]; ok && !isReservedEnv(v) {
				t.Errorf("%s reads $%s, which is also the variable of %s: reserve it in reservedEnv or rename one", p, v, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is a bytes.Buffer safe for a command's writes and the test's
// reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunFromConfigFile: `likesd run --config` with the environment on top
// serves a region on what the two say, and stops cleanly when asked.
func TestRunFromConfigFile(t *testing.T) {
	clearLikesEnv(t)
	t.Setenv("LIKES_AUTH_SECRET", testSecret)
	t.Setenv("LIKES_REGION", "eu") // wins over the file's us
	file := writeFile(t, "likes.yaml", "region: us\nhttp: 127.0.0.1:0\npartitions: 2\nwindow: 20ms\nadvertise-http: https://eu.likes.example\ndata: "+t.TempDir()+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"run", "--config", file}, &out, &errb) }()
	re := regexp.MustCompile(`region "eu" serving (http://127\.0\.0\.1:\d+) standalone .*advertised https://eu\.likes\.example`)
	var url string
	deadline := time.Now().Add(20 * time.Second)
	for url == "" {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("likesd run ended: %v\n%s\n%s", err, out.String(), errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("likesd run did not start: %s\n%s", out.String(), errb.String())
		}
		time.Sleep(10 * time.Millisecond) // polling its output
	}
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"region":"eu"`) {
		t.Fatalf("/healthz: %d %s", resp.StatusCode, b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("likesd run stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("likesd run did not stop")
	}
}
