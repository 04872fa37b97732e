package pebblestore

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/edge"
)

// ErrFatal marks a write error after which the open database is not used for
// writing again (a failed WAL write or sync, or Pebble's own Fatalf). It wraps
// edge.ErrStorageUnavailable.
var ErrFatal = fmt.Errorf("%w: pebblestore: fatal write error", edge.ErrStorageUnavailable)

var errReopening = fmt.Errorf("%w: pebblestore: the database is being reopened after a write error", edge.ErrStorageUnavailable)

// Health is a snapshot of the store's ability to write.
type Health struct {
	// Writable is false while writes are refused; Reason says why.
	Writable bool
	Reason   string
	// Since is when the current state began.
	Since time.Time
	// FreeBytes and TotalBytes are the last free-space reading (0 if none).
	FreeBytes, TotalBytes uint64
	// MinFreeBytes is the watermark below which writes are refused (0: none).
	MinFreeBytes uint64
	// RestartRequired: the database could not be closed after a fatal error
	// (Pebble failed inside one of its own goroutines); only a restart of the
	// process recovers.
	RestartRequired bool
	// Faults counts the changes from writable to refusing since Open.
	Faults uint64
}

// faults is the store's write-refusal state, guarded by Store.hmu.
type faults struct {
	lowSpace    bool // free space under the watermark
	free, total uint64
	minFree     uint64
	stalled     bool  // Pebble stalls writes (memtables or L0 over their limits)
	bg          error // a flush or compaction failed; cleared when one succeeds
	bgAt        time.Time
	fatal       error  // a commit failed, or Fatalf: the database needs reopening
	restart     bool   // the failed database could not be closed
	kind        string // the state's category: a change of kind is logged and counted
	reason      string
	since       time.Time
	count       uint64
}

func (f *faults) category() string {
	switch {
	case f.restart:
		return "restart-required"
	case f.fatal != nil:
		return "write-failed"
	case f.bg != nil:
		return "background-error"
	case f.lowSpace:
		return "low-disk-space"
	case f.stalled:
		return "write-stall"
	}
	return ""
}

func (f *faults) describe() string {
	switch {
	case f.restart:
		return "store failed and could not be reopened in-process; restart required: " + f.fatal.Error()
	case f.fatal != nil:
		return "store write failed, reopening from disk when the fault clears: " + f.fatal.Error()
	case f.bg != nil:
		return "store background flush/compaction failed: " + f.bg.Error()
	case f.lowSpace:
		return fmt.Sprintf("free disk space %s is below the --min-free-space watermark %s (writes resume above %s)",
			human(f.free), human(f.minFree), human(f.minFree+f.minFree/8))
	case f.stalled:
		return "store is stalling writes (flushes/compactions behind)"
	}
	return ""
}

func human(b uint64) string {
	const mib = 1 << 20
	if b >= mib {
		return strconv.FormatFloat(float64(b)/mib, 'f', 1, 64) + " MiB"
	}
	return strconv.FormatUint(b, 10) + " B"
}

// update changes the fault state under hmu and publishes the refusal for the
// write path. A change of the state's kind is logged once (a flush failing
// again and again, or free space moving, is not logged again).
func (s *Store) update(fn func(f *faults)) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	f := &s.faults
	fn(f)
	reason := f.describe()
	if reason == f.reason {
		return
	}
	f.reason = reason
	kind, was := f.category(), f.kind
	if reason == "" {
		s.refuse.Store(nil)
	} else {
		err := fmt.Errorf("%w: %s", edge.ErrStorageUnavailable, reason)
		if f.fatal != nil {
			err = fmt.Errorf("%w: %s", ErrFatal, reason)
		}
		s.refuse.Store(&err)
	}
	if kind == was {
		return
	}
	f.kind, f.since = kind, s.opts.Clock.Now()
	switch {
	case kind == "":
		s.log.Info("store accepts writes again", "was", was)
	case was == "":
		f.count++
		s.log.Error("store refuses writes", "state", kind, "reason", reason)
	default:
		s.log.Error("store still refuses writes", "state", kind, "was", was, "reason", reason)
	}
}

// firstLine keeps Pebble's errors (which may carry a stack trace) to one line.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// refusal is the error a write gets now, or nil. One atomic load: the hot
// path does no syscall and takes no lock.
func (s *Store) refusal() error {
	if p := s.refuse.Load(); p != nil {
		return *p
	}
	return nil
}

// Health reports whether the store can write, and why not.
func (s *Store) Health() Health {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	f := &s.faults
	return Health{
		Writable: f.reason == "", Reason: f.reason, Since: f.since,
		FreeBytes: f.free, TotalBytes: f.total, MinFreeBytes: f.minFree,
		RestartRequired: f.restart, Faults: f.count,
	}
}

