package tracing

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"
)

// ErrConfig prefixes a refused tracing configuration.
var ErrConfig = errors.New("tracing: bad configuration")

// RegionKey is the span attribute naming the region that made a span.
const RegionKey = attribute.Key("likes.region")

// Config configures New.
type Config struct {
	// Endpoint is the OTLP/gRPC collector, host:port; "" exports nothing
	// (IDsOnly).
	Endpoint string
	// Insecure talks to the collector in plaintext (a loopback collector);
	// otherwise TLS verified against the system roots.
	Insecure bool
	// SampleRatio is the share of traces recorded, in (0, 1] (default 1).
	SampleRatio float64
	// Service is the resource's service.name (default "likesd").
	Service string
	// Attributes are added to the resource (e.g. likes.region for a process
	// that runs one region).
	Attributes []attribute.KeyValue
	// Exporter, when set, replaces the OTLP exporter (tests, benchmarks).
	Exporter sdktrace.SpanExporter
}

// ValidateEndpoint checks an --otlp-endpoint value: host:port.
func ValidateEndpoint(ep string) error {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("%w: --otlp-endpoint %q: want host:port: %v", ErrConfig, ep, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return fmt.Errorf("%w: --otlp-endpoint %q: want host:port with a port in 1..65535", ErrConfig, ep)
	}
	return nil
}

// Provider is the process's tracer provider.
type Provider struct {
	tp       *sdktrace.TracerProvider
	once     sync.Once
	err      error
	Exporter bool // spans are exported
}

// Propagator is the W3C trace-context propagator every hop uses.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// IDsOnly is a provider whose spans are never recorded nor exported but have
// valid trace and span ids (a fresh trace, or the caller's): what the
// process uses without an exporter, for log correlation.
func IDsOnly() trace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
}

// New builds the provider of cfg. The OTLP exporter connects lazily: a
// collector that is down loses spans (logged by the SDK's error handler),
// never requests.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.SampleRatio == 0 {
		cfg.SampleRatio = 1
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("%w: sample ratio %v outside (0, 1]", ErrConfig, cfg.SampleRatio)
	}
	if cfg.Service == "" {
		cfg.Service = "likesd"
	}
	exp := cfg.Exporter
	if exp == nil && cfg.Endpoint != "" {
		if err := ValidateEndpoint(cfg.Endpoint); err != nil {
			return nil, err
		}
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithTimeout(5 * time.Second)}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		} else {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
		}
		var err error
		if exp, err = otlptracegrpc.New(ctx, opts...); err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
	}
	if exp == nil {
		return &Provider{tp: sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))}, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(append([]attribute.KeyValue{
		attribute.String("service.name", cfg.Service)}, cfg.Attributes...)...))
	if err != nil {
		res = resource.NewSchemaless(attribute.String("service.name", cfg.Service))
	}
	ratio := sdktrace.TraceIDRatioBased(cfg.SampleRatio)
	sampler := sdktrace.ParentBased(ratio, sdktrace.WithRemoteParentSampled(ratio))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(8192), sdktrace.WithMaxExportBatchSize(1024)))
	return &Provider{tp: tp, Exporter: true}, nil
}

// TracerProvider is what components are given.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Shutdown flushes queued spans (bounded by ctx) and stops the exporter.
// Idempotent.
func (p *Provider) Shutdown(ctx context.Context) error {
	p.once.Do(func() { p.err = p.tp.Shutdown(ctx) })
	return p.err
}
