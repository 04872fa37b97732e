package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/region"
)

// ---------------------------------------------------------------------------
// Error statuses and their bodies.

func TestBadRequest(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice := e.token("alice", false)
	long := strings.Repeat("x", 257)
	max := strings.Repeat("é", 128) // 256 bytes: the longest valid id

	t.Run("ids", func(t *testing.T) {
		for _, bad := range []string{escape(long), "%01", "ok%00", "%7F", "%FF", "a%C3", "%ED%A0%80"} {
			wantError(t, e.do(call{method: "POST", path: "/v1/items/" + bad + "/likes", token: alice, key: "k"}), 400, "invalid_id")
			wantError(t, e.do(call{method: "GET", path: "/v1/items/" + bad + "/count"}), 400, "invalid_id")
			wantError(t, e.do(call{method: "GET", path: "/v1/items/" + bad + "/likes"}), 400, "invalid_id")
			wantError(t, e.do(call{method: "GET", path: "/v1/items/ok/likes/" + bad}), 400, "invalid_id")
			wantError(t, e.do(call{method: "DELETE", path: "/v1/items/ok/likes/" + bad, token: alice, key: "k"}), 400, "invalid_id")
			wantError(t, e.do(call{method: "DELETE", path: "/v1/items/" + bad + "/likes/alice", token: alice, key: "k"}), 400, "invalid_id")
			wantError(t, e.do(call{method: "DELETE", path: "/v1/users/" + bad, token: alice}), 400, "invalid_id")
		}
		mustAnswer(t, e.like(alice, max, "k-max"), true, true)
	})

	t.Run("idempotency key", func(t *testing.T) {
		wantError(t, e.do(call{method: "POST", path: "/v1/items/i/likes", token: alice}), 400, "missing_idempotency_key")
		wantError(t, e.do(call{method: "DELETE", path: "/v1/items/i/likes/alice", token: alice}), 400, "missing_idempotency_key")
		wantError(t, e.like(alice, "i", long), 400, "invalid_idempotency_key")
		mustAnswer(t, e.like(alice, "i", strings.Repeat("k", 256)), true, true)
	})

	t.Run("batchGet", func(t *testing.T) {
		post := func(body string) resp {
			return e.do(call{method: "POST", path: "/v1/likes:batchGet", body: []byte(body)})
		}
		for _, body := range []string{``, `{`, `[]`, `{"itemIds":"a"}`, `{"itemIds":["a"],"extra":1}`, `{"itemIds":["a"]} {}`, `{"itemIds":["a"]}x`} {
			wantError(t, post(body), 400, "bad_json")
		}
		for _, body := range []string{`{}`, `{"itemIds":[]}`, `{"itemIds":null}`} {
			wantError(t, post(body), 400, "invalid_batch")
		}
		ids := make([]string, 101)
		for i := range ids {
			ids[i] = fmt.Sprint("item", i)
		}
		b, _ := json.Marshal(map[string]any{"itemIds": ids})
		wantError(t, post(string(b)), 400, "invalid_batch")
		e.batchGet("", ids[:100]) // the maximum is fine
		for _, bad := range []string{"", long, "a\u0001b", "\x7f", "tab\t"} {
			b, _ := json.Marshal(map[string]any{"itemIds": []string{"fine", bad}})
			wantError(t, post(string(b)), 400, "invalid_id")
		}
		// (Invalid UTF-8 inside JSON strings cannot reach ValidateID: the JSON
		// decoder turns it into U+FFFD, a valid id.)
	})

	t.Run("who-liked limit and cursor", func(t *testing.T) {
		for _, q := range []string{"?limit=0", "?limit=-1", "?limit=501", "?limit=x", "?limit=1.5", "?limit=99999999999999999999"} {
			wantError(t, e.do(call{method: "GET", path: "/v1/items/i/likes" + q}), 400, "invalid_limit")
		}
		badBucket := base64.RawURLEncoding.EncodeToString([]byte{200, 'a'})
		for _, c := range []string{"!!!", "%FF%FE", badBucket, "AA", strings.Repeat("A", 1025)} {
			wantError(t, e.do(call{method: "GET", path: "/v1/items/i/likes?cursor=" + c}), 400, "invalid_cursor")
		}
	})

	t.Run("retraction body", func(t *testing.T) {
		admin := e.token("root", true)
		post := func(body string) resp {
			return e.do(call{method: "POST", path: "/v1/admin/retractions", token: admin, body: []byte(body)})
		}
		wantError(t, post(`{`), 400, "bad_json")
		wantError(t, post(`{"itemId":"i","userIds":["a"],"why":"spam"}`), 400, "bad_json")
		wantError(t, post(`{"itemId":"","userIds":["a"]}`), 400, "invalid_id")
		wantError(t, post(`{"itemId":"i","userIds":[]}`), 400, "invalid_batch")
		wantError(t, post(`{"itemId":"i","userIds":["ok","\u0002"]}`), 400, "invalid_id")
		users := make([]string, 1001)
		for i := range users {
			users[i] = fmt.Sprint("u", i)
		}
		b, _ := json.Marshal(map[string]any{"itemId": "i", "userIds": users})
		wantError(t, post(string(b)), 400, "invalid_batch")
	})

	t.Run("not found", func(t *testing.T) {
		wantError(t, e.do(call{method: "GET", path: "/v1/nope"}), 404, "not_found")
		wantError(t, e.do(call{method: "PUT", path: "/v1/items/i/likes", token: alice, key: "k"}), 404, "not_found")
		wantError(t, e.do(call{method: "GET", path: "/v1/users/alice/erasure", token: alice}), 404, "not_found")
	})
}

