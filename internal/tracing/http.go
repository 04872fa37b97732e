package tracing

import (
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/likes-dev/likes/clock"
)

// scope is the instrumentation scope of likes' own spans.
const scope = "github.com/likes-dev/likes"

// HTTPConfig configures HTTP.
type HTTPConfig struct {
	// Tracer makes the server spans (nil: none; request ids still work).
	Tracer trace.TracerProvider
	// Logger gets one line per request (nil: none): debug for answers below
	// 500, info for 5xx but 500, error for 500.
	Logger *slog.Logger
	// Region is the span attribute likes.region.
	Region string
	Clock  clock.Clock
}

// HTTP wraps next: every response carries X-Request-Id (the request's when
// SaneRequestID, else a new one), the request runs in a server span that
// continues the request's traceparent, and one log line names the method,
// route, status, duration, request id and trace id.
func HTTP(cfg HTTPConfig, next http.Handler) http.Handler {
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	tracer := cfg.Tracer.Tracer(scope)
	prop := Propagator()
	region := RegionKey.String(cfg.Region)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := cfg.Clock.Now()
		id := r.Header.Get(RequestIDHeader)
		replaced := id != "" && !SaneRequestID(id)
		if !SaneRequestID(id) {
			id = NewRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(region, attribute.String("http.request.method", r.Method),
				attribute.String("url.path", r.URL.Path), requestIDAttr.String(id)))
		ctx = WithRequestID(ctx, id)
		rec := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r2 := r.WithContext(ctx)
		next.ServeHTTP(rec, r2)
		route := r2.Pattern
		if route == "" {
			route = r.Method + " (unrouted)"
		}
		span.SetName(route)
		span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", rec.code))
		if rec.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(rec.code))
		}
		span.End()
		if cfg.Logger == nil {
			return
		}
		level := slog.LevelDebug
		switch {
		case rec.code == http.StatusInternalServerError:
			level = slog.LevelError
		case rec.code >= 500:
			level = slog.LevelInfo
		}
		if !cfg.Logger.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
			slog.Int("status", rec.code), slog.Float64("duration_ms", float64(cfg.Clock.Now().Sub(start).Microseconds())/1000),
			slog.String("request_id", id), slog.String("trace_id", span.SpanContext().TraceID().String()),
		}
		if replaced {
			attrs = append(attrs, slog.Bool("request_id_replaced", true))
		}
		// Logged without ctx: the ids are explicit attributes here.
		cfg.Logger.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}

// statusWriter records the answer's status code.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
