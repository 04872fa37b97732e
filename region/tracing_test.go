package region_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/likes-dev/likes/internal/tracing"
	"github.com/likes-dev/likes/region"
)

// TestForwardedWriteIsOneTrace: a like sent to a region that does not own the
// user's range is forwarded to the owner over gRPC; the HTTP span at the
// ingress, the client span of the forward and the owner's server span form
// one trace (the client's traceparent continued), the owner's span a child of
// the ingress's across the hop, and the request id travels with it; the
// erasure relay and the replication pushes are traced across regions too.
func TestForwardedWriteIsOneTrace(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	c := startTriWith(t, triOpts{region: func(_ string, cfg *region.Config) { cfg.Tracer = tp }})
	us := c.byName["us"]
	var user string
	for _, u := range triUsers(1) {
		if triOwner(c.mustPins(t), u).Region == "eu" {
			user = u
			break
		}
	}
	if user == "" {
		t.Fatal("no user of a range pinned to eu")
	}
	const traceHex = "4bf92f3577b34da6a3ce929d0e0e4736"
	var reqID string
	attempt := 0
	c.poll(t, 20*time.Second, "a forwarded like answered 200", func() (bool, string) {
		attempt++
		reqID = fmt.Sprintf("trace-test-%d", attempt)
		req, _ := http.NewRequest("POST", us.srv.URL+"/v1/items/traced/likes", nil)
		req.Header.Set("Authorization", "Bearer "+c.token(user, false))
		req.Header.Set("Idempotency-Key", "k-traced")
		req.Header.Set("X-Request-Id", reqID)
		req.Header.Set("Traceparent", "00-"+traceHex+"-00f067aa0ba902b7-01")
		res, err := c.hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		_ = res.Body.Close()
		if got := res.Header.Get("X-Request-Id"); got != reqID {
			t.Fatalf("X-Request-Id answered %q, sent %q", got, reqID)
		}
		return res.StatusCode == http.StatusOK, res.Status
	})
	attr := func(s sdktrace.ReadOnlySpan, k attribute.Key) string {
		for _, a := range s.Attributes() {
			if a.Key == k {
				return a.Value.String()
			}
		}
		return ""
	}
	var httpSpan, client, server sdktrace.ReadOnlySpan
	c.poll(t, 10*time.Second, "the request's three spans", func() (bool, string) {
		httpSpan, client, server = nil, nil, nil
		var names []string
		for _, s := range sr.Ended() {
			if s.SpanContext().TraceID().String() != traceHex {
				continue
			}
			names = append(names, fmt.Sprintf("%s@%s(%s)", s.Name(), attr(s, tracing.RegionKey), attr(s, "likes.request_id")))
			switch {
			case s.SpanKind() == trace.SpanKindServer && strings.HasPrefix(s.Name(), "POST /v1/items/") && attr(s, "likes.request_id") == reqID:
				httpSpan = s
			case s.SpanKind() == trace.SpanKindClient && strings.HasSuffix(s.Name(), "Forward/Set") && attr(s, tracing.RegionKey) == "us":
				client = s
			case s.SpanKind() == trace.SpanKindServer && strings.HasSuffix(s.Name(), "Forward/Set") && attr(s, "likes.request_id") == reqID:
				server = s
			}
		}
		return httpSpan != nil && client != nil && server != nil, strings.Join(names, ", ")
	})
	if r := attr(httpSpan, tracing.RegionKey); r != "us" {
		t.Errorf("HTTP span made by %q, want us", r)
	}
	if httpSpan.Parent().SpanID().String() != "00f067aa0ba902b7" || !httpSpan.Parent().IsRemote() {
		t.Errorf("HTTP span's parent %v, want the client's traceparent", httpSpan.Parent())
	}
	if r := attr(server, tracing.RegionKey); r != "eu" {
		t.Errorf("owner's span made by %q, want eu", r)
	}
	if client.Parent().SpanID() != httpSpan.SpanContext().SpanID() {
		t.Errorf("forward client span's parent %v, want the HTTP span %v", client.Parent().SpanID(), httpSpan.SpanContext().SpanID())
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() || !server.Parent().IsRemote() {
		t.Errorf("owner's span's parent %v (remote %v), want the forward client span %v", server.Parent().SpanID(), server.Parent().IsRemote(), client.SpanContext().SpanID())
	}

	// The erasure relay (the user's home is eu) continues the trace the same
	// way, and the replication pushes between regions are traced too (each
	// push its own trace: they are made by the shipper's loop).
	const eraseTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	c.poll(t, 20*time.Second, "an erasure relayed to the owner", func() (bool, string) {
		req, _ := http.NewRequest("DELETE", us.srv.URL+"/v1/users/"+user, nil)
		req.Header.Set("Authorization", "Bearer "+c.token(user, false))
		req.Header.Set("Traceparent", "00-"+eraseTrace+"-10f067aa0ba902b7-01")
		res, err := c.hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK || res.StatusCode == http.StatusAccepted, res.Status
	})
	c.poll(t, 10*time.Second, "the relay's span at the owner and a replication push at a peer", func() (bool, string) {
		relayed, pushed := false, false
		for _, s := range sr.Ended() {
			if s.SpanContext().TraceID().String() == eraseTrace && s.SpanKind() == trace.SpanKindServer &&
				strings.HasSuffix(s.Name(), "Forward/Erasure") && attr(s, tracing.RegionKey) == "eu" && s.Parent().IsRemote() {
				relayed = true
			}
			if s.SpanKind() == trace.SpanKindServer && strings.HasSuffix(s.Name(), "Replication/Push") && s.Parent().IsRemote() {
				pushed = true
			}
		}
		return relayed && pushed, fmt.Sprintf("relayed %v, pushed %v", relayed, pushed)
	})
}