// fatalPanic carries Pebble's Fatalf out of a guarded call.
type fatalPanic struct{ err error }

func (s *Store) setFatal(err error) {
	s.update(func(f *faults) {
		if f.fatal == nil {
			f.fatal = err
		}
	})
}

// guardWrite runs one write to Pebble. Writes are serialized (commitMu) so
// that after the first failed one no other write enters the broken commit
// pipeline: Pebble panics on a WAL that has failed, inside its commit lock,
// and a second writer there would wedge the database so it could not be
// closed and reopened. A panic (Pebble's Fatalf, a failed WAL write) marks the
// store failed and becomes ErrFatal: the write is not acknowledged.
func (s *Store) guardWrite(what string, fn func() error) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.fatalErr(); err != nil {
		return err
	}
	return s.guarded(what, fn)
}

func (s *Store) fatalErr() error {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.faults.fatal != nil {
		return fmt.Errorf("%w: %v", ErrFatal, s.faults.fatal)
	}
	return nil
}

// guardedFrame names guarded in stack traces: Fatalf panics only when called
// under it (a goroutine of ours that recovers), never in Pebble's own.
const guardedFrame = "github.com/likes-dev/likes/store/pebblestore.(*Store).guarded"

//go:noinline
func (s *Store) guarded(what string, fn func() error) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		ferr, ok := p.(fatalPanic)
		if !ok {
			ferr.err = fmt.Errorf("%s: %v", what, p)
			s.log.Error("pebble panicked during a write", "what", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
		s.setFatal(ferr.err)
		err = fmt.Errorf("%w: %v", ErrFatal, ferr.err)
	}()
	return fn()
}

func underGuard() bool {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == guardedFrame {
			return true
		}
		if !more {
			return false
		}
	}
}

// pebbleLogger routes Pebble's messages to the store's logger. Pebble calls
// Fatalf when it cannot go on (a failed commit, a failed MANIFEST write) and
// goes on as if nothing happened if Fatalf returns (a commit would then
// report success for a batch whose WAL sync failed), so Fatalf never returns:
// under guarded it panics to be recovered there; in one of Pebble's own
// goroutines it parks that goroutine forever, the database is left as a crash
// would leave it, and the store asks for a restart.
type pebbleLogger struct{ s *Store }

func (l pebbleLogger) Infof(string, ...any) {}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.s.log.Warn("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	err := errors.New(strings.TrimSpace(fmt.Sprintf(format, args...)))
	if i := strings.IndexByte(err.Error(), '\n'); i > 0 {
		err = errors.New(err.Error()[:i])
	}
	if underGuard() {
		panic(fatalPanic{err: err})
	}
	l.s.update(func(f *faults) {
		if f.fatal == nil {
			f.fatal = err
		}
		f.restart = true
	})
	select {}
}

// listener turns Pebble's events into fault state.
func (s *Store) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			s.update(func(f *faults) { f.bg, f.bgAt = err, s.opts.Clock.Now() })
		},
		FlushEnd: func(i pebble.FlushInfo) {
			if i.Err == nil {
				s.update(func(f *faults) { f.bg = nil })
			}
		},
		CompactionEnd: func(i pebble.CompactionInfo) {
			if i.Err == nil {
				s.update(func(f *faults) { f.bg = nil })
			}
		},
		WriteStallBegin: func(pebble.WriteStallBeginInfo) { s.update(func(f *faults) { f.stalled = true }) },
		WriteStallEnd:   func() { s.update(func(f *faults) { f.stalled = false }) },
		DiskSlow: func(i pebble.DiskSlowInfo) {
			s.log.Warn("pebble: slow disk", "info", i.String())
		},
	}
}

// freeSpace reads the free space of the data folder.
func (s *Store) freeSpace() (free, total uint64, err error) {
	if s.opts.FreeSpace != nil {
		return s.opts.FreeSpace()
	}
	du, err := s.fs.GetDiskUsage(s.opts.Dir)
	return du.AvailBytes, du.TotalBytes, err
}

// checkSpace refreshes the low-space state. Writes resume only once free
// space is back above the watermark plus an eighth, so a disk hovering at the
// watermark does not flap.
func (s *Store) checkSpace() {
	if s.opts.MinFreeBytes == 0 && s.opts.MinFreeFraction == 0 {
		return
	}
	free, total, err := s.freeSpace()
	if err != nil {
		if !s.spaceErrLogged {
			s.spaceErrLogged = true
			s.log.Warn("cannot read free disk space; the low-space watermark is not enforced", "err", err)
		}
		return
	}
	min := max(s.opts.MinFreeBytes, uint64(s.opts.MinFreeFraction*float64(total)))
	s.update(func(f *faults) {
		f.free, f.total, f.minFree = free, total, min
		if f.lowSpace {
			f.lowSpace = free < min+min/8
		} else {
			f.lowSpace = free < min
		}
	})
}

