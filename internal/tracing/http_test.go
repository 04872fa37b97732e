package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/likes-dev/likes/internal/tracing/tracingtest"
)

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestRequestIDs: a sane X-Request-Id is echoed; a hostile or missing one is
// replaced by a fresh id; the request's log line carries the id and the
// trace id, which a valid traceparent continues.
func TestRequestIDs(t *testing.T) {
	var logs bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var seen string
	var valid bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}/count", func(w http.ResponseWriter, r *http.Request) {
		seen = RequestID(r.Context())
		valid = trace.SpanContextFromContext(r.Context()).IsValid()
		w.WriteHeader(http.StatusTeapot)
	})
	h := HTTP(HTTPConfig{Tracer: IDsOnly(), Logger: lg, Region: "us"}, mux)
	for _, tc := range []struct {
		name, in string
		keep     bool
	}{
		{"sane", "req-123_ABC.xyz:/=", true},
		{"max length", strings.Repeat("a", MaxRequestIDLen), true},
		{"missing", "", false},
		{"too long", strings.Repeat("a", MaxRequestIDLen+1), false},
		{"space", "a b", false},
		{"newline", "a\nlevel=ERROR msg=forged", false},
		{"control", "a\x01b", false},
		{"non-ASCII", "caf\u00e9", false},
		{"DEL", "a\x7f", false},
	} {
		logs.Reset()
		seen = ""
		req := httptest.NewRequest("GET", "/v1/items/x/count", nil)
		if tc.in != "" {
			req.Header["X-Request-Id"] = []string{tc.in}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got := rec.Header().Get(RequestIDHeader)
		switch {
		case tc.keep && got != tc.in:
			t.Errorf("%s: answered %q, want the request's", tc.name, got)
		case !tc.keep && !hexID.MatchString(got):
			t.Errorf("%s: answered %q, want a fresh id", tc.name, got)
		}
		if !valid {
			t.Errorf("%s: the handler's context has no span context", tc.name)
		}
		if seen != got {
			t.Errorf("%s: handler saw request id %q, answered %q", tc.name, seen, got)
		}
		line := logs.String()
		if strings.Count(line, "\n") != 1 || !strings.Contains(line, got) || !strings.Contains(line, "status=418") ||
			!strings.Contains(line, `route="GET /v1/items/{id}/count"`) || !regexp.MustCompile(`trace_id=[0-9a-f]{32}`).MatchString(line) {
			t.Errorf("%s: log line %q", tc.name, line)
		}
		if tc.in != "" && !tc.keep && !strings.Contains(line, "request_id_replaced=true") {
			t.Errorf("%s: log line does not say the id was replaced: %q", tc.name, line)
		}
	}
	// A traceparent is continued (its trace id logged); a malformed one starts a new trace.
	for _, tc := range []struct{ tp, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "trace_id=4bf92f3577b34da6a3ce929d0e0e4736"},
		{"00-zzzz-00f067aa0ba902b7-01", "trace_id="},
	} {
		logs.Reset()
		req := httptest.NewRequest("GET", "/v1/items/x/count", nil)
		req.Header.Set("Traceparent", tc.tp)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if !strings.Contains(logs.String(), tc.want) {
			t.Errorf("traceparent %q: log %q, want %q", tc.tp, logs.String(), tc.want)
		}
	}
	// Below 500 the line is debug: not written at info.
	logs.Reset()
	h2 := HTTP(HTTPConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, mux)
	h2.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/items/x/count", nil))
	if logs.Len() != 0 {
		t.Errorf("a 418 was logged at info: %q", logs.String())
	}
}

func TestNewValidates(t *testing.T) {
	for _, ep := range []string{"collector", "host:0", "host:99999", ":4317", "host:port"} {
		if _, err := New(context.Background(), Config{Endpoint: ep, Insecure: true}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	if _, err := New(context.Background(), Config{SampleRatio: 1.5}); err == nil {
		t.Error("sample ratio 1.5 accepted")
	}
	p, err := New(context.Background(), Config{Endpoint: "127.0.0.1:4317", Insecure: true})
	if err != nil || !p.Exporter {
		t.Fatalf("New = %v, %v", p, err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = p.Shutdown(context.Background()) // idempotent
}

// TestOTLPExport: with an endpoint, spans reach an OTLP/gRPC collector (a
// plaintext loopback stand-in) by Shutdown at the latest.
func TestOTLPExport(t *testing.T) {
	col, err := tracingtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	p, err := New(context.Background(), Config{Endpoint: col.Addr(), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	h := HTTP(HTTPConfig{Tracer: p.TracerProvider(), Region: "us"}, http.NotFoundHandler())
	for range 5 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/nowhere", nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := col.Spans(); n != 5 {
		t.Fatalf("collector received %d spans, want 5 (%v)", n, col.Names())
	}
}
