// Package tracing is likes' OpenTelemetry plumbing and its request ids.
//
// Role: New builds the process's TracerProvider (an OTLP/gRPC exporter when
// Config.Endpoint is set; otherwise IDsOnly: spans that are never recorded
// or exported but still carry trace ids, so log lines correlate across
// regions at no export cost). HTTP wraps the public handler: a request id on
// every response (X-Request-Id, accepted from the request when sane, else
// made), a server span continuing a W3C traceparent, and one log line per
// request carrying both ids. ServerOptions and DialOptions instrument the
// region-to-region gRPC plane (otelgrpc stats handlers; traceparent and the
// request id travel in gRPC metadata), so a forwarded write, a replication
// push, a catch-up question and an erasure relay continue the caller's trace
// at the peer.
//
// Trust: a request id from outside is at most MaxRequestIDLen visible ASCII
// characters (0x21..0x7e) or it is replaced; a traceparent is parsed by the
// W3C propagator (malformed ones start a new trace), and a remote parent's
// "sampled" flag cannot raise sampling above the configured ratio (the ratio
// sampler decides on the trace id, so every region sampling at the same ratio
// keeps or drops a whole trace).
//
// Concurrency: everything here is safe for concurrent use; Provider.Shutdown
// is idempotent and flushes the exporter's queue, bounded by its context.
package tracing
