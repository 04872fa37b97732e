package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/client"
)

// fakeAPI is a like endpoint with the API's idempotency: the first request of
// a key applies, a retry replays its answer. script[n] shapes the answer of
// the n-th request (0-based); past the script every request is served.
type fakeAPI struct {
	t       *testing.T
	mu      sync.Mutex
	n       int
	keys    []string // the Idempotency-Key of every request, in order
	sess    []string // the Likes-Session of every request
	auth    []string
	applied map[string]bool
	likes   int // applications (must stay 1 per key)
	script  []step
}

type step int

const (
	serve           step = iota
	unavailable          // 503 Retry-After: 2
	rateLimited          // 429 Retry-After: 1
	lost                 // apply, then drop the connection without an answer
	badRequest           // 400 invalid_id
	conflict             // 409 idempotency_key_conflict
	gone                 // 410 user_erased
	internal             // 500 internal
	unavailableLong      // 503 Retry-After: 60
)

func newFake(t *testing.T, script ...step) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, applied: map[string]bool{}, script: script}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func apiError(w http.ResponseWriter, status int, code string, retryAfter int) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": "m"}})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n := f.n
	f.n++
	key := r.Header.Get("Idempotency-Key")
	f.keys = append(f.keys, key)
	f.sess = append(f.sess, r.Header.Get("Likes-Session"))
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	s := serve
	if n < len(f.script) {
		s = f.script[n]
	}
	apply := func() bool {
		if f.applied[key] {
			return false
		}
		f.applied[key] = true
		f.likes++
		return true
	}
	switch s {
	case unavailable:
		f.mu.Unlock()
		apiError(w, 503, client.CodeOverloaded, 2)
		return
	case unavailableLong:
		f.mu.Unlock()
		apiError(w, 503, client.CodeNotAuthoritative, 60)
		return
	case rateLimited:
		f.mu.Unlock()
		apiError(w, 429, client.CodeRateLimited, 1)
		return
	case badRequest:
		f.mu.Unlock()
		apiError(w, 400, client.CodeInvalidID, 0)
		return
	case conflict:
		f.mu.Unlock()
		apiError(w, 409, client.CodeIdempotencyKeyConflict, 0)
		return
	case gone:
		f.mu.Unlock()
		apiError(w, 410, client.CodeUserErased, 0)
		return
	case internal:
		f.mu.Unlock()
		apiError(w, 500, client.CodeInternal, 0)
		return
	case lost:
		apply()
		f.mu.Unlock()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close() // applied, never answered
		return
	}
	changed := true
	if strings.HasSuffix(r.URL.Path, "/likes") && r.Method == http.MethodPost {
		if !apply() {
			changed = true // the replay of the first answer (which changed the edge)
		}
	}
	f.mu.Unlock()
	w.Header().Set("Likes-Session", fmt.Sprintf("sess-%d", n))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"itemId": "doc", "userId": "alice", "liked": true, "changed": changed})
}

func (f *fakeAPI) snapshot() (keys, sess, auth []string, likes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...), append([]string(nil), f.sess...), append([]string(nil), f.auth...), f.likes
}

// recorder is an injected sleep: it records the waits and returns at once.
type recorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.mu.Unlock()
	return ctx.Err()
}

