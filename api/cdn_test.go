package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestCDNHeaders (issue 18): an anonymous count is public with the cold
// max-age, an ETag that answers 304, and a Surrogate-Key; an item written
// often becomes hot (the short max-age); a batchGet is public without a token
// and private, no-store, Vary: Authorization with one, as is the button.
func TestCDNHeaders(t *testing.T) {
	e := newKit(t, kitOptions{})
	get := func(path, etag string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	res := get("/v1/items/cold/count", "")
	if cc := res.Header.Get("Cache-Control"); res.StatusCode != 200 || cc != "public, max-age=30, stale-while-revalidate=30, stale-if-error=300" {
		t.Fatalf("cold count: %d %q", res.StatusCode, cc)
	}
	if sk := res.Header.Get("Surrogate-Key"); sk != "item:cold" {
		t.Fatalf("Surrogate-Key %q", sk)
	}
	etag := res.Header.Get("ETag")
	if !strings.HasPrefix(etag, `W/"`) {
		t.Fatalf("ETag %q", etag)
	}
	if res := get("/v1/items/cold/count", etag); res.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match of the current ETag: %d, want 304", res.StatusCode)
	}
	for i := range 60 {
		user := "fan" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		r := e.do(call{method: "POST", path: "/v1/items/viral/likes", token: e.token(user, false), key: "k-" + user})
		if r.status != 200 {
			t.Fatalf("like %d: %v", i, r)
		}
	}
	if cc := get("/v1/items/viral/count", "").Header.Get("Cache-Control"); !strings.HasPrefix(cc, "public, max-age=5,") {
		t.Fatalf("hot count: %q, want max-age=5", cc)
	}
	batch := func(token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/likes:batchGet", bytes.NewReader([]byte(`{"itemIds":["cold","viral"]}`)))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := batch(""); !strings.HasPrefix(res.Header.Get("Cache-Control"), "public, max-age=5,") || res.Header.Get("Surrogate-Key") != "item:cold item:viral" ||
		res.Header.Get("Vary") != "Authorization" {
		t.Fatalf("anonymous batchGet: %q %q vary %q (the same URL with a token answers liked: a shared cache must key on it)",
			res.Header.Get("Cache-Control"), res.Header.Get("Surrogate-Key"), res.Header.Get("Vary"))
	}
	if res := batch(e.token("alice", false)); res.Header.Get("Cache-Control") != "private, no-store" || res.Header.Get("Vary") != "Authorization" {
		t.Fatalf("personal batchGet: %q vary %q", res.Header.Get("Cache-Control"), res.Header.Get("Vary"))
	}
	r := e.do(call{method: "GET", path: "/v1/items/viral/likes/alice", token: e.token("alice", false)})
	if r.status != 200 || r.header.Get("Cache-Control") != "private, no-store" || r.header.Get("Vary") != "Authorization" {
		t.Fatalf("button: %v, Cache-Control %q, Vary %q", r, r.header.Get("Cache-Control"), r.header.Get("Vary"))
	}
}
