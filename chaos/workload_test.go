package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestSendClassifies pins how one attempt is recorded (the history the
// checker reads): status, code, class, the answer's liked/changed, the
// session token, and what was sent (key, token, session), for every kind of
// answer, against a fake region. It holds for the workload before and after
// it moved onto the client package.
func TestSendClassifies(t *testing.T) {
	type seen struct{ method, path, key, auth, session string }
	var (
		mu    sync.Mutex
		reqs  []seen
		reply func(w http.ResponseWriter, r *http.Request)
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, seen{r.Method, r.URL.EscapedPath(), r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization"), r.Header.Get(sessionHeader)})
		f := reply
		mu.Unlock()
		f(w, r)
	}))
	defer srv.Close()
	jsonAnswer := func(status int, body string, hdr ...string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		}
	}
	apiErr := func(status int, code string) func(http.ResponseWriter, *http.Request) {
		return jsonAnswer(status, `{"error":{"code":"`+code+`","message":"m"}}`, "Retry-After", "1")
	}
	drop := func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}

	wl := NewWorkload(WorkloadConfig{AttemptTimeout: 2 * time.Second}, 1, []string{"us"}, map[string]string{"us": srv.URL}, []byte("secret"), "admin-token", nil)
	defer wl.Stop()
	c := wl.newClient(0)
	u := c.users[0]
	u.session = "sess-old"
	ctx := context.Background()

	cases := []struct {
		name    string
		kind    string
		reply   func(http.ResponseWriter, *http.Request)
		class   string
		status  int
		code    string
		liked   string // "" nil, else "true"/"false"
		session string
	}{
		{"like ok", KindLike, jsonAnswer(200, `{"itemId":"i001","userId":"u00-000","liked":true,"changed":true}`, sessionHeader, "sess-new"), OutcomeAck, 200, "", "true", "sess-new"},
		{"unlike ok", KindUnlike, jsonAnswer(200, `{"itemId":"i001","userId":"u00-000","liked":false,"changed":false}`), OutcomeAck, 200, "", "false", ""},
		{"like ok, body not JSON", KindLike, jsonAnswer(200, `not json`), OutcomeAck, 200, "", "", ""},
		{"overloaded", KindLike, apiErr(503, "overloaded"), OutcomeReject, 503, "overloaded", "", ""},
		{"not authoritative", KindLike, apiErr(503, "not_authoritative"), OutcomeIndeterminate, 503, "not_authoritative", "", ""},
		{"rate limited", KindLike, apiErr(429, "rate_limited"), OutcomeReject, 429, "rate_limited", "", ""},
		{"erased", KindLike, apiErr(410, "user_erased"), OutcomeReject, 410, "user_erased", "", ""},
		{"internal", KindUnlike, apiErr(500, "internal"), OutcomeIndeterminate, 500, "internal", "", ""},
		{"text 400", KindLike, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "bad thing", 400) }, OutcomeReject, 400, "bad thing", "", ""},
		{"lost answer", KindLike, drop, OutcomeIndeterminate, 0, "", "", ""},
		{"retract ok", KindRetract, jsonAnswer(200, `{"itemId":"i001","retracted":1,"results":[{"userId":"u00-000","changed":true}]}`), OutcomeAck, 200, "", "", ""},
		{"retract erased", KindRetract, jsonAnswer(200, `{"itemId":"i001","retracted":0,"results":[{"userId":"u00-000","changed":false,"error":"user_erased"}]}`), OutcomeReject, 200, "user_erased", "", ""},
		{"retract timeout", KindRetract, jsonAnswer(200, `{"itemId":"i001","retracted":0,"results":[{"userId":"u00-000","changed":false,"error":"timeout"}]}`), OutcomeIndeterminate, 200, "timeout", "", ""},
		{"retract bad answer", KindRetract, jsonAnswer(200, `{"results":[]}`), OutcomeIndeterminate, 200, "", "", ""},
		{"erase running", KindErase, jsonAnswer(202, `{"userId":"u00-000","state":"running","edgesErased":0,"likesRemoved":0,"startedAtMs":1}`), OutcomeAck, 202, "", "", ""},
		{"erase forbidden", KindErase, apiErr(403, "forbidden"), OutcomeReject, 403, "forbidden", "", ""},
	}
	for _, tc := range cases {
		mu.Lock()
		reply, reqs = tc.reply, nil
		mu.Unlock()
		item := "i001"
		if tc.kind == KindErase {
			item = ""
		}
		op := c.newOp(u, item, tc.kind)
		a := c.send(ctx, op, u, "us", 1, false, false)
		liked := ""
		if a.Liked != nil {
			liked = fmt.Sprint(*a.Liked)
		}
		if a.Class != tc.class || a.Status != tc.status || a.Code != tc.code || liked != tc.liked || a.session != tc.session {
			t.Errorf("%s: class %s status %d code %q liked %q session %q, want %s %d %q %q %q (err %q)",
				tc.name, a.Class, a.Status, a.Code, liked, a.session, tc.class, tc.status, tc.code, tc.liked, tc.session, a.Err)
		}
		if a.Start.IsZero() || a.End.Before(a.Start) || (tc.status == 0) != (a.Err != "") && tc.kind != KindRetract {
			t.Errorf("%s: start %v end %v err %q", tc.name, a.Start, a.End, a.Err)
		}
		mu.Lock()
		got := reqs
		mu.Unlock()
		if len(got) < 1 {
			t.Fatalf("%s: no request", tc.name)
		}
		r := got[0]
		wantAuth, wantKey, wantSess := "Bearer "+u.token, op.Key, ""
		switch tc.kind {
		case KindLike, KindUnlike:
			wantSess = u.session
		case KindRetract:
			wantAuth = "Bearer admin-token"
		}
		if r.auth != wantAuth || r.key != wantKey || r.session != wantSess {
			t.Errorf("%s: sent %+v, want Authorization %q key %q session %q", tc.name, r, wantAuth, wantKey, wantSess)
		}
	}

	// Nothing listens: a refused dial never reached the server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()
	wd := NewWorkload(WorkloadConfig{}, 1, []string{"us"}, map[string]string{"us": dead}, []byte("secret"), "admin", nil)
	defer wd.Stop()
	cd := wd.newClient(0)
	ud := cd.users[0]
	if a := cd.send(ctx, cd.newOp(ud, "i001", KindLike), ud, "us", 1, false, false); a.Class != OutcomeReject || a.Status != 0 || a.Err == "" {
		t.Errorf("refused dial: %+v, want a reject with the error", a)
	}

	// The count sampler and the session button read.
	mu.Lock()
	reply = jsonAnswer(200, `{"itemId":"i001","count":7,"asOf":"2026-01-02T03:04:05Z","stalenessMs":3}`)
	mu.Unlock()
	s, err := wl.readCount(ctx, "us", "i001")
	if err != nil || s.Count != 7 || s.AsOf.Unix() != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Unix() || s.Recv.Before(s.Sent) {
		t.Errorf("readCount: %+v %v", s, err)
	}
	mu.Lock()
	reply = apiErr(503, "unavailable")
	mu.Unlock()
	if _, err := wl.readCount(ctx, "us", "i001"); err == nil {
		t.Error("readCount of a 503 did not fail")
	}
}
