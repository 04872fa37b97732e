package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
)

// hangingEndpoint is a loopback TCP listener that accepts connections and
// never answers: a client that dials it waits for its own timeout. It
// counts the connections it accepted.
func hangingEndpoint(t *testing.T) (url string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String(), accepted
}

func likectl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestHelpEverywhereWithoutNetwork: every command and subcommand answers -h,
// --help and `likectl help PATH` with its usage on stdout, exit 0, nothing on
// stderr, quickly, and without a single connection to an etcd that would
// hang (today's bug: `likectl pins -h` dialled etcd and waited 5 s).
func TestHelpEverywhereWithoutNetwork(t *testing.T) {
	url, accepted := hangingEndpoint(t)
	var paths [][]string
	etcdCmds := map[string]bool{}
	visit(rootCommand(), nil, func(c *command, path []string) {
		paths = append(paths, path)
		for _, f := range flagNames(c) {
			if f == "--etcd" {
				etcdCmds[strings.Join(path, " ")] = true
			}
		}
	})
	if len(paths) < 20 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	for _, path := range paths {
		forms := [][]string{
			append(append([]string(nil), path...), "-h"),
			append(append([]string(nil), path...), "--help"),
			append([]string{"help"}, path...),
		}
		// A leaf's -h wins over the flags around it, etcd's included.
		if len(path) > 0 {
			forms = append(forms, append(append([]string(nil), path...), "--frobnicate", "extra", "-h"))
		}
		if etcdCmds[strings.Join(path, " ")] {
			forms = append(forms, append(append([]string(nil), path...), "--etcd", url, "-h"))
		}
		for _, args := range forms {
			start := time.Now()
			out, errOut, err := likectl(t, args...)
			if err != nil || exitCode(err) != exitOK {
				t.Errorf("likectl %s: %v (exit %d)", strings.Join(args, " "), err, exitCode(err))
				continue
			}
			if !strings.HasPrefix(out, "Usage: likectl ") || errOut != "" {
				t.Errorf("likectl %s: stdout %q, stderr %q", strings.Join(args, " "), out, errOut)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("likectl %s took %v", strings.Join(args, " "), d)
			}
		}
	}
	if len(etcdCmds) < 7 {
		t.Fatalf("only %d commands take --etcd: %v", len(etcdCmds), etcdCmds)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("help opened %d connections to etcd", n)
	}
	out, _, _ := likectl(t, "pins", "move", "-h")
	for _, want := range []string{"--range", "--to", "--unplanned", "deprecated"} {
		if !strings.Contains(out, want) {
			t.Errorf("pins move -h lacks %q:\n%s", want, out)
		}
	}
}

