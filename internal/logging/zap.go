package logging

import (
	"context"
	"log/slog"
	"sort"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Zap returns a *zap.Logger whose entries go to logger's handler, at min and
// above (zap's levels mapped onto slog's), each with the attribute
// component=name. Use it for etcd's embedded server and its client.
func Zap(logger *slog.Logger, name string, min zapcore.Level) *zap.Logger {
	return ZapDemoting(logger, name, min, nil)
}

// ZapDemoting is Zap where an entry for which demote returns true is logged
// at debug whatever its level (e.g. etcd's own listener shutdown, which it
// reports as errors).
func ZapDemoting(logger *slog.Logger, name string, min zapcore.Level, demote func(zapcore.Entry, []zapcore.Field) bool) *zap.Logger {
	h := logger.Handler()
	if name != "" {
		h = h.WithAttrs([]slog.Attr{slog.String("component", name)})
	}
	return zap.New(&zapCore{h: h, min: min, demote: demote})
}

// ClosedConn reports whether an entry is about a listener or connection
// closed on purpose ("use of closed network connection" in a field or the
// message): a demote function for ZapDemoting.
func ClosedConn(e zapcore.Entry, fs []zapcore.Field) bool {
	const closed = "use of closed network connection"
	if strings.Contains(e.Message, closed) {
		return true
	}
	for _, f := range fs {
		if err, ok := f.Interface.(error); ok && err != nil && strings.Contains(err.Error(), closed) {
			return true
		}
		if strings.Contains(f.String, closed) {
			return true
		}
	}
	return false
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
	h      slog.Handler
	min    zapcore.Level
	demote func(zapcore.Entry, []zapcore.Field) bool
}

func (c *zapCore) Enabled(l zapcore.Level) bool {
	return l >= c.min && c.h.Enabled(context.Background(), SlogLevel(l))
}

func (c *zapCore) With(fs []zapcore.Field) zapcore.Core {
	return &zapCore{h: c.h.WithAttrs(attrs(fs)), min: c.min, demote: c.demote}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	level := SlogLevel(e.Level)
	if c.demote != nil && c.demote(e, fs) {
		if level = slog.LevelDebug; !c.h.Enabled(context.Background(), level) {
			return nil
		}
	}
	r := slog.NewRecord(e.Time, level, e.Message, 0)
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