func TestBodyTooLarge(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice := e.token("alice", false)
	limit := 64 << 10

	r := e.do(call{method: "POST", path: "/v1/items/big/likes", token: alice, key: "k1", body: make([]byte, limit+1)})
	wantError(t, r, 413, "body_too_large")
	if e.button("alice", "big") {
		t.Fatal("an oversized request was written")
	}
	// Exactly the limit is accepted (and ignored).
	mustAnswer(t, e.do(call{method: "POST", path: "/v1/items/big/likes", token: alice, key: "k2", body: make([]byte, limit)}), true, true)

	huge, _ := json.Marshal(map[string]any{"itemIds": []string{strings.Repeat("a", limit)}})
	wantError(t, e.do(call{method: "POST", path: "/v1/likes:batchGet", body: huge}), 413, "body_too_large")
	wantError(t, e.do(call{method: "POST", path: "/v1/admin/retractions", token: e.token("root", true), body: huge}), 413, "body_too_large")
	wantError(t, e.do(call{method: "DELETE", path: "/v1/users/alice", token: alice, body: make([]byte, limit+1)}), 413, "body_too_large")
	if !e.button("alice", "big") {
		t.Fatal("an oversized erase request erased the user")
	}
}

func TestUnauthenticated(t *testing.T) {
	e := newRegionEnv(t, nil)
	now := time.Now()
	other, _ := auth.Sign([]byte("another secret"), "alice", false, time.Hour, now)
	expired, _ := auth.Sign(testSecret, "alice", false, time.Minute, now.Add(-time.Hour))
	future := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "alice"}) // no exp
	noExp, _ := future.SignedString(testSecret)
	noSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}).SignedString(testSecret)
	longSub, _ := auth.Sign(testSecret, strings.Repeat("u", 300), false, time.Hour, now)
	ctrlSub, _ := auth.Sign(testSecret, "al\x01ice", false, time.Hour, now)
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}).SignedString(testSecret)
	b64 := base64.RawURLEncoding.EncodeToString
	oversized, _ := auth.Sign(testSecret, "alice", false, time.Hour, now)
	oversized += strings.Repeat("A", auth.MaxTokenLen) // > 8 KiB: refused before parsing
	algNone := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(fmt.Sprintf(`{"sub":"alice","exp":%d}`, now.Add(time.Hour).Unix()))) + "."

	type route struct{ method, path string }
	routes := []route{
		{"POST", "/v1/items/i/likes"},
		{"DELETE", "/v1/items/i/likes/alice"},
		{"DELETE", "/v1/users/alice"},
		{"GET", "/v1/users/alice/erasure"},
		{"POST", "/v1/admin/retractions"},
	}
	for _, rt := range routes {
		wantError(t, e.do(call{method: rt.method, path: rt.path, key: "k"}), 401, "unauthenticated")
	}
	bad := map[string]string{
		"garbage":       "Bearer not-a-jwt",
		"other secret":  "Bearer " + other,
		"expired":       "Bearer " + expired,
		"no exp":        "Bearer " + noExp,
		"no sub":        "Bearer " + noSub,
		"long sub":      "Bearer " + longSub,
		"control sub":   "Bearer " + ctrlSub,
		"wrong alg":     "Bearer " + hs512,
		"alg none":      "Bearer " + algNone,
		"basic scheme":  "Basic YWxpY2U6cGFzc3dvcmQ=",
		"empty bearer":  "Bearer ",
		"oversized":     "Bearer " + oversized,
		"upper wrong":   "BEARER " + other,
		"tampered body": "Bearer " + tamper(e.token("alice", false)),
	}
	for name, h := range bad {
		t.Run(name, func(t *testing.T) {
			for _, rt := range routes {
				r := e.do(call{method: rt.method, path: rt.path, key: "k", header: map[string]string{"Authorization": h}})
				wantError(t, r, 401, "invalid_token")
			}
			// batchGet works without a token, but a bad token is still refused.
			r := e.do(call{method: "POST", path: "/v1/likes:batchGet", body: []byte(`{"itemIds":["i"]}`), header: map[string]string{"Authorization": h}})
			wantError(t, r, 401, "invalid_token")
		})
	}
	if e.button("alice", "i") {
		t.Fatal("an unauthenticated request was written")
	}
}

// tamper swaps the token's payload for one naming another user, keeping the
// signature.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":"mallory","exp":%d}`, time.Now().Add(time.Hour).Unix())))
	return strings.Join(parts, ".")
}

func TestForbidden(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice, bob, admin := e.token("alice", false), e.token("bob", false), e.token("root", true)
	mustAnswer(t, e.like(bob, "i", "b1"), true, true)

	wantError(t, e.unlike(alice, "bob", "i", "a1"), 403, "forbidden")
	// An admin token does not make a user's unlike someone else's either.
	wantError(t, e.unlike(admin, "bob", "i", "r1"), 403, "forbidden")
	wantError(t, e.do(call{method: "POST", path: "/v1/admin/retractions", token: alice, body: []byte(`{"itemId":"i","userIds":["bob"]}`)}), 403, "forbidden")
	wantError(t, e.do(call{method: "DELETE", path: "/v1/users/bob", token: alice}), 403, "forbidden")
	wantError(t, e.do(call{method: "GET", path: "/v1/users/bob/erasure", token: alice}), 403, "forbidden")
	if !e.button("bob", "i") {
		t.Fatal("a forbidden request changed bob's like")
	}
	// The admin may look at (and start) another user's erasure.
	wantError(t, e.do(call{method: "GET", path: "/v1/users/bob/erasure", token: admin}), 404, "not_found")
}

