package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/likes-dev/likes/client"
)

// The client's overhead over a bare net/http request for one count read
// (what the load tool pays per request): go test -bench . ./client/
var countBody = []byte(`{"itemId":"lg-x-i1","count":12,"asOf":"2026-12-02T18:25:10.873Z","stalenessMs":6}` + "\n")

func countServer(b *testing.B) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=30")
		_, _ = w.Write(countBody)
	}))
	b.Cleanup(s.Close)
	return s
}

func BenchmarkBareCount(b *testing.B) {
	s := countServer(b)
	hc := s.Client()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", s.URL+"/v1/items/lg-x-i1/count", nil)
		res, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		bb := bytes.NewBuffer(buf[:0])
		_, _ = bb.ReadFrom(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
	}
}

func BenchmarkClientCount(b *testing.B) {
	s := countServer(b)
	c, _ := client.New(s.URL, client.WithHTTPClient(s.Client()), client.WithRetry(client.RetryPolicy{MaxAttempts: 1, AttemptTimeout: -1}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Count(context.Background(), "lg-x-i1"); err != nil {
			b.Fatal(err)
		}
	}
}
