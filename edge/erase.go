package edge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"likes/clock"
	"likes/crdt"
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
}

// JobStore persists erasure jobs. PutErasure of a new job must be ordered with
// Store.Apply: once it returns, every later Apply for the user sees the user as
// erased (ActErased) except erasure writes.
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
	// Manual: NewEraser starts no goroutine and the eraser never steps by
	// itself; the caller drives it with RunOnce (Start still runs its inline
	// step). For deterministic simulations.
	Manual bool
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
	ctx, cancel := context.WithCancel(ctx)
	e := &Eraser{cfg: cfg, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	if cfg.Manual {
		close(e.done)
		return e, nil
	}
	go e.loop(ctx)
	return e, nil
}

// Start begins erasing user (idempotent: an existing job is returned as is,
// except that a Remote replica of another region's running job is taken over).
// Small users finish before Start returns.
func (e *Eraser) Start(ctx context.Context, user string) (ErasureJob, error) {
	e.mu.Lock()
	j, ok, err := e.cfg.Jobs.Erasure(ctx, user)
	if err != nil {
		e.mu.Unlock()
		return ErasureJob{}, err
	}
	if !ok || (j.Remote && j.State == ErasureRunning) {
		if !ok {
			j = ErasureJob{User: user, State: ErasureRunning, StartedAt: e.cfg.Clock.Now().UnixMilli()}
		}
		j.Remote = false
		if err := e.cfg.Service.Admit(ctx, user, func() error { return e.cfg.Jobs.PutErasure(ctx, j) }); err != nil {
			e.mu.Unlock()
			return ErasureJob{}, err
		}
	}
	if j.State == ErasureRunning {
		j, err = e.step(ctx, j, e.cfg.Inline)
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
// do that; the counts themselves stay exact either way.)
func (e *Eraser) step(ctx context.Context, j ErasureJob, max int) (ErasureJob, error) {
	items, err := e.cfg.Store.UserItems(ctx, j.User, j.Cursor, max)
	if err != nil {
		return j, err
	}
	save := context.WithoutCancel(ctx)
	start := j
	cutShort := func(err error) (ErasureJob, error) {
		if j.Edges != start.Edges {
			if perr := e.cfg.Jobs.PutErasure(save, j); perr != nil {
				err = errors.Join(err, perr)
			}
		}
		return j, err
	}
	for _, item := range items {
		before, _, err := e.cfg.Store.Edge(ctx, item, j.User)
		if err != nil {
			return cutShort(err)
		}
		if _, err := e.cfg.Service.Erase(ctx, item, j.User); err != nil {
			return cutShort(fmt.Errorf("edge: erase %q of %q: %w", item, j.User, err))
		}
		j.Edges++
		if before.State == crdt.Liked {
			j.Unliked++
		}
		j.Cursor = item
	}
	if len(items) < max {
		if err := e.cfg.Store.PurgeUser(ctx, j.User); err != nil {
			return cutShort(err)
		}
		j.State = ErasureDone
		j.FinishedAt = e.cfg.Clock.Now().UnixMilli()
	}
	return j, e.cfg.Jobs.PutErasure(save, j)
}

func (e *Eraser) loop(ctx context.Context) {
	defer close(e.done)
	t := e.cfg.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := e.runOnce(ctx); err != nil {
			e.cfg.OnError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-e.wake:
		}
	}
}

// RunOnce spends one tick's budget of edges across running jobs and returns
// the first error (the loop of a Manual eraser, one tick at a time).
func (e *Eraser) RunOnce(ctx context.Context) error { return e.runOnce(ctx) }

// runOnce spends one second's budget of edges across running jobs.
func (e *Eraser) runOnce(ctx context.Context) error {
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
			n := cur.Edges
			cur, err = e.step(ctx, cur, budget)
			budget -= cur.Edges - n
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Close stops the loop and waits for it. Idempotent.
func (e *Eraser) Close() error {
	e.once.Do(func() {
		e.cancel()
		<-e.done
	})
	return nil
}
