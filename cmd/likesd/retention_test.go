package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/store/pebblestore"
)

// TestLogRetentionFlag: --log-retention is validated before anything listens;
// its default is seed 000's 7 days and 0 keeps everything.
func TestLogRetentionFlag(t *testing.T) {
	for _, bad := range []string{"5m", "-1h", "soon"} {
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"run", "--region", "us", "--log-retention", bad}, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "log-retention") {
			t.Errorf("--log-retention %s: %v, want a refusal naming the flag", bad, err)
		}
	}
	var l lifecycleFlags
	fs := newTestFlagSet()
	l.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c := l.config(); c.LogRetention != pebblestore.DefaultRetention || c.BootstrapFromPeers {
		t.Fatalf("defaults %+v", c)
	}
	if err := fs.Parse([]string{"--log-retention", "0", "--bootstrap-from-peers"}); err != nil {
		t.Fatal(err)
	}
	if c := l.config(); c.LogRetention >= 0 || !c.BootstrapFromPeers {
		t.Fatalf("0 and bootstrap: %+v", c)
	}
	if err := fs.Parse([]string{"--log-retention", "72h"}); err != nil {
		t.Fatal(err)
	}
	if c := l.config(); c.LogRetention != 72*time.Hour {
		t.Fatalf("72h: %+v", c)
	}
}

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	return fs
}
