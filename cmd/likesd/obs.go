package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/logging"
	"github.com/likes-dev/likes/internal/tracing"
)

// errObs prefixes a refused logging, tracing or admin flag.
var errObs = errors.New("observability")

// obsFlags are the logging, tracing and admin-listener flags.
type obsFlags struct {
	logFormat, logLevel string
	otlpEndpoint        string
	otlpInsecure        bool
	sampleRatio         float64
	admin               adminFlags

	// started is what start built (nil before).
	started *observability
}

func (o *obsFlags) register(fs *flag.FlagSet, dev bool) {
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text (key=value lines) or json (one object per line)")
	fs.StringVar(&o.logLevel, "log-level", "info", "lowest level logged: debug (also one line per request), info, warn or error")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "export traces over OTLP/gRPC to this collector, host:port (empty: no export; trace ids are still made for the logs)")
	fs.BoolVar(&o.otlpInsecure, "otlp-insecure", false, "talk to --otlp-endpoint in plaintext (a collector on loopback); otherwise TLS")
	fs.Float64Var(&o.sampleRatio, "trace-sample-ratio", 1, "share of traces recorded and exported, in (0, 1] (decided on the trace id, so every region keeps or drops the same traces)")
	o.admin.register(fs, dev)
}

// observability is the process's logger and tracer provider, and its admin
// listener once started.
type observability struct {
	logger *slog.Logger
	tp     *tracing.Provider
	admin  *adminServer
}

// start validates the flags and builds the logger and the tracer provider
// (region names the one region of `likesd run`, "" for dev). Nothing listens
// yet.
func (o *obsFlags) start(stderr io.Writer, region string) (*observability, error) {
	lo, err := logging.Parse(o.logFormat, o.logLevel)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errObs, err)
	}
	if o.otlpEndpoint != "" {
		if err := tracing.ValidateEndpoint(o.otlpEndpoint); err != nil {
			return nil, fmt.Errorf("%w: %w", errObs, err)
		}
	} else if o.otlpInsecure {
		return nil, fmt.Errorf("%w: --otlp-insecure needs --otlp-endpoint", errObs)
	}
	if o.sampleRatio <= 0 || o.sampleRatio > 1 {
		return nil, fmt.Errorf("%w: --trace-sample-ratio %v outside (0, 1]", errObs, o.sampleRatio)
	}
	if err := o.admin.validate(); err != nil {
		return nil, err
	}
	ob := &observability{logger: logging.New(stderr, lo)}
	// The SDK's own errors (an unreachable collector) go to the same handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { ob.logger.Warn("tracing: export failed", "err", err) }))
	var attrs []attribute.KeyValue
	if region != "" {
		attrs = append(attrs, tracing.RegionKey.String(region))
	}
	ob.tp, err = tracing.New(context.Background(), tracing.Config{Endpoint: o.otlpEndpoint, Insecure: o.otlpInsecure, SampleRatio: o.sampleRatio, Attributes: attrs})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errObs, err)
	}
	if o.otlpEndpoint != "" {
		host, _, _ := net.SplitHostPort(o.otlpEndpoint)
		if o.otlpInsecure && !isLoopback(host) {
			ob.logger.Warn("INSECURE: traces go to a collector beyond loopback in plaintext (--otlp-insecure)", "endpoint", o.otlpEndpoint)
		}
		ob.logger.Info("exporting traces over OTLP/gRPC", "endpoint", o.otlpEndpoint, "tls", !o.otlpInsecure, "sample_ratio", o.sampleRatio)
	}
	o.started = ob
	return ob, nil
}

// tracer is the started provider (nil before start: region.Open's default).
func (o *obsFlags) tracer() trace.TracerProvider {
	if o.started == nil {
		return nil
	}
	return o.started.tracer()
}

// tracer is the provider the regions are given.
func (ob *observability) tracer() trace.TracerProvider { return ob.tp.TracerProvider() }

// zap is a zap logger into the process's handler for etcd's server or
// client: warnings and errors only (etcd is chatty at info), or everything
// from debug when the process logs debug.
func (ob *observability) zap(component string) *zap.Logger {
	min := zapcore.WarnLevel
	if ob.logger.Enabled(context.Background(), slog.LevelDebug) {
		min = zapcore.DebugLevel
	}
	return logging.ZapDemoting(ob.logger, component, min, logging.ClosedConn)
}

// close stops the admin listener and flushes the spans (bounded). Idempotent.
func (ob *observability) close() {
	if ob.admin != nil {
		ob.admin.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ob.tp.Shutdown(ctx); err != nil {
		ob.logger.Warn("tracing: flushing spans at shutdown", "err", err)
	}
}

// etcdClient adds the bridged logger to an etcd client configuration.
func (ob *observability) etcdClient(c etcdepoch.ClientConfig) etcdepoch.ClientConfig {
	c.Logger = ob.zap("etcd-client")
	return c
}