func newClient(t *testing.T, url string, rec *recorder, opts ...client.Option) *client.Client {
	t.Helper()
	base := []client.Option{client.WithToken("tok-alice"), client.WithSleep(rec.sleep), client.WithJitter(func() float64 { return 0.5 })}
	c, err := client.New(url, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sameKey(t *testing.T, keys []string, want int) {
	t.Helper()
	if len(keys) != want {
		t.Fatalf("%d attempts, want %d (%v)", len(keys), want, keys)
	}
	for _, k := range keys {
		if k == "" || k != keys[0] {
			t.Fatalf("the Idempotency-Key changed across retries: %v", keys)
		}
	}
}

// TestRetry503HonoursRetryAfter: two 503s with Retry-After: 2, then the
// like; three attempts with one key, each wait at least Retry-After.
func TestRetry503HonoursRetryAfter(t *testing.T) {
	f, srv := newFake(t, unavailable, unavailable)
	rec := &recorder{}
	c := newClient(t, srv.URL, rec)
	a, err := c.Like(context.Background(), "doc")
	if err != nil {
		t.Fatal(err)
	}
	keys, _, auth, likes := f.snapshot()
	sameKey(t, keys, 3)
	if a.Key != keys[0] || likes != 1 || !a.Liked {
		t.Fatalf("answer %+v, key %q, applied %d times", a, keys[0], likes)
	}
	if len(rec.waits) != 2 || rec.waits[0] < 2*time.Second || rec.waits[1] < 2*time.Second {
		t.Fatalf("waits %v, want two of at least Retry-After (2s)", rec.waits)
	}
	for _, h := range auth {
		if h != "Bearer tok-alice" {
			t.Fatalf("Authorization %q", h)
		}
	}
}

// TestRetryLostOK: the server applies the like and drops the connection; the
// retry sends the same key, so the like is applied once.
func TestRetryLostOK(t *testing.T) {
	f, srv := newFake(t, lost)
	rec := &recorder{}
	c := newClient(t, srv.URL, rec)
	a, err := c.Like(context.Background(), "doc")
	if err != nil {
		t.Fatal(err)
	}
	keys, _, _, likes := f.snapshot()
	sameKey(t, keys, 2)
	if likes != 1 || !a.Changed {
		t.Fatalf("applied %d times, answer %+v", likes, a)
	}
	if len(rec.waits) != 1 || rec.waits[0] > 100*time.Millisecond {
		t.Fatalf("waits %v, want one jittered backoff ≤ BaseDelay", rec.waits)
	}
}

// TestRetry429: rate limited, then served; same key, Retry-After honoured.
func TestRetry429(t *testing.T) {
	f, srv := newFake(t, rateLimited, rateLimited)
	rec := &recorder{}
	c := newClient(t, srv.URL, rec)
	if _, err := c.Unlike(context.Background(), "doc", "alice", client.IdempotencyKey("tap-7")); err != nil {
		t.Fatal(err)
	}
	keys, _, _, _ := f.snapshot()
	sameKey(t, keys, 3)
	if keys[0] != "tap-7" {
		t.Fatalf("key %q, want the caller's tap-7", keys[0])
	}
	if len(rec.waits) != 2 || rec.waits[0] < time.Second {
		t.Fatalf("waits %v", rec.waits)
	}
}

// TestNoRetryOnFinal4xx: 400, 409, 410 (and 500) end the call after one
// attempt with a typed *Error carrying status and code.
func TestNoRetryOnFinal4xx(t *testing.T) {
	for _, tc := range []struct {
		s      step
		status int
		code   string
	}{{badRequest, 400, client.CodeInvalidID}, {conflict, 409, client.CodeIdempotencyKeyConflict}, {gone, 410, client.CodeUserErased}, {internal, 500, client.CodeInternal}} {
		f, srv := newFake(t, tc.s, tc.s, tc.s)
		rec := &recorder{}
		c := newClient(t, srv.URL, rec)
		_, err := c.Like(context.Background(), "doc")
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code || ae.Retryable() {
			t.Fatalf("%d: err %v, want *Error %d %s", tc.status, err, tc.status, tc.code)
		}
		if keys, _, _, _ := f.snapshot(); len(keys) != 1 || len(rec.waits) != 0 {
			t.Fatalf("%d: %d attempts, waits %v: a final answer was retried", tc.status, len(keys), rec.waits)
		}
	}
}

// TestRetryBudget: always 503: MaxAttempts attempts, then the last *Error;
// a Retry-After past MaxWait ends the call at once.
func TestRetryBudget(t *testing.T) {
	f, srv := newFake(t, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable)
	rec := &recorder{}
	c := newClient(t, srv.URL, rec, client.WithRetry(client.RetryPolicy{MaxAttempts: 3}))
	_, err := c.Like(context.Background(), "doc")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 503 || ae.RetryAfter != 2*time.Second {
		t.Fatalf("err %v", err)
	}
	if keys, _, _, _ := f.snapshot(); len(keys) != 3 {
		t.Fatalf("%d attempts, want 3", len(keys))
	}

	f2, srv2 := newFake(t, unavailableLong)
	rec2 := &recorder{}
	c2 := newClient(t, srv2.URL, rec2)
	if _, err := c2.Like(context.Background(), "doc"); !errors.As(err, &ae) || ae.Code != client.CodeNotAuthoritative {
		t.Fatalf("err %v", err)
	}
	if keys, _, _, _ := f2.snapshot(); len(keys) != 1 || len(rec2.waits) != 0 {
		t.Fatalf("a Retry-After of 60s past MaxWait 10s was waited for: %d attempts, waits %v", len(keys), rec2.waits)
	}
}

// TestContextCancelStopsRetries: a cancelled wait ends the call promptly
// with the context's error (the real sleep).
func TestContextCancelStopsRetries(t *testing.T) {
	_, srv := newFake(t, unavailable, unavailable, unavailable)
	c, err := client.New(srv.URL, client.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Like(ctx, "doc")
		done <- err
	}()
	// The first answer asks for 2s; cancel during that wait.
	time.AfterFunc(50*time.Millisecond, cancel)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end on cancel")
	}
}

// TestConnectionRefusedRetriesThenTransportError: nothing listens; the
// client retries within budget and returns ErrTransport with the net error
// in the chain.
func TestConnectionRefusedRetriesThenTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	var attempts []client.Attempt
	rec := &recorder{}
	c := newClient(t, "http://"+addr, rec, client.WithObserver(func(a client.Attempt) { attempts = append(attempts, a) }))
	_, err = c.Like(context.Background(), "doc")
	var oe *net.OpError
	if !errors.Is(err, client.ErrTransport) || !errors.As(err, &oe) {
		t.Fatalf("err %v, want ErrTransport wrapping a *net.OpError", err)
	}
	if len(attempts) != client.DefaultRetryPolicy.MaxAttempts {
		t.Fatalf("%d attempts observed", len(attempts))
	}
	for i, a := range attempts {
		if a.N != i+1 || a.Key != attempts[0].Key || a.Status != 0 || a.Err == nil {
			t.Fatalf("attempt %d: %+v", i, a)
		}
	}
}

