package edge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
)

// Erasure job states.
const (
	ErasureRunning = "running"
	ErasureDone    = "done"
)

// ErasureJob is the durable progress of one account erasure.
type ErasureJob struct {
	User       string `json:"userId"`
	State      string `json:"state"`
	Edges      int    `json:"edgesErased"`
	Unliked    int    `json:"likesRemoved"`
	StartedAt  int64  `json:"startedAtMs"`
	FinishedAt int64  `json:"finishedAtMs,omitempty"`
	Cursor     string `json:"-"` // last item processed
	// Remote marks a replica of a job another region runs (the user's home
	// when the erasure started): it blocks the user's writes here, and this
	// region's Eraser leaves it to its origin unless Start is called here
	// (the user's range moved here and the request was repeated).
	Remote bool `json:"remote,omitempty"`
	// Late counts the times an edge of the user that is not ERASED arrived by
	// replication after the job had started here (an old owner's
	// acknowledged but unreplicated write after an unplanned failover, or a
	// write of an owner that had not yet heard of the erasure). Each arrival
	// re-opens the job (ReopenLate); a store keeps the re-opening against a
	// step that read the job before it (MergeJob).
	Late int `json:"lateArrivals,omitempty"`
}

// ReopenLate is the job after a non-ERASED edge of its user arrived by
// replication at the region that runs it: running again from the start of the
// user's item index, which holds that edge (PurgeUser keeps the index entries
// of edges that are not ERASED). A Remote job is left to its origin, which
// receives the same edge. The erasure itself goes through the normal write
// path (Service.Erase, forwarded to the range's owner), so the owner's branch
// record of the edge, or the tombstone's own delta, cancels the late +1 exactly
// once: the tombstone's write is the edge's newest version, and any other
// region's later tombstone of it is a no-op or is telescoped by the same rule.
func ReopenLate(j ErasureJob) ErasureJob {
	if j.Remote {
		return j
	}
	j.State, j.Cursor, j.FinishedAt = ErasureRunning, "", 0
	j.Late++
	return j
}

// MergeJob is the job a JobStore keeps when next is written over stored: a job
// re-opened by a late edge after next's step read it stays re-opened (running,
// from the start), so a step that finishes concurrently cannot mark it done
// past an edge it never listed.
func MergeJob(stored, next ErasureJob) ErasureJob {
	if !stored.Remote && !next.Remote && stored.Late > next.Late {
		next.State, next.Cursor, next.FinishedAt, next.Late = ErasureRunning, "", 0, stored.Late
	}
	return next
}

// JobStore persists erasure jobs. PutErasure of a new job must be ordered with
// Store.Apply: once it returns, every later Apply for the user sees the user as
// erased (ActErased) except erasure writes. PutErasure writes MergeJob(stored,
// j); a store that applies replicated edges re-opens the job (ReopenLate) in
// the same atomic write as a non-ERASED edge of its user.
type JobStore interface {
	PutErasure(ctx context.Context, j ErasureJob) error
	Erasure(ctx context.Context, user string) (ErasureJob, bool, error)
	Erasures(ctx context.Context) ([]ErasureJob, error)
}

// EraserConfig configures an Eraser.
type EraserConfig struct {
	Service *Service
	Store   Store
	Jobs    JobStore
	Clock   clock.Clock
	// Rate bounds edges erased per second across all jobs (default 500).
	Rate int
	// Inline: users with at most this many edges are erased before Start returns
	// (default 100); larger ones continue in the background.
	Inline int
	// OnError reports a failed step (the job is retried on the next tick).
	OnError func(error)
	// Manual starts no loop: jobs advance only in Start and RunOnce (the
	// simulation steps erasers itself, with its own clock and schedule).
	Manual bool
	// Active, if set, says whether this eraser steps jobs now. A region of
	// several nodes shares one job store, and a job's report (edges erased,
	// likes removed) is exact only with one runner, so it elects one node:
	// elsewhere Start records the job and leaves its steps to that node's
	// loop. Nil: always active.
	Active func() bool
}

