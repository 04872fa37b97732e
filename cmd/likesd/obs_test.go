package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestObservabilityFlags: a bad logging, tracing or admin flag is refused
// with a message naming it, before anything listens.
func TestObservabilityFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dev", "--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"dev", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"run", "--region", "us", "--log-format", "yaml"}, `--log-format "yaml"`},
		{[]string{"run", "--region", "us", "--log-level", "trace"}, `--log-level "trace"`},
		{[]string{"dev", "--otlp-endpoint", "collector"}, "--otlp-endpoint"},
		{[]string{"run", "--region", "us", "--otlp-endpoint", "host:0"}, "--otlp-endpoint"},
		{[]string{"dev", "--otlp-insecure"}, "--otlp-insecure needs --otlp-endpoint"},
		{[]string{"dev", "--trace-sample-ratio", "0"}, "--trace-sample-ratio"},
		{[]string{"dev", "--trace-sample-ratio", "1.5"}, "--trace-sample-ratio"},
		{[]string{"dev", "--admin-listen", "6060"}, "--admin-listen"},
		{[]string{"dev", "--admin-tls-cert", "c.pem"}, "--admin-tls-cert and --admin-tls-key go together"},
		{[]string{"run", "--region", "us", "--admin-tls-cert", "c.pem", "--admin-tls-key", "k.pem"}, "--admin-tls-cert needs --admin-listen"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("likesd %s: error %v, want one mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestLoggingFlagsTakeEffect: --log-format json writes JSON lines at the
// chosen level; the defaults are text at info (obsFlags.start).
func TestLoggingFlagsTakeEffect(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		check         func(string) bool
	}{
		{"json", "warn", func(s string) bool {
			return strings.HasPrefix(s, `{"time":`) && strings.Contains(s, `"level":"WARN"`) && !strings.Contains(s, "info line")
		}},
		{"text", "info", func(s string) bool {
			return strings.Contains(s, "level=WARN") && strings.Contains(s, `msg="info line"`) && !strings.Contains(s, "debug line")
		}},
		{"text", "debug", func(s string) bool { return strings.Contains(s, `msg="debug line"`) }},
	} {
		var buf bytes.Buffer
		o := obsFlags{logFormat: tc.format, logLevel: tc.level, sampleRatio: 1}
		ob, err := o.start(&buf, "us")
		if err != nil {
			t.Fatal(err)
		}
		ob.logger.Debug("debug line")
		ob.logger.Info("info line")
		ob.logger.Warn("warn line")
		ob.zap("etcd").Info("etcd chatter below warn unless debug")
		ob.close()
		if !tc.check(buf.String()) {
			t.Errorf("--log-format %s --log-level %s wrote:\n%s", tc.format, tc.level, buf.String())
		}
		if strings.Contains(buf.String(), "etcd chatter") != (tc.level == "debug") {
			t.Errorf("--log-level %s: etcd's info line %v", tc.level, buf.String())
		}
	}
}
