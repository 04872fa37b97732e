package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/likes-dev/likes/client"
)

// A like kept idempotent across retries: the first attempt is applied by the
// server but its answer is lost (the connection drops), the second is shed
// with 503 and Retry-After; the third gets the answer. All three carry the
// same Idempotency-Key, so the server applies the like once and replays it.
func Example_idempotentLike() {
	var (
		mu      sync.Mutex
		keys    []string
		applied = map[string]bool{} // keys the server has applied
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		keys = append(keys, key)
		n := len(keys)
		applied[key] = true
		mu.Unlock()
		switch n {
		case 1: // applied, then the answer is lost
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
			return
		case 2: // shed
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"overloaded","message":"retry later"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// The key was applied by attempt 1: replay that answer (changed).
		fmt.Fprint(w, `{"itemId":"doc","userId":"alice","liked":true,"changed":true}`)
	}))
	defer srv.Close()

	c, err := client.New(srv.URL,
		client.WithToken("alice's bearer token"),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 4}),
		// The example does not wait out the real Retry-After.
		client.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	ans, err := c.Like(context.Background(), "doc")
	if err != nil {
		fmt.Println(err)
		return
	}
	mu.Lock()
	defer mu.Unlock()
	same := true
	for _, k := range keys {
		same = same && k == ans.Key
	}
	fmt.Printf("attempts: %d, same key on every attempt: %v, distinct keys applied: %d, liked: %v\n", len(keys), same, len(applied), ans.Liked)
	// Output: attempts: 3, same key on every attempt: true, distinct keys applied: 1, liked: true
}