// TestSessionKeptAndSent: the newest Likes-Session of a write is sent on the
// next requests; SessionToken overrides it for one call without touching it.
func TestSessionKeptAndSent(t *testing.T) {
	f, srv := newFake(t)
	rec := &recorder{}
	c := newClient(t, srv.URL, rec)
	ctx := context.Background()
	if _, err := c.Like(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Like(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Liked(ctx, "b", "alice"); err != nil {
		t.Fatal(err)
	}
	a, err := c.Like(ctx, "c", client.SessionToken("mine"))
	if err != nil {
		t.Fatal(err)
	}
	_, sess, _, _ := f.snapshot()
	if want := []string{"", "sess-0", "sess-1", "mine"}; fmt.Sprint(sess) != fmt.Sprint(want) {
		t.Fatalf("sessions sent %q, want %q", sess, want)
	}
	if a.Session != "sess-3" || c.Session().Token() != "sess-2" {
		t.Fatalf("answer session %q, client session %q", a.Session, c.Session().Token())
	}
}

// TestTokenSourcePerCall: the token source is asked on every call, and a
// failing one fails the call before any request.
func TestTokenSourcePerCall(t *testing.T) {
	f, srv := newFake(t)
	n := 0
	ts := client.TokenFunc(func(context.Context) (string, error) {
		n++
		if n == 3 {
			return "", errors.New("expired")
		}
		return fmt.Sprintf("t%d", n), nil
	})
	c, err := client.New(srv.URL, client.WithTokenSource(ts))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := c.Like(ctx, "doc"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Like(ctx, "doc"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("err %v", err)
	}
	if _, _, auth, _ := f.snapshot(); fmt.Sprint(auth) != "[Bearer t1 Bearer t2]" {
		t.Fatalf("Authorization sent: %q", auth)
	}
}

// TestInvalidArguments are refused before any request.
func TestInvalidArguments(t *testing.T) {
	f, srv := newFake(t)
	c := newClient(t, srv.URL, &recorder{})
	ctx := context.Background()
	checks := []error{}
	_, err := c.Like(ctx, "")
	checks = append(checks, err)
	_, err = c.Like(ctx, "x", client.IdempotencyKey("bad\x00key"))
	checks = append(checks, err)
	_, err = c.Likers(ctx, "x", "", 501)
	checks = append(checks, err)
	_, err = c.BatchGet(ctx, nil)
	checks = append(checks, err)
	_, err = c.Unlike(ctx, "x", strings.Repeat("u", 257))
	checks = append(checks, err)
	for i, err := range checks {
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("check %d: err %v, want ErrInvalidArgument", i, err)
		}
	}
	if keys, _, _, _ := f.snapshot(); len(keys) != 0 {
		t.Fatalf("%d requests sent for invalid arguments", len(keys))
	}
	for _, u := range []string{"", "ftp://x", "http://", "http://h/?q=1", "::"} {
		if _, err := client.New(u); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("New(%q): %v", u, err)
		}
	}
}

// TestWithoutRetries: one attempt, seen by the observer with its outcome.
func TestWithoutRetries(t *testing.T) {
	f, srv := newFake(t, unavailable)
	var seen []client.Attempt
	c := newClient(t, srv.URL, &recorder{}, client.WithoutRetries(), client.WithObserver(func(a client.Attempt) { seen = append(seen, a) }))
	_, err := c.Like(context.Background(), "doc", client.IdempotencyKey("k1"))
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("err %v", err)
	}
	if keys, _, _, _ := f.snapshot(); len(keys) != 1 {
		t.Fatalf("%d attempts", len(keys))
	}
	if len(seen) != 1 || seen[0].Status != 503 || seen[0].Code != client.CodeOverloaded || seen[0].Key != "k1" || seen[0].Wait != 0 || seen[0].End.Before(seen[0].Start) {
		t.Fatalf("observed %+v", seen)
	}
}