func TestIdempotencyKeyConflict(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice, bob := e.token("alice", false), e.token("bob", false)
	first := mustAnswer(t, e.like(alice, "a", "tap"), true, true)
	wantError(t, e.like(alice, "b", "tap"), 409, "idempotency_key_conflict")
	wantError(t, e.unlike(alice, "alice", "a", "tap"), 409, "idempotency_key_conflict")
	if again := mustAnswer(t, e.like(alice, "a", "tap"), true, true); again != first {
		t.Fatalf("replay %+v differs from the first answer %+v", again, first)
	}
	if e.button("alice", "b") {
		t.Fatal("a conflicting request was written")
	}
	// Keys belong to their user.
	mustAnswer(t, e.like(bob, "a", "tap"), true, true)
	if got := e.countAfter("a", time.Now()).Count; got != 2 {
		t.Fatalf("count = %d, want 2", got)
	}
}

func TestGoneAfterErasure(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice := e.token("alice", false)
	for i := range 3 {
		mustAnswer(t, e.like(alice, fmt.Sprint("g", i), fmt.Sprint("k", i)), true, true)
	}
	r := e.do(call{method: "DELETE", path: "/v1/users/alice", token: alice})
	if r.status != http.StatusOK {
		t.Fatalf("small erasure should finish inline: %v", r)
	}
	wantError(t, e.like(alice, "g0", "k0"), 410, "user_erased") // even a replay
	wantError(t, e.like(alice, "new", "k9"), 410, "user_erased")
	wantError(t, e.unlike(alice, "alice", "g1", "k10"), 410, "user_erased")
	if got := e.countAfter("g2", time.Now()).Count; got != 0 {
		t.Fatalf("count after erasure = %d, want 0", got)
	}
}

func TestRateLimitPerUser(t *testing.T) {
	e := newRegionEnv(t, func(c *region.Config) { c.UserRate, c.UserBurst = 0.1, 2 })
	alice, bob := e.token("alice", false), e.token("bob", false)
	mustAnswer(t, e.like(alice, "a", "k1"), true, true)
	mustAnswer(t, e.like(alice, "b", "k2"), true, true)
	r := e.like(alice, "c", "k3")
	wantError(t, r, 429, "rate_limited")
	if ra := r.header.Get("Retry-After"); ra != "10" && ra != "9" {
		t.Fatalf("Retry-After = %q, want about 10s at 0.1 writes/s", ra)
	}
	wantError(t, e.unlike(alice, "alice", "a", "k4"), 429, "rate_limited")
	if e.button("alice", "c") || !e.button("alice", "a") {
		t.Fatal("a rate-limited request was written")
	}
	// Other users and reads are not limited by alice's budget.
	mustAnswer(t, e.like(bob, "c", "k1"), true, true)
	for range 5 {
		e.getCount("c")
	}
}

func TestRateLimitPerIP(t *testing.T) {
	e := newRegionEnv(t, func(c *region.Config) { c.IPRate, c.IPBurst = 0.1, 3 })
	for range 3 {
		e.getCount("a")
	}
	r := e.do(call{method: "GET", path: "/v1/items/a/count"})
	wantError(t, r, 429, "rate_limited")
	wantError(t, e.like(e.token("alice", false), "a", "k"), 429, "rate_limited")
	wantError(t, e.do(call{method: "POST", path: "/v1/likes:batchGet", body: []byte(`{"itemIds":["a"]}`)}), 429, "rate_limited")
}

// blockingStore holds every Apply until released.
type blockingStore struct {
	edge.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStore) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return edge.Decision{}, ctx.Err()
	}
	return b.Store.Apply(ctx, req)
}