// Eraser runs account erasures at a bounded rate. It owns one goroutine loop.
type Eraser struct {
	cfg    EraserConfig
	mu     sync.Mutex // serializes job steps
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewEraser starts the loop, which resumes any running jobs.
func NewEraser(ctx context.Context, cfg EraserConfig) (*Eraser, error) {
	if cfg.Service == nil || cfg.Store == nil || cfg.Jobs == nil {
		return nil, errors.New("edge: EraserConfig needs Service, Store and Jobs")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 500
	}
	if cfg.Inline <= 0 {
		cfg.Inline = 100
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &Eraser{cfg: cfg, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	if cfg.Manual {
		close(e.done)
		return e, nil
	}
	go e.loop(ctx)
	return e, nil
}

// Start begins erasing user (idempotent: an existing job is returned as is,
// except that a Remote replica of another region's job is taken over: the
// user's range moved here and the request was repeated, so this region erases
// what it holds, including edges that reached it after the origin finished).
// Small users finish before Start returns.
func (e *Eraser) Start(ctx context.Context, user string) (ErasureJob, error) {
	e.mu.Lock()
	j, ok, err := e.cfg.Jobs.Erasure(ctx, user)
	if err != nil {
		e.mu.Unlock()
		return ErasureJob{}, err
	}
	if !ok || j.Remote {
		if !ok {
			j = ErasureJob{User: user, State: ErasureRunning, StartedAt: e.cfg.Clock.Now().UnixMilli()}
		}
		j.Remote, j.State, j.Cursor, j.FinishedAt = false, ErasureRunning, "", 0
		if err := e.cfg.Service.Admit(ctx, user, func() error { return e.cfg.Jobs.PutErasure(ctx, j) }); err != nil {
			e.mu.Unlock()
			return ErasureJob{}, err
		}
	}
	if j.State == ErasureRunning && e.active() {
		j, _, err = e.step(ctx, j, e.cfg.Inline)
	}
	e.mu.Unlock()
	if err != nil {
		return j, err
	}
	if j.State == ErasureRunning {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return j, nil
}

func (e *Eraser) active() bool { return e.cfg.Active == nil || e.cfg.Active() }

// Status returns the job for user.
func (e *Eraser) Status(ctx context.Context, user string) (ErasureJob, bool, error) {
	return e.cfg.Jobs.Erasure(ctx, user)
}

// step erases up to max edges of j and persists progress.
//
// Progress is saved even when the step is cut short (a failed write, or Close
// cancelling ctx): an edge already ERASED cannot tell afterwards whether it was
// liked, so a resumed step that redid lost progress would under-report
// likesRemoved. (Only a crash between an edge's erasure and the save can still
// do that; the counts themselves stay exact either way.) Only erasures that
// changed an edge are counted, so re-listing an edge (a re-opened job, a
// forwarded erasure whose tombstone has not come back yet) counts nothing twice.
//
// The job is done only when the user's index is empty after the purge: the
// purge keeps entries of edges not ERASED here (one whose erasure went to
// another owner and has not replicated back, or one that arrived late), and
// the job goes on from the start until they are tombstoned here too.
//
// It returns the job and how many edges it went through.
func (e *Eraser) step(ctx context.Context, j ErasureJob, limit int) (ErasureJob, int, error) {
	items, err := e.cfg.Store.UserItems(ctx, j.User, j.Cursor, limit)
	if err != nil {
		return j, 0, err
	}
	done := 0
	save := context.WithoutCancel(ctx)
	start := j
	cutShort := func(err error) (ErasureJob, int, error) {
		if j.Edges != start.Edges || j.Cursor != start.Cursor {
			if perr := e.cfg.Jobs.PutErasure(save, j); perr != nil {
				err = errors.Join(err, perr)
			}
		}
		return j, done, err
	}
	for _, item := range items {
		before, _, err := e.cfg.Store.Edge(ctx, item, j.User)
		if err != nil {
			return cutShort(err)
		}
		ans, err := e.cfg.Service.Erase(ctx, item, j.User)
		if err != nil {
			return cutShort(fmt.Errorf("edge: erase %q of %q: %w", item, j.User, err))
		}
		if ans.Changed {
			j.Edges++
			if before.State == crdt.Liked {
				j.Unliked++
			}
		}
		j.Cursor = item
		done++
	}
	if len(items) < limit {
		if err := e.cfg.Store.PurgeUser(ctx, j.User); err != nil {
			return cutShort(err)
		}
		left, err := e.cfg.Store.UserItems(ctx, j.User, "", 1)
		if err != nil {
			return cutShort(err)
		}
		if len(left) == 0 {
			j.State = ErasureDone
			j.FinishedAt = e.cfg.Clock.Now().UnixMilli()
		} else {
			j.Cursor = ""
		}
	}
	return j, done, e.cfg.Jobs.PutErasure(save, j)
}

func (e *Eraser) loop(ctx context.Context) {
	defer close(e.done)
	t := e.cfg.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		e.runOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-e.wake:
		}
	}
}

// RunOnce spends one tick's budget of edges across running jobs and returns
// the first error (the loop reports it through OnError and goes on next tick).
func (e *Eraser) RunOnce(ctx context.Context) error {
	if !e.active() {
		return nil
	}
	jobs, err := e.cfg.Jobs.Erasures(ctx)
	if err != nil {
		return err
	}
	budget := e.cfg.Rate
	for _, j := range jobs {
		if j.State != ErasureRunning || j.Remote || budget <= 0 || ctx.Err() != nil {
			continue
		}
		e.mu.Lock() // re-read under the lock: Start may have advanced the job
		cur, ok, err := e.cfg.Jobs.Erasure(ctx, j.User)
		if err == nil && ok && cur.State == ErasureRunning && !cur.Remote {
			var n int
			_, n, err = e.step(ctx, cur, budget)
			budget -= max(n, 1)
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *Eraser) runOnce(ctx context.Context) {
	if err := e.RunOnce(ctx); err != nil {
		e.cfg.OnError(err)
	}
}

// Close stops the loop and waits for it. Idempotent.
func (e *Eraser) Close() error {
	e.once.Do(func() {
		e.cancel()
		<-e.done
	})
	return nil
}