// TestOnAttemptSeesEveryAttempt: the per-call observer sees each attempt
// with its status, code, key and the wait that followed it.
func TestOnAttemptSeesEveryAttempt(t *testing.T) {
	// lost first: on a fresh connection (net/http itself re-sends a request
	// with an Idempotency-Key once when a reused idle connection turns out
	// closed, which the client cannot see).
	_, srv := newFake(t, lost, unavailable)
	rec := &recorder{}
	c := newClient(t, srv.URL, rec)
	var seen []client.Attempt
	a, err := c.Like(context.Background(), "doc", client.OnAttempt(func(x client.Attempt) { seen = append(seen, x) }))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Fatalf("observed %d attempts, want 3", len(seen))
	}
	want := []struct {
		status int
		code   string
		err    bool
		wait   bool
	}{{0, "", true, true}, {503, client.CodeOverloaded, true, true}, {200, "", false, false}}
	for i, w := range want {
		x := seen[i]
		if x.N != i+1 || x.Key != a.Key || x.Status != w.status || x.Code != w.code || (x.Err != nil) != w.err || (x.Wait > 0) != w.wait || x.Op != "like" {
			t.Fatalf("attempt %d: %+v, want %+v", i+1, x, w)
		}
	}
}

// TestRetryAttemptTimeout: an attempt that outlives AttemptTimeout is
// abandoned and retried with the same key.
func TestRetryAttemptTimeout(t *testing.T) {
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			<-r.Context().Done() // hang until the client gives up on the attempt
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"itemId":"doc","userId":"alice","liked":true,"changed":true}`)
	}))
	defer srv.Close()
	rec := &recorder{}
	c := newClient(t, srv.URL, rec, client.WithRetry(client.RetryPolicy{AttemptTimeout: 100 * time.Millisecond}))
	if _, err := c.Like(context.Background(), "doc"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sameKey(t, keys, 2)
}

// TestBadAnswer: a 200 whose body is not the API's is ErrBadAnswer, not
// retried.
func TestBadAnswer(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		fmt.Fprint(w, "<html>a proxy's page</html>")
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, &recorder{})
	if _, err := c.Count(context.Background(), "doc"); !errors.Is(err, client.ErrBadAnswer) || n.Load() != 1 {
		t.Fatalf("err %v after %d requests", err, n.Load())
	}
}