// probe writes and syncs a small file next to the database: the cheapest
// proof that the filesystem takes writes again.
func (s *Store) probe() error {
	name := s.fs.PathJoin(s.opts.Dir, "write-probe.tmp")
	f, err := s.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, werr := f.Write(make([]byte, 4096))
	if werr == nil {
		werr = f.Sync()
	}
	cerr := f.Close()
	rerr := s.fs.Remove(name)
	return errors.Join(werr, cerr, rerr)
}

// monitor refreshes free space and recovers from faults, once per
// SpaceCheckInterval on the store's clock.
func (s *Store) monitor() {
	defer close(s.monitorDone)
	t := s.opts.Clock.NewTicker(s.opts.SpaceCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C():
		}
		s.tick()
	}
}

// CheckHealth runs one round of the monitor now: free space, and recovery
// from a fault that has cleared (tests drive it instead of a clock).
func (s *Store) CheckHealth() { s.tick() }

func (s *Store) tick() {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	s.checkSpace()
	s.hmu.Lock()
	f := s.faults
	s.hmu.Unlock()
	now := s.opts.Clock.Now()
	switch {
	case f.restart:
	case f.fatal != nil:
		if f.lowSpace {
			return
		}
		if err := s.probe(); err != nil {
			return
		}
		s.reopen()
	case f.bg != nil && now.Sub(f.bgAt) >= s.opts.SpaceCheckInterval:
		// No flush or compaction has failed for a while and the filesystem
		// takes writes: let writes in; a flush that fails again says so.
		if s.probe() == nil {
			s.update(func(f *faults) {
				if !f.bgAt.After(now.Add(-s.opts.SpaceCheckInterval)) {
					f.bg = nil
				}
			})
		}
	}
}

// reopen closes the failed database and opens it again from what is on disk:
// exactly what was durable (every acknowledged write; perhaps some of the
// refused ones whose bytes reached the disk anyway, which their retries then
// replay as the stored answer). The failed WAL is never synced again to
// acknowledge anything: the writes it held were already refused.
//
// Writes stay refused throughout (the fatal error is cleared last), so it
// needs no write lock; holding one while waiting for the old database's users
// would deadlock with a writer that holds a batch and waits for that lock.
func (s *Store) reopen() {
	if old := s.db.detach(); old != nil {
		closed := make(chan error, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					closed <- fmt.Errorf("close panicked: %v", p)
				}
			}()
			old.refs.Wait()
			closed <- old.db.Close()
		}()
		t := s.opts.Clock.NewTicker(s.opts.CloseTimeout)
		select {
		case err := <-closed:
			t.Stop()
			if err != nil {
				s.log.Warn("closing the failed database", "err", firstLine(err))
			}
		case <-t.C():
			t.Stop()
			s.update(func(f *faults) { f.restart = true })
			return
		}
	}
	db, err := s.openDB()
	if err != nil {
		s.log.Warn("reopening the database failed; retrying", "err", firstLine(err))
		return
	}
	s.cellMu.Lock()
	s.db.attach(db)
	err = s.loadCellSeq()
	s.cellMu.Unlock()
	if err == nil {
		err = s.loadHeads()
	}
	if err != nil {
		s.log.Warn("reloading positions after reopen failed; retrying", "err", err)
		if g := s.db.detach(); g != nil {
			g.refs.Wait()
			_ = g.db.Close()
		}
		return
	}
	s.update(func(f *faults) { f.fatal, f.bg, f.stalled = nil, nil, false })
}

// openDB opens Pebble under the guard (Pebble may call Fatalf during Open).
func (s *Store) openDB() (*pebble.DB, error) {
	var db *pebble.DB
	err := s.guarded("open", func() error {
		cache := pebble.NewCache(s.opts.CacheBytes)
		defer cache.Unref()
		po := &pebble.Options{FS: s.opts.FS, Logger: pebbleLogger{s: s}, EventListener: s.loggedListener(), Cache: cache}
		var err error
		db, err = pebble.Open(s.opts.Dir, po)
		return err
	})
	if err != nil {
		// A Fatalf during Open marked the store failed; a later probe retries.
		return nil, fmt.Errorf("pebblestore: open %s: %w", s.opts.Dir, err)
	}
	return db, nil
}
