package region_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/region"
)

// BenchmarkScrape is the cost of one scrape of a region's registry (every
// collector, including those that read the store at scrape time) after 200
// writes over 20 items.
func BenchmarkScrape(b *testing.B) {
	r, err := region.Open(context.Background(), config(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	srv := httptest.NewServer(r.API)
	defer srv.Close()
	for i := range 200 {
		user := fmt.Sprintf("u%d", i)
		tok, err := auth.Sign(secret, user, false, time.Hour, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/items/item-%d/likes", srv.URL, i%20), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", user)
		res, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("like: %d", res.StatusCode)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.Registry.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
