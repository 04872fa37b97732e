package pebblestore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPebbleEventsLogged: Pebble's background errors, write stalls and
// failed compactions reach the store's slog logger; a repeated background
// error is logged once per period with the count left out.
func TestPebbleEventsLogged(t *testing.T) {
	var logs lockedBuf
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s, err := Open(Options{Dir: "/db", FS: vfs.NewMem(), Region: "r1", Partitions: 2, CacheBytes: 1 << 20, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := s.loggedListener()
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	l.WriteStallEnd()
	for range 3 {
		l.BackgroundError(errors.New("compaction: no space left on device"))
	}
	clk.Advance(eventLogEvery)
	l.BackgroundError(errors.New("compaction: no space left on device"))
	l.CompactionEnd(pebble.CompactionInfo{Err: errors.New("checksum mismatch")})
	out := logs.String()
	for _, want := range []string{
		`msg="pebble: write stall begins`, `reason="memtable count limit reached"`, `msg="pebble: write stall ends"`,
		`msg="pebble: compaction failed"`, "checksum mismatch",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, `msg="pebble: background error"`); n != 2 {
		t.Errorf("background error logged %d times, want 2 (then rate-limited):\n%s", n, out)
	}
	if !strings.Contains(out, "suppressed=2") {
		t.Errorf("the second line does not count the 2 left out:\n%s", out)
	}
}
