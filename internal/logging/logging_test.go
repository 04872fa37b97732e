package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		ok            bool
		want          Options
	}{
		{"text", "info", true, Options{FormatText, slog.LevelInfo}},
		{"json", "debug", true, Options{FormatJSON, slog.LevelDebug}},
		{"JSON", "WARN", true, Options{FormatJSON, slog.LevelWarn}},
		{"text", "error", true, Options{FormatText, slog.LevelError}},
		{"xml", "info", false, Options{}},
		{"text", "verbose", false, Options{}},
		{"", "", false, Options{}},
	} {
		got, err := Parse(tc.format, tc.level)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("Parse(%q, %q) = %+v, %v", tc.format, tc.level, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadFlag) {
			t.Errorf("Parse(%q, %q): error %v does not wrap ErrBadFlag", tc.format, tc.level, err)
		}
	}
}

func TestJSONWithTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	lg := New(&buf, Options{Format: FormatJSON, Level: slog.LevelInfo})
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	lg.With("region", "us").InfoContext(ctx, "hello", "n", 1)
	lg.Debug("dropped")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
	}
	if m["msg"] != "hello" || m["trace_id"] != tid.String() || m["span_id"] != sid.String() || m["region"] != "us" {
		t.Fatalf("line %v", m)
	}
}

// TestZapBridge: zap entries land in the slog handler with their levels
// mapped, fields as attributes, and nothing below the bridge's minimum.
func TestZapBridge(t *testing.T) {
	var buf bytes.Buffer
	lg := New(&buf, Options{Format: FormatJSON, Level: slog.LevelDebug})
	z := Zap(lg, "etcd", zapcore.InfoLevel).Named("raft").With(zap.String("member", "m1"))
	z.Debug("below the minimum")
	z.Info("became leader", zap.Uint64("term", 2))
	z.Warn("slow fdatasync", zap.Duration("took", 1500000000))
	z.Error("lost quorum", zap.Error(errors.New("boom")))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %d:\n%s", len(lines), buf.String())
	}
	want := []struct{ level, msg string }{{"INFO", "became leader"}, {"WARN", "slow fdatasync"}, {"ERROR", "lost quorum"}}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["level"] != want[i].level || m["msg"] != want[i].msg || m["component"] != "etcd" || m["logger"] != "raft" || m["member"] != "m1" {
			t.Errorf("line %d: %v", i, m)
		}
	}
	if !strings.Contains(lines[0], `"term":2`) || !strings.Contains(lines[2], `"error":"boom"`) {
		t.Errorf("fields missing:\n%s", buf.String())
	}
	// The handler's own level applies too.
	buf.Reset()
	z2 := Zap(New(&buf, Options{Format: FormatText, Level: slog.LevelError}), "etcd-client", zapcore.DebugLevel)
	z2.Warn("retrying")
	z2.Error("failed")
	if s := buf.String(); strings.Contains(s, "retrying") || !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "component=etcd-client") {
		t.Fatalf("text line %q", s)
	}
	// A demoted entry is debug: dropped at info.
	buf.Reset()
	z3 := ZapDemoting(New(&buf, Options{Format: FormatText, Level: slog.LevelInfo}), "etcd", zapcore.WarnLevel, ClosedConn)
	z3.Error("setting up serving failed", zap.Error(errors.New("accept tcp 127.0.0.1:2379: use of closed network connection")))
	z3.Error("real failure", zap.Error(errors.New("disk full")))
	if s := buf.String(); strings.Contains(s, "setting up") || !strings.Contains(s, "real failure") {
		t.Fatalf("demoting: %q", s)
	}
	for l, want := range map[zapcore.Level]slog.Level{zapcore.DebugLevel: slog.LevelDebug, zapcore.InfoLevel: slog.LevelInfo,
		zapcore.WarnLevel: slog.LevelWarn, zapcore.ErrorLevel: slog.LevelError, zapcore.DPanicLevel: slog.LevelError, zapcore.FatalLevel: slog.LevelError} {
		if got := SlogLevel(l); got != want {
			t.Errorf("SlogLevel(%v) = %v, want %v", l, got, want)
		}
	}
}