func waitChan(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(pollTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestOverloadShedsWritesAndKeepsReads(t *testing.T) {
	bs := &blockingStore{entered: make(chan struct{}, 8), release: make(chan struct{})}
	e := newKit(t, kitOptions{wrapStore: func(s edge.Store) edge.Store { bs.Store = s; return bs }, maxInFlight: 1})
	alice, bob := e.token("alice", false), e.token("bob", false)

	held := make(chan resp, 1)
	go func() {
		r, err := e.try(call{method: "POST", path: "/v1/items/x/likes", token: alice, key: "hold"})
		if err != nil {
			r = resp{status: -1, body: []byte(err.Error())}
		}
		held <- r
	}()
	waitChan(t, bs.entered, "the first write to reach the store")

	// The only slot is taken: writes are refused at once, never queued.
	wantError(t, e.like(bob, "x", "b1"), 503, "overloaded")
	wantError(t, e.unlike(bob, "bob", "x", "b2"), 503, "overloaded")
	wantError(t, e.do(call{method: "POST", path: "/v1/admin/retractions", token: e.token("root", true), body: []byte(`{"itemId":"x","userIds":["alice"]}`)}), 503, "overloaded")
	// Reads keep serving.
	e.getCount("x")
	e.button("bob", "x")
	if _, err := e.likers("x", ""); err != nil {
		t.Fatal(err)
	}
	e.batchGet(bob, []string{"x", "y"})
	if r := e.do(call{method: "GET", path: "/healthz"}); r.status != 200 {
		t.Fatalf("healthz: %v", r)
	}

	close(bs.release)
	mustAnswer(t, <-held, true, true)
	// The shed request retried with its key succeeds, exactly once.
	mustAnswer(t, e.like(bob, "x", "b1"), true, true)
	mustAnswer(t, e.like(bob, "x", "b1"), true, true)
	if got := e.countAfter("x", time.Now()).Count; got != 2 {
		t.Fatalf("count = %d, want 2", got)
	}
	m := e.do(call{method: "GET", path: "/metrics"})
	if m.status != 200 || !strings.Contains(string(m.body), "likes_shed_total 3") {
		t.Fatalf("metrics do not show 3 shed writes: %s", m.body)
	}
}

func TestOverloadUnderConcurrency(t *testing.T) {
	e := newRegionEnv(t, func(c *region.Config) { c.MaxInFlightWrites = 1 })
	const users = 32
	toks := make([]string, users)
	for i := range toks {
		toks[i] = e.token(fmt.Sprint("u", i), false)
	}
	shed := 0
	for round := 0; round < 20 && shed == 0; round++ {
		item := fmt.Sprint("rush", round)
		status := make([]int, users)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range users {
			wg.Go(func() {
				<-start
				r, err := e.try(call{method: "POST", path: itemPath(item) + "/likes", token: toks[i], key: "k"})
				if err != nil {
					status[i] = -1
					return
				}
				status[i] = r.status
				if r.status == 503 && r.header.Get("Retry-After") == "" {
					status[i] = -2
				}
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, s := range status {
			switch s {
			case 200:
				ok++
				if !e.button(fmt.Sprint("u", i), item) {
					t.Fatalf("u%d got 200 but the button says unliked", i)
				}
			case 503:
				shed++
				if e.button(fmt.Sprint("u", i), item) {
					t.Fatalf("u%d got 503 but the like was written", i)
				}
			default:
				t.Fatalf("u%d: status %d", i, s)
			}
		}
		if got := e.countAfter(item, time.Now()).Count; got != int64(ok) {
			t.Fatalf("round %d: count %d, but %d writes were acknowledged", round, got, ok)
		}
	}
	if shed == 0 {
		t.Fatal("no write was ever shed with MaxInFlightWrites=1")
	}
}

func TestWriteTimeout(t *testing.T) {
	bs := &blockingStore{entered: make(chan struct{}, 8), release: make(chan struct{})}
	e := newKit(t, kitOptions{wrapStore: func(s edge.Store) edge.Store { bs.Store = s; return bs }, writeTimeout: 50 * time.Millisecond})
	wantError(t, e.like(e.token("alice", false), "x", "k"), 503, "timeout")
}

type authorityFunc func(ctx context.Context, user string) (uint64, error)

func (f authorityFunc) Authorize(ctx context.Context, user string) (uint64, error) {
	return f(ctx, user)
}

func TestNotAuthoritative(t *testing.T) {
	for _, err := range []error{edge.ErrNotOwner, edge.ErrFailClosed, fmt.Errorf("wrapped: %w", edge.ErrFailClosed)} {
		e := newKit(t, kitOptions{authority: authorityFunc(func(context.Context, string) (uint64, error) { return 0, err })})
		wantError(t, e.like(e.token("alice", false), "x", "k"), 503, "not_authoritative")
		if e.button("alice", "x") {
			t.Fatal("written without authority")
		}
	}
}

type failingApply struct{ edge.Store }

func (failingApply) Apply(context.Context, edge.Request) (edge.Decision, error) {
	return edge.Decision{}, errors.New("disk on fire at /secret/path")
}

func TestInternalError(t *testing.T) {
	e := newKit(t, kitOptions{wrapStore: func(s edge.Store) edge.Store { return failingApply{s} }})
	r := e.like(e.token("alice", false), "x", "k")
	wantError(t, r, 500, "internal")
	if strings.Contains(string(r.body), "secret") {
		t.Fatalf("internal error leaks details: %v", r)
	}
}

type failingCounts struct{ counts.CountStore }

func (failingCounts) Count(context.Context, string) (int64, error) {
	return 0, errors.New("cells down")
}

func TestCountUnavailableKeepsWrites(t *testing.T) {
	e := newKit(t, kitOptions{countStore: func(s counts.CountStore) counts.CountStore { return failingCounts{s} }})
	wantError(t, e.do(call{method: "GET", path: "/v1/items/x/count"}), 503, "unavailable")
	wantError(t, e.do(call{method: "POST", path: "/v1/likes:batchGet", body: []byte(`{"itemIds":["x"]}`)}), 503, "unavailable")
	mustAnswer(t, e.like(e.token("alice", false), "x", "k"), true, true)
	if !e.button("alice", "x") {
		t.Fatal("button should read the write")
	}
}

// ---------------------------------------------------------------------------
// Ids.

func TestUnicodeIDsRoundTrip(t *testing.T) {
	e := newRegionEnv(t, nil)
	items := []string{"✓", "😀 party", "a/b", "/lead", "trail/", "x%y", "тест", "q?x=1#frag", ".", "..", "%2F", strings.Repeat("é", 128)}
	users := []string{"ユーザー", "u/1", "plain"}
	for _, u := range users {
		tok := e.token(u, false)
		for i, item := range items {
			a := mustAnswer(t, e.like(tok, item, fmt.Sprint("k", i)), true, true)
			if a.Item != item || a.User != u {
				t.Fatalf("answer names (%q, %q), want (%q, %q)", a.Item, a.User, item, u)
			}
		}
	}
	at := time.Now()
	got := e.countsAfter(items, at)
	for _, item := range items {
		if got[item].Count != int64(len(users)) {
			t.Fatalf("count of %q = %d, want %d", item, got[item].Count, len(users))
		}
		likers, err := e.allLikers(item, 0)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(likers)
		want := slices.Sorted(slices.Values(users))
		if !slices.Equal(likers, want) {
			t.Fatalf("likers of %q = %q, want %q", item, likers, want)
		}
		for _, u := range users {
			if !e.button(u, item) {
				t.Fatalf("button (%q, %q) = false", u, item)
			}
		}
	}
	// The actor's own view through batchGet, and an unlike through an escaped user id.
	tok := e.token("u/1", false)
	for _, c := range e.batchGet(tok, items) {
		if c.Liked == nil || !*c.Liked {
			t.Fatalf("batchGet liked for %q = %v", c.Item, c.Liked)
		}
	}
	mustAnswer(t, e.unlike(tok, "u/1", "a/b", "unlike-1"), false, true)
	if e.button("u/1", "a/b") {
		t.Fatal("unlike through %2F did not land")
	}
	if got := e.countAfter("a/b", time.Now()).Count; got != int64(len(users)-1) {
		t.Fatalf("count of a/b = %d after one unlike", got)
	}
}

// ---------------------------------------------------------------------------
// Exactness over HTTP (DESIGN deep-dive 1).

// TestLostOKThenUnlikeThenStaleRetry: the like's 200 is lost, the user unlikes,
// then the client retries the OLD like. The retry replays the stored answer and
// must not re-like.
func TestLostOKThenUnlikeThenStaleRetry(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice := e.token("alice", false)

	first := mustAnswer(t, e.like(alice, "doc", "like-tap-1"), true, true) // the 200 the client never saw
	if got := e.countAfter("doc", time.Now()).Count; got != 1 {
		t.Fatalf("count after the like = %d, want 1", got)
	}
	mustAnswer(t, e.unlike(alice, "alice", "doc", "unlike-tap-2"), false, true)
	if e.button("alice", "doc") {
		t.Fatal("button liked after the unlike")
	}

	stale := mustAnswer(t, e.like(alice, "doc", "like-tap-1"), true, true)
	if stale != first {
		t.Fatalf("stale retry answered %+v, want the stored %+v", stale, first)
	}
	mustAnswer(t, e.unlike(alice, "alice", "doc", "unlike-tap-2"), false, true) // its retry replays too
	if e.button("alice", "doc") {
		t.Fatal("the stale retry re-liked the edge (button)")
	}
	c := e.countAfter("doc", time.Now())
	if c.Count != 0 {
		t.Fatalf("the stale retry re-liked the edge: count %d", c.Count)
	}
	if c.StalenessMs < 0 || c.StalenessMs > 5000 {
		t.Fatalf("stalenessMs = %d", c.StalenessMs)
	}
	if likers, _ := e.allLikers("doc", 0); len(likers) != 0 {
		t.Fatalf("likers = %q, want none", likers)
	}
}

func TestConcurrentDuplicatesOneKey(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice := e.token("alice", false)
	const n = 20
	answers := make([]resp, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := e.try(call{method: "POST", path: "/v1/items/dup/likes", token: alice, key: "same-tap"})
			if err != nil {
				r = resp{status: -1, body: []byte(err.Error())}
			}
			answers[i] = r
		})
	}
	close(start)
	wg.Wait()
	for _, r := range answers {
		// Every duplicate gets the one stored answer.
		mustAnswer(t, r, true, true)
	}
	if got := e.countAfter("dup", time.Now()).Count; got != 1 {
		t.Fatalf("count = %d after %d duplicates, want 1", got, n)
	}
}

func TestNewKeysOnLikedEdge(t *testing.T) {
	e := newRegionEnv(t, nil)
	alice := e.token("alice", false)
	mustAnswer(t, e.like(alice, "liked", "k0"), true, true)
	for i := 1; i <= 5; i++ {
		mustAnswer(t, e.like(alice, "liked", fmt.Sprint("k", i)), true, false)
	}
	// Concurrent first taps with distinct keys: exactly one changes the edge.
	const n = 20
	var changed atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := e.try(call{method: "POST", path: "/v1/items/race/likes", token: alice, key: fmt.Sprint("r", i)})
			if err != nil || r.status != 200 {
				errs <- fmt.Errorf("%v %v", r, err)
				return
			}
			var a answer
			if err := json.Unmarshal(r.body, &a); err != nil || !a.Liked {
				errs <- fmt.Errorf("bad answer %v", r)
				return
			}
			if a.Changed {
				changed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if changed.Load() != 1 {
		t.Fatalf("%d of %d concurrent likes said changed, want exactly 1", changed.Load(), n)
	}
	got := e.countsAfter([]string{"liked", "race"}, time.Now())
	if got["liked"].Count != 1 || got["race"].Count != 1 {
		t.Fatalf("counts = %d, %d, want 1, 1", got["liked"].Count, got["race"].Count)
	}
}

// ---------------------------------------------------------------------------
// Erasure and retraction.

type erasureJob struct {
	User       string `json:"userId"`
	State      string `json:"state"`
	Edges      int    `json:"edgesErased"`
	Unliked    int    `json:"likesRemoved"`
	StartedAt  int64  `json:"startedAtMs"`
	FinishedAt int64  `json:"finishedAtMs,omitempty"`
}

func decodeJob(t *testing.T, r resp) erasureJob {
	t.Helper()
	var j erasureJob
	decodeStrict(t, r.body, &j)
	return j
}

func TestErasureInBackground(t *testing.T) {
	// 150 edges: the first 100 go inline, the rest at 20 edges/s, so the job is
	// observably running for more than one eraser tick.
	e := newRegionEnv(t, func(c *region.Config) { c.EraseRate = 20 })
	victim, bob := e.token("victim", false), e.token("bob", false)
	const n, unliked = 150, 10
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("e%03d", i)
	}
	parallel(t, n, 8, func(i int) error {
		if err := e.likeOK(victim, items[i], "v"+items[i]); err != nil {
			return err
		}
		if i < unliked {
			if err := e.unlikeOK(victim, "victim", items[i], "u"+items[i]); err != nil {
				return err
			}
		}
		return e.likeOK(bob, items[i], "b"+items[i])
	})
	want := func(i int) int64 {
		if i < unliked {
			return 1
		}
		return 2
	}
	before := e.countsAfter(items, time.Now())
	for i, item := range items {
		if before[item].Count != want(i) {
			t.Fatalf("before erasure: count of %s = %d, want %d", item, before[item].Count, want(i))
		}
	}

	r := e.do(call{method: "DELETE", path: "/v1/users/victim", token: victim})
	if r.status != http.StatusAccepted {
		t.Fatalf("erasure of %d edges should continue in the background (202): %v", n, r)
	}
	j := decodeJob(t, r)
	if j.User != "victim" || j.State != "running" || j.Edges != 100 {
		t.Fatalf("started job = %+v", j)
	}
	// Writes are refused from the moment the erasure starts.
	wantError(t, e.like(victim, "e149", "late"), 410, "user_erased")
	wantError(t, e.like(victim, "brand-new", "late2"), 410, "user_erased")
	r = e.do(call{method: "GET", path: "/v1/users/victim/erasure", token: victim})
	if r.status != 200 || decodeJob(t, r).State != "running" {
		t.Fatalf("status right after start: %v", r)
	}
	// Starting again is idempotent: same job, no restart.
	if r := e.do(call{method: "DELETE", path: "/v1/users/victim", token: e.token("admin", true)}); r.status != 202 && r.status != 200 {
		t.Fatalf("second start: %v", r)
	} else if j2 := decodeJob(t, r); j2.StartedAt != j.StartedAt {
		t.Fatalf("second start restarted the job: %+v vs %+v", j2, j)
	}

	deadline := time.Now().Add(pollTimeout)
	for {
		r = e.do(call{method: "GET", path: "/v1/users/victim/erasure", token: victim})
		if r.status != 200 {
			t.Fatalf("status: %v", r)
		}
		j = decodeJob(t, r)
		if j.State == "done" {
			break
		}
		if j.State != "running" {
			t.Fatalf("state %q", j.State)
		}
		if time.Now().After(deadline) {
			t.Fatalf("erasure never finished: %+v", j)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j.Edges != n || j.Unliked != n-unliked || j.FinishedAt < j.StartedAt {
		t.Fatalf("finished job = %+v, want %d edges, %d likes removed", j, n, n-unliked)
	}

	after := e.countsAfter(items, time.Now())
	for _, item := range items {
		if after[item].Count != 1 {
			t.Fatalf("after erasure: count of %s = %d, want 1 (exactly one less per liked edge)", item, after[item].Count)
		}
	}
	for _, item := range []string{items[0], items[50], items[149]} {
		likers, err := e.allLikers(item, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(likers, []string{"bob"}) {
			t.Fatalf("likers of %s = %q, want [bob]", item, likers)
		}
		if e.button("victim", item) {
			t.Fatal("erased user's button still liked")
		}
	}
	wantError(t, e.like(victim, "e000", "after"), 410, "user_erased")
	wantError(t, e.unlike(victim, "victim", "e100", "after2"), 410, "user_erased")
	if r := e.do(call{method: "DELETE", path: "/v1/users/victim", token: victim}); r.status != 200 || decodeJob(t, r).State != "done" {
		t.Fatalf("erasing again after done: %v", r)
	}
	// Other users are untouched.
	mustAnswer(t, e.unlike(bob, "bob", "e000", "bob-unlike"), false, true)
}

type retractResult struct {
	Item      string `json:"itemId"`
	Retracted int    `json:"retracted"`
	Results   []struct {
		User    string `json:"userId"`
		Changed bool   `json:"changed"`
		Error   string `json:"error,omitempty"`
	} `json:"results"`
}

func TestRetraction(t *testing.T) {
	e := newRegionEnv(t, nil)
	admin := e.token("root", true)
	for _, u := range []string{"alice", "bob", "carol", "erin"} {
		mustAnswer(t, e.like(e.token(u, false), "spam", "k"), true, true)
	}
	erin := e.token("erin", false)
	if r := e.do(call{method: "DELETE", path: "/v1/users/erin", token: erin}); r.status != 200 {
		t.Fatalf("erase erin: %v", r)
	}
	if got := e.countAfter("spam", time.Now()).Count; got != 3 {
		t.Fatalf("count = %d, want 3", got)
	}
	body := []byte(`{"itemId":"spam","userIds":["alice","bob","dave","erin"]}`)
	retract := func() retractResult {
		t.Helper()
		r := e.do(call{method: "POST", path: "/v1/admin/retractions", token: admin, body: body})
		if r.status != 200 {
			t.Fatalf("retract: %v", r)
		}
		var res retractResult
		decodeStrict(t, r.body, &res)
		return res
	}
	res := retract()
	if res.Item != "spam" || res.Retracted != 2 || len(res.Results) != 4 {
		t.Fatalf("first retraction = %+v", res)
	}
	wantChanged := []bool{true, true, false, false}
	for i, r := range res.Results {
		if r.Changed != wantChanged[i] {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	if res.Results[3].Error != "user_erased" || res.Results[0].Error != "" || res.Results[2].Error != "" {
		t.Fatalf("result errors = %+v", res.Results)
	}
	if got := e.countAfter("spam", time.Now()).Count; got != 1 {
		t.Fatalf("count after retraction = %d, want 1", got)
	}
	if e.button("alice", "spam") || !e.button("carol", "spam") {
		t.Fatal("buttons after retraction")
	}

	again := retract()
	if again.Retracted != 0 {
		t.Fatalf("second retraction retracted %d", again.Retracted)
	}
	for _, r := range again.Results {
		if r.Changed {
			t.Fatalf("second retraction changed %+v", r)
		}
	}
	if got := e.countAfter("spam", time.Now()).Count; got != 1 {
		t.Fatalf("count after a repeated retraction = %d, want 1", got)
	}
	likers, _ := e.allLikers("spam", 0)
	if !slices.Equal(likers, []string{"carol"}) {
		t.Fatalf("likers = %q", likers)
	}
}

// ---------------------------------------------------------------------------
// Who-liked.

func TestWhoLikedLimits(t *testing.T) {
	e := newRegionEnv(t, nil)
	const n = 120
	toks := make([]string, n)
	for i := range toks {
		toks[i] = e.token(fmt.Sprintf("user%03d", i), false)
	}
	parallel(t, n, 8, func(i int) error { return e.likeOK(toks[i], "fifty", "k") })

	p, err := e.likers("fifty", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Users) != 50 || p.Cursor == "" || p.Item != "fifty" {
		t.Fatalf("default page: %d users, cursor %q", len(p.Users), p.Cursor)
	}
	p, err = e.likers("fifty", "?limit=500")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Users) != n || p.Cursor != "" {
		t.Fatalf("limit=500 page: %d users, cursor %q", len(p.Users), p.Cursor)
	}
	for _, limit := range []int{0, 1, 7, 50, 119, 120} {
		all, err := e.allLikers("fifty", limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != n || len(slices.Compact(slices.Sorted(slices.Values(all)))) != n {
			t.Fatalf("limit %d: %d users over all pages, want %d distinct", limit, len(all), n)
		}
	}
	p, err = e.likers("nobody-liked-this", "")
	if err != nil || p.Users == nil || len(p.Users) != 0 || p.Cursor != "" {
		t.Fatalf("empty item: %+v %v", p, err)
	}
}

func TestWhoLikedPaginationUnderConcurrentWrites(t *testing.T) {
	e := newRegionEnv(t, nil)
	const stable, churn = 60, 12
	stableSet := map[string]bool{}
	for i := range stable {
		u := fmt.Sprintf("s%02d", i)
		stableSet[u] = true
	}
	stableUsers := slices.Sorted(func(yield func(string) bool) {
		for u := range stableSet {
			if !yield(u) {
				return
			}
		}
	})
	parallel(t, stable, 8, func(i int) error { return e.likeOK(e.token(stableUsers[i], false), "hot", "k") })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churnErr atomic.Value
	for c := range churn {
		user := fmt.Sprintf("c%02d", c)
		tok := e.token(user, false)
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					err = e.likeOK(tok, "hot", fmt.Sprint("l", i))
				} else {
					err = e.unlikeOK(tok, user, "hot", fmt.Sprint("u", i))
				}
				if err != nil {
					churnErr.Store(err)
					return
				}
			}
		})
	}

	for pass, limit := range []int{1, 3, 7, 7, 16, 50} {
		users, err := e.allLikers("hot", limit)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, u := range users {
			seen[u]++
			if seen[u] > 1 {
				t.Errorf("pass %d (limit %d): %s listed twice", pass, limit, u)
			}
			if !stableSet[u] && !strings.HasPrefix(u, "c") {
				t.Errorf("pass %d: unknown user %q", pass, u)
			}
		}
		for u := range stableSet {
			if seen[u] != 1 {
				t.Errorf("pass %d (limit %d): stable liker %s listed %d times", pass, limit, u, seen[u])
			}
		}
	}
	close(stop)
	wg.Wait()
	if err, _ := churnErr.Load().(error); err != nil {
		t.Fatalf("churn write failed: %v", err)
	}
	if t.Failed() {
		return
	}
	// Once quiet, the list is exactly the LIKED edges and the count agrees.
	users, err := e.allLikers("hot", 9)
	if err != nil {
		t.Fatal(err)
	}
	c := e.countAfter("hot", time.Now())
	if int64(len(users)) != c.Count {
		t.Fatalf("%d likers listed but count %d", len(users), c.Count)
	}
	for _, u := range users {
		if !e.button(u, "hot") {
			t.Fatalf("%s listed but not liked", u)
		}
	}
}

// ---------------------------------------------------------------------------
// Misc surface.

func TestHealthAndReady(t *testing.T) {
	e := newRegionEnv(t, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		r := e.do(call{method: "GET", path: p})
		if r.status != 200 || !strings.Contains(string(r.body), `"region":"us"`) {
			t.Fatalf("%s: %v", p, r)
		}
	}
	c := e.getCount("never-liked")
	if c.Count != 0 || c.Item != "never-liked" || c.StalenessMs < 0 {
		t.Fatalf("count of a new item: %+v", c)
	}
}

func TestAdminEndpoints(t *testing.T) {
	e := newRegionEnv(t, nil)
	admin, alice := e.token("root", true), e.token("alice", false)
	for _, c := range []call{
		{method: "GET", path: "/v1/admin/status"},
		{method: "POST", path: "/v1/admin/reconcile", body: []byte(`{}`)},
		{method: "GET", path: "/v1/admin/log?partition=0"},
	} {
		wantError(t, e.do(c), 401, "unauthenticated")
		c.token = alice
		wantError(t, e.do(c), 403, "forbidden")
	}
	r := e.do(call{method: "GET", path: "/v1/admin/status", token: admin})
	if r.status != 200 || !strings.Contains(string(r.body), `"region":"us"`) {
		t.Fatalf("status: %v", r)
	}
	for _, q := range []string{"", "?partition=x", "?partition=0&after=-1", "?partition=0&limit=0", "?partition=0&limit=10001"} {
		wantError(t, e.do(call{method: "GET", path: "/v1/admin/log" + q, token: admin}), 400, "invalid_query")
	}
	recon := func(body string) resp {
		return e.do(call{method: "POST", path: "/v1/admin/reconcile", token: admin, body: []byte(body)})
	}
	wantError(t, recon(`{"itemId":"x","extra":true}`), 400, "bad_json")
	wantError(t, recon(`{"itemId":"a\u0001"}`), 400, "invalid_id")

	// Once settled, the recount of LIKED edges equals the summed cells.
	for i, u := range []string{"a", "b", "c"} {
		mustAnswer(t, e.like(e.token(u, false), "recon", fmt.Sprint("k", i)), true, true)
	}
	mustAnswer(t, e.unlike(e.token("b", false), "b", "recon", "u"), false, true)
	if got := e.countAfter("recon", time.Now()).Count; got != 2 {
		t.Fatalf("count = %d, want 2", got)
	}
	r = recon(`{"itemId":"recon"}`)
	var rep struct {
		Items      int               `json:"itemsChecked"`
		Mismatched []json.RawMessage `json:"mismatched"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &rep) != nil || rep.Items != 1 || len(rep.Mismatched) != 0 {
		t.Fatalf("reconcile of a settled item: %v", r)
	}

	// A server without operator endpoints answers 404 to admins.
	k := newKit(t, kitOptions{})
	wantError(t, k.do(call{method: "GET", path: "/v1/admin/status", token: k.token("root", true)}), 404, "not_found")
}

// TestBearerSchemeCaseInsensitive: the auth scheme is case-insensitive (RFC
// 9110), so `bearer` and `BEARER` work like `Bearer`.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	e := newRegionEnv(t, nil)
	for i, scheme := range []string{"bearer ", "BEARER ", "bEaReR  "} {
		h := map[string]string{"Authorization": scheme + e.token("alice", false)}
		item := fmt.Sprintf("case%d", i)
		r := e.do(call{method: "POST", path: "/v1/items/" + item + "/likes", key: "k" + item, header: h})
		mustAnswer(t, r, true, true)
		if !e.button("alice", item) {
			t.Fatalf("%q: like not stored", scheme)
		}
	}
}

// TestOversizedTokenStoresNothing: a token over 8 KiB is a 401 with a JSON
// error, and the write it carried is not applied.
func TestOversizedTokenStoresNothing(t *testing.T) {
	e := newRegionEnv(t, nil)
	tok := e.token("alice", false)
	tok += strings.Repeat("A", auth.MaxTokenLen+1-len(tok))
	wantError(t, e.do(call{method: "POST", path: "/v1/items/big/likes", token: tok, key: "k"}), 401, "invalid_token")
	if e.button("alice", "big") {
		t.Fatal("a request with an oversized token was written")
	}
}

// refusingStore refuses every write as a store that cannot write does.
type refusingStore struct{ edge.Store }

func (refusingStore) Apply(context.Context, edge.Request) (edge.Decision, error) {
	return edge.Decision{}, fmt.Errorf("%w: free disk space is below the watermark", edge.ErrStorageUnavailable)
}

func TestStorageUnavailable(t *testing.T) {
	e := newKit(t, kitOptions{wrapStore: func(s edge.Store) edge.Store { return refusingStore{s} }})
	wantError(t, e.like(e.token("alice", false), "x", "k"), 503, "storage_unavailable")
	wantError(t, e.unlike(e.token("alice", false), "alice", "x", "k2"), 503, "storage_unavailable")
	e.getCount("x") // reads keep serving
}

// failingLikers fails every who-liked read as a broken store would.
type failingLikers struct{ edge.Store }

func (failingLikers) Likers(context.Context, string, string, int) ([]string, string, error) {
	return nil, "", errors.New("disk read failed")
}

// TestLikersStoreFailureUnderACursor: a store failure while paging is the
// store's (503 unavailable with Retry-After), not the client's 400
// invalid_cursor; only edge.ErrBadCursor means a bad cursor.
func TestLikersStoreFailureUnderACursor(t *testing.T) {
	e := newKit(t, kitOptions{wrapStore: func(s edge.Store) edge.Store { return failingLikers{s} }})
	cursor := base64.RawURLEncoding.EncodeToString([]byte{3, 'u'})
	for _, path := range []string{"/v1/items/i/likes", "/v1/items/i/likes?cursor=" + cursor} {
		r := e.do(call{method: "GET", path: path})
		wantError(t, r, 503, "unavailable")
	}
}