// TestExitCodes: 0 ok, 1 a finding (mismatches, truncated results), 2 a
// usage error or a failure (cannot connect).
func TestExitCodes(t *testing.T) {
	t.Setenv("LIKES_AUTH_SECRET", "")
	var answer atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/admin/reconcile" || r.Header.Get("Authorization") == "" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(answer.Load().(string)))
	}))
	t.Cleanup(srv.Close)
	refused := "http://" + freeAddr(t)
	hang, _ := hangingEndpoint(t)

	for _, tc := range []struct {
		name   string
		answer string
		args   []string
		code   int
	}{
		{"help", "", []string{"-h"}, exitOK},
		{"reconcile clean", `{"region":"us","itemsChecked":3,"mismatched":[],"healed":0}`, []string{"reconcile", "--url", srv.URL}, exitOK},
		{"reconcile healed", `{"region":"us","itemsChecked":3,"mismatched":[{"itemId":"i","likedEdges":2,"cellSum":1,"mismatch":1,"healed":true}],"healed":1}`, []string{"reconcile", "--url", srv.URL, "--heal"}, exitOK},
		{"reconcile mismatches", `{"region":"us","itemsChecked":3,"mismatched":[{"itemId":"i","likedEdges":2,"cellSum":1,"mismatch":1}],"healed":0}`, []string{"reconcile", "--url", srv.URL}, exitFinding},
		{"reconcile truncated", `{"region":"us","itemsChecked":1000000,"mismatched":[],"healed":0,"truncated":true}`, []string{"reconcile", "--url", srv.URL, "-o", "json"}, exitFinding},
		{"reconcile bad answer", `not json`, []string{"reconcile", "--url", srv.URL}, exitFailure},
		{"reconcile cannot connect", "", []string{"reconcile", "--url", refused}, exitFailure},
		{"unknown command", "", []string{"frobnicate"}, exitFailure},
		{"unknown subcommand", "", []string{"pins", "frobnicate"}, exitFailure},
		{"missing subcommand", "", []string{"pins"}, exitFailure},
		{"bad flag", "", []string{"pins", "list", "--frobnicate"}, exitFailure},
		{"bad -o", "", []string{"pins", "list", "-o", "yaml"}, exitFailure},
		{"stray argument", "", []string{"regions", "extra"}, exitFailure},
		{"missing required flag", "", []string{"token"}, exitFailure},
		{"etcd refused", "", []string{"pins", "list", "--etcd", refused, "--dial-timeout", "300ms"}, exitFailure},
		{"etcd hangs", "", []string{"cluster", "--etcd", hang, "--dial-timeout", "300ms"}, exitFailure},
		{"bad etcd config", "", []string{"regions", "--etcd", "127.0.0.1:2379"}, exitFailure},
		{"completion without shell", "", []string{"completion"}, exitFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer.Store(tc.answer)
			start := time.Now()
			out, errOut, err := likectl(t, tc.args...)
			if got := exitCode(err); got != tc.code {
				t.Fatalf("likectl %s: exit %d (%v), want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), got, err, tc.code, out, errOut)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v", d)
			}
			if tc.code == exitFinding && strings.Contains(strings.Join(tc.args, " "), "truncated") {
				t.Log(out)
			}
		})
	}
	// The truncated reconcile says so in the JSON, and the table.
	answer.Store(`{"region":"us","itemsChecked":1000000,"mismatched":[],"healed":0,"truncated":true}`)
	out, _, err := likectl(t, "reconcile", "--url", srv.URL, "-o", "json")
	var rep reconcileJSON
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || !rep.Truncated || rep.Items != 1000000 || rep.Mismatched == nil || !errors.Is(err, errFinding) {
		t.Fatalf("reconcile -o json: %v %+v (%v)\n%s", jerr, rep, err, out)
	}
	out, _, _ = likectl(t, "reconcile", "--url", srv.URL)
	if !strings.Contains(out, "TRUNCATED") {
		t.Fatalf("truncated reconcile table:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReconcileProgress: while the region recounts, likectl prints a
// progress line on stderr every second (of an injected clock), and none with
// --quiet.
func TestReconcileProgress(t *testing.T) {
	t.Setenv("LIKES_AUTH_SECRET", "")
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`{"region":"us","itemsChecked":1,"mismatched":[],"healed":0}`))
	}))
	t.Cleanup(srv.Close)
	for _, quiet := range []bool{false, true} {
		args := []string{"reconcile", "--url", srv.URL}
		if quiet {
			args = append(args, "--quiet")
		}
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		var out, errOut syncBuffer
		done := make(chan error, 1)
		go func() {
			done <- execute(context.Background(), rootCommand(), args, &env{stdout: &out, stderr: &errOut, clock: clk})
		}()
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(5 * time.Millisecond)
		for n := 0; ; n++ {
			clk.Advance(time.Second)
			if strings.Contains(errOut.String(), "reconcile: still running") || (quiet && n >= 50) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress line within 10s; stderr %q", errOut.String())
			}
			<-tick.C
		}
		tick.Stop()
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(errOut.String(), "still running"); has == quiet {
			t.Fatalf("quiet=%v: stderr %q", quiet, errOut.String())
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	_ = l.Close()
	return a
}

// TestCompletion: the scripts name every command, subcommand and flag; the
// bash script parses and completes subcommands and flags.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh"} {
		out, _, err := likectl(t, "completion", sh)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"pins move", "dlq replay", "--range", "--unplanned", "--heal", "--dry-run", "completion", "table json", "_likectl"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s completion lacks %q", sh, want)
			}
		}
	}
	if _, _, err := likectl(t, "completion", "fish"); exitCode(err) != exitFailure {
		t.Fatalf("completion fish: %v", err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run the script")
	}
	script, _, _ := likectl(t, "completion", "bash")
	f := t.TempDir() + "/likectl.bash"
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _likectl; echo "${COMPREPLY[*]}"`
		cmd := exec.Command(bash, append([]string{"--noprofile", "--norc", "-c", prog, "x", f}, words...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, b)
		}
		return strings.TrimSpace(string(b))
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"likectl", "pi"}, "pins"},
		{[]string{"likectl", "pins", "re"}, "rebalance"},
		{[]string{"likectl", "pins", "move", "--un"}, "--unplanned"},
		{[]string{"likectl", "pins", "move", "--to", "eu", "--ra"}, "--range --ranges"},
		{[]string{"likectl", "dlq", "list", "-o", "j"}, "json"},
		{[]string{"likectl", "completion", "z"}, "zsh"},
	} {
		if got := complete(tc.words...); got != tc.want {
			t.Errorf("complete %q = %q, want %q", tc.words, got, tc.want)
		}
	}
}
