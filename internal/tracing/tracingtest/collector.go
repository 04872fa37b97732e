// Package tracingtest is a stand-in OTLP/gRPC trace collector on loopback,
// for tests and measurements of the exporter (it counts what it receives and
// keeps nothing else). Safe for concurrent use; Close is idempotent.
package tracingtest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Collector accepts OTLP trace exports in plaintext.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	srv     *grpc.Server
	ln      net.Listener
	done    chan struct{}
	once    sync.Once
	spans   atomic.Int64
	exports atomic.Int64
	mu      sync.Mutex
	names   map[string]int
}

// Start listens on 127.0.0.1 (a free port) and serves.
func Start() (*Collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Collector{srv: grpc.NewServer(), ln: ln, done: make(chan struct{}), names: map[string]int{}}
	coltracepb.RegisterTraceServiceServer(c.srv, c)
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(ln)
	}()
	return c, nil
}

// Addr is the collector's host:port.
func (c *Collector) Addr() string { return c.ln.Addr().String() }

// Export implements the OTLP trace service.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.exports.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans.Add(1)
				if len(c.names) < 1000 {
					c.names[s.GetName()]++
				}
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans is how many spans arrived; Exports in how many requests.
func (c *Collector) Spans() int64   { return c.spans.Load() }
func (c *Collector) Exports() int64 { return c.exports.Load() }

// Names counts the spans received by name (the first 1000 names).
func (c *Collector) Names() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.names))
	for k, v := range c.names {
		out[k] = v
	}
	return out
}

// Close stops the server. Idempotent.
func (c *Collector) Close() {
	c.once.Do(func() {
		c.srv.Stop()
		<-c.done
	})
}
