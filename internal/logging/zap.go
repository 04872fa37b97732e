package logging

import (
	"context"
	"log/slog"
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Zap returns a *zap.Logger whose entries go to logger's handler, at min and
// above (zap's levels mapped onto slog's), each with the attribute
// component=name. Use it for etcd's embedded server and its client.
func Zap(logger *slog.Logger, name string, min zapcore.Level) *zap.Logger {
	h := logger.Handler()
	if name != "" {
		h = h.WithAttrs([]slog.Attr{slog.String("component", name)})
	}
	return zap.New(&zapCore{h: h, min: min})
}

// SlogLevel maps a zap level onto slog's: debug, info, warn, and error for
// error and everything above (dpanic, panic, fatal: zap itself panics or
// exits after writing those).
func SlogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// zapCore is a zapcore.Core over a slog.Handler.
type zapCore struct {
	h   slog.Handler
	min zapcore.Level
}

func (c *zapCore) Enabled(l zapcore.Level) bool {
	return l >= c.min && c.h.Enabled(context.Background(), SlogLevel(l))
}

func (c *zapCore) With(fs []zapcore.Field) zapcore.Core {
	return &zapCore{h: c.h.WithAttrs(attrs(fs)), min: c.min}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	r := slog.NewRecord(e.Time, SlogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	if e.Caller.Defined {
		r.AddAttrs(slog.String("caller", e.Caller.TrimmedPath()))
	}
	r.AddAttrs(attrs(fs)...)
	return c.h.Handle(context.Background(), r)
}

func (c *zapCore) Sync() error { return nil }

// attrs encodes zap fields as slog attributes, sorted by key.
func attrs(fs []zapcore.Field) []slog.Attr {
	if len(fs) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		out = append(out, slog.Any(k, enc.Fields[k]))
	}
	return out
}
