package logging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// ErrBadFlag prefixes a refused --log-format or --log-level value.
var ErrBadFlag = errors.New("logging: bad flag")

// Format is how log lines are written.
type Format string

// The formats: logfmt-style text lines, or one JSON object per line.
const (
	FormatText Format = "text"
	FormatJSON Format = "json"
)

// ParseFormat validates a --log-format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatText, FormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("%w: --log-format %q: want json or text", ErrBadFlag, s)
}

// ParseLevel validates a --log-level value.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", ErrBadFlag, s)
}

// Options are the validated flags.
type Options struct {
	Format Format
	Level  slog.Level
}

// Parse validates both flags.
func Parse(format, level string) (Options, error) {
	f, err1 := ParseFormat(format)
	l, err2 := ParseLevel(level)
	if err := errors.Join(err1, err2); err != nil {
		return Options{}, err
	}
	return Options{Format: f, Level: l}, nil
}

// New returns the process's logger writing to w. A record logged with a
// context that carries a span (logger.InfoContext(ctx, …)) gets its
// trace_id and span_id attributes.
func New(w io.Writer, o Options) *slog.Logger {
	ho := &slog.HandlerOptions{Level: o.Level}
	var h slog.Handler
	if o.Format == FormatJSON {
		h = slog.NewJSONHandler(w, ho)
	} else {
		h = slog.NewTextHandler(w, ho)
	}
	return slog.New(traceHandler{h})
}

// traceHandler adds the trace and span ids of the record's context.
type traceHandler struct{ slog.Handler }

func (t traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return t.Handler.Handle(ctx, r)
}

func (t traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{t.Handler.WithAttrs(as)}
}

func (t traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{t.Handler.WithGroup(name)}
}
