package api_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/likes-dev/likes/region"
)

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRequestIDOnEveryAnswer: every answer of the public API, success or
// error, carries X-Request-Id: the request's when it is sane, a fresh one
// when it is missing or hostile; the request's log line (debug) names it and
// the trace id.
func TestRequestIDOnEveryAnswer(t *testing.T) {
	var logs syncLog
	e := newRegionEnv(t, func(c *region.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	fresh := regexp.MustCompile(`^[0-9a-f]{32}$`)
	tok := e.token("alice", false)
	for _, tc := range []struct {
		name, id string
		c        call
		keep     bool
	}{
		{"like, sane id", "client-42", call{method: "POST", path: itemPath("i1") + "/likes", token: tok, key: "k1"}, true},
		{"count, no id", "", call{method: "GET", path: itemPath("i1") + "/count"}, false},
		{"401, sane id", "abc.DEF-1", call{method: "POST", path: itemPath("i1") + "/likes", key: "k2"}, true},
		{"404, log injection", "x\" level=ERROR msg=forged", call{method: "GET", path: "/nope"}, false},
		{"like, 129 chars", strings.Repeat("r", 129), call{method: "POST", path: itemPath("i2") + "/likes", token: tok, key: "k3"}, false},
		{"like, non-ASCII", "caf\u00e9-\u202e", call{method: "POST", path: itemPath("i3") + "/likes", token: tok, key: "k4"}, false},
	} {
		if tc.id != "" {
			tc.c.header = map[string]string{"X-Request-Id": tc.id}
		}
		r := e.do(tc.c)
		got := r.header.Get("X-Request-Id")
		if tc.keep && got != tc.id || !tc.keep && !fresh.MatchString(got) {
			t.Errorf("%s: answered %d with X-Request-Id %q (sent %q)", tc.name, r.status, got, tc.id)
			continue
		}
		var line string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="http request"`) && strings.Contains(l, got) {
				line = l
			}
		}
		if line == "" || !regexp.MustCompile(`trace_id=[0-9a-f]{32}`).MatchString(line) {
			t.Errorf("%s: no log line with request id %s and a trace id:\n%s", tc.name, got, logs.String())
		}
		if strings.Contains(logs.String(), "msg=forged") {
			t.Errorf("%s: a forged log line got through:\n%s", tc.name, logs.String())
		}
	}
}
