package pebblestore

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// eventLogEvery bounds how often one kind of Pebble trouble is logged: the
// first occurrence at once, then at most one line per period with the count
// of those left out (a compaction failing in a loop must not flood the log).
const eventLogEvery = 10 * time.Second

// eventLog rate-limits the lines of one kind of Pebble event.
type eventLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many were left out since the
// last line.
func (e *eventLog) allow(now time.Time) (bool, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && now.Sub(e.last) < eventLogEvery {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// loggedListener is listener with Pebble's own trouble also logged through
// the store's slog logger: each background error (a failed flush or
// compaction, rate-limited), a write stall's beginning (with Pebble's reason)
// and end, and a flush or compaction that failed. The health state changes
// are the listener's, unchanged.
func (s *Store) loggedListener() *pebble.EventListener {
	l := s.listener()
	bg, begin, end, flush, compact := l.BackgroundError, l.WriteStallBegin, l.WriteStallEnd, l.FlushEnd, l.CompactionEnd
	var bgLog, failLog eventLog
	l.BackgroundError = func(err error) {
		if ok, n := bgLog.allow(s.opts.Clock.Now()); ok {
			s.log.Error("pebble: background error", "err", err, "suppressed", n)
		}
		bg(err)
	}
	l.WriteStallBegin = func(i pebble.WriteStallBeginInfo) {
		s.log.Warn("pebble: write stall begins: writes wait for flushes or compactions", "reason", i.Reason)
		begin(i)
	}
	l.WriteStallEnd = func() {
		s.log.Info("pebble: write stall ends")
		end()
	}
	l.FlushEnd = func(i pebble.FlushInfo) {
		if i.Err != nil {
			if ok, n := failLog.allow(s.opts.Clock.Now()); ok {
				s.log.Error("pebble: flush failed", "err", i.Err, "suppressed", n)
			}
		}
		flush(i)
	}
	l.CompactionEnd = func(i pebble.CompactionInfo) {
		if i.Err != nil {
			if ok, n := failLog.allow(s.opts.Clock.Now()); ok {
				s.log.Error("pebble: compaction failed", "err", i.Err, "suppressed", n)
			}
		}
		compact(i)
	}
	return l
}
