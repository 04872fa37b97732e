package tracing

import (
	"context"
	"log/slog"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// traced leaves health checks out of tracing (a load balancer's probes).
func traced(info *stats.RPCTagInfo) bool {
	return !strings.HasPrefix(info.FullMethodName, "/grpc.health.")
}

// requestIDAttr is the span attribute of the request id.
const requestIDAttr = attribute.Key("likes.request_id")

func otelOptions(tp trace.TracerProvider, region string) []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithSpanAttributes(RegionKey.String(region)), otelgrpc.WithFilter(traced),
	}
}

// ServerOptions instrument a region's gRPC server: a server span per call
// continuing the caller's traceparent, the caller's request id (when sane)
// in the handler's context, and a debug line per call that carried one. A
// nil tp traces nothing (the request id still travels).
func ServerOptions(tp trace.TracerProvider, region string, logger *slog.Logger) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if tp != nil {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelOptions(tp, region)...)))
	}
	return append(opts, grpc.ChainUnaryInterceptor(serverRequestID(logger)))
}

// DialOptions instrument a connection to a peer region: a client span per
// call, traceparent and the request id of the context sent as metadata.
func DialOptions(tp trace.TracerProvider, region string) []grpc.DialOption {
	var opts []grpc.DialOption
	if tp != nil {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelOptions(tp, region)...)))
	}
	return append(opts, grpc.WithChainUnaryInterceptor(clientRequestID))
}

func clientRequestID(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := RequestID(ctx); id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, requestIDKey, id)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func serverRequestID(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		vs := md.Get(requestIDKey)
		if len(vs) == 0 || !SaneRequestID(vs[0]) {
			return handler(ctx, req)
		}
		id := vs[0]
		ctx = WithRequestID(ctx, id)
		trace.SpanFromContext(ctx).SetAttributes(requestIDAttr.String(id))
		resp, err := handler(ctx, req)
		if logger != nil && logger.Enabled(ctx, slog.LevelDebug) {
			logger.LogAttrs(context.Background(), slog.LevelDebug, "rpc", slog.String("method", info.FullMethod),
				slog.String("code", status.Code(err).String()), slog.String("request_id", id),
				slog.String("trace_id", trace.SpanContextFromContext(ctx).TraceID().String()))
		}
		return resp, err
	}
}
