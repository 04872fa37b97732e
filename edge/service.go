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

// Store is the edge store contract (see edgetest for the suite every
// implementation passes).
type Store interface {
	// Apply performs req as one atomic conditional write: it reads the edge and
	// the idempotency record, calls Decide, and writes the new edge version, its
	// log event, the branch record, the idempotency record and the user index
	// together, durably, before returning. It returns the decision; a non-nil
	// error means nothing was written (or, for a lost connection, that the
	// outcome is unknown and the request must be retried with the same key).
	Apply(ctx context.Context, req Request) (Decision, error)
	// Edge reads the local replica of an edge.
	Edge(ctx context.Context, item, user string) (Edge, bool, error)
	// Likers lists users whose edge on item is LIKED, in (bucket, user) order,
	// starting after cursor ("" = start). next is "" at the end.
	Likers(ctx context.Context, item, cursor string, limit int) (users []string, next string, err error)
	// UserItems lists the items a user has an edge on, in item order, after `after`.
	UserItems(ctx context.Context, user, after string, limit int) (items []string, err error)
	// PurgeUser removes the user's idempotency records and item index. Edges stay
	// as ERASED tombstones so no replicated older version can resurrect them.
	PurgeUser(ctx context.Context, user string) error
}

// Authority grants the epoch under which this region may write a user's edges.
type Authority interface {
	// Authorize returns the epoch of the user's range pin, or ErrNotOwner /
	// ErrFailClosed (wrapped) when this region must not write.
	Authorize(ctx context.Context, user string) (epoch uint64, err error)
}

// Deadliner is an Authority whose grants expire with its lease proof:
// ValidUntil is when the proof behind a grant made now stops holding
// (Request.Deadline).
type Deadliner interface {
	ValidUntil() time.Time
}

// StaticAuthority grants one fixed epoch for every range: a single region that
// owns everything.
type StaticAuthority uint64

// Authorize implements Authority.
func (a StaticAuthority) Authorize(context.Context, string) (uint64, error) { return uint64(a), nil }

// OverlayEntry is the session overlay's memory of the actor's own write.
type OverlayEntry struct {
	State   crdt.State
	Version crdt.Version
}

// Overlay is the session overlay: (user, item) → the actor's last write, kept
// briefly by the ingress region so the actor reads their own write at once.
type Overlay interface {
	Put(ctx context.Context, user, item string, e OverlayEntry) error
	Get(ctx context.Context, user, item string) (OverlayEntry, bool, error)
}

// Owned is implemented by ErrNotOwner errors that know the owner region.
type Owned interface{ OwnerRegion() string }

// ForwardResult is the owner's answer to a forwarded write, with the edge's
// resulting register so the ingress region can write the session overlay.
type ForwardResult struct {
	Answer  Answer
	State   crdt.State
	Version crdt.Version
}

// Forwarder sends a write to the region that owns the user's range, with the
// same idempotency key (the owner's record decides replays).
type Forwarder interface {
	Forward(ctx context.Context, owner string, req Request) (ForwardResult, error)
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Store     Store
	Authority Authority
	Overlay   Overlay
	Clock     clock.Clock
	// Forwarder, when set, takes writes this region does not own (else they
	// fail with ErrNotOwner).
	Forwarder Forwarder
	// IdemTTL is how long an idempotency record replays (default 24h).
	IdemTTL time.Duration
	// Knobs are test-only switches (TestingKnobs); nil in a deployment.
	Knobs *TestingKnobs
}

// Service is the write path and the actor's button read.
type Service struct {
	cfg ServiceConfig
	// writes is held shared from Authorize to the store's answer of every
	// local write, and exclusively by Quiesce.
	writes sync.RWMutex
}

// NewService validates cfg and fills defaults.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Store == nil || cfg.Overlay == nil {
		return nil, errors.New("edge: ServiceConfig needs Store and Overlay")
	}
	if cfg.Authority == nil {
		cfg.Authority = StaticAuthority(1)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.IdemTTL == 0 {
		cfg.IdemTTL = 24 * time.Hour
	}
	if cfg.IdemTTL < 0 {
		return nil, fmt.Errorf("edge: IdemTTL must be positive, got %v", cfg.IdemTTL)
	}
	return &Service{cfg: cfg}, nil
}

// Set moves the user's edge on item to target (Liked or Unliked) under
// idempotency key key, and records the result in the session overlay.
func (s *Service) Set(ctx context.Context, user, item string, target crdt.State, key string) (Answer, error) {
	res, err := s.SetResult(ctx, user, item, target, key)
	return res.Answer, err
}

// SetResult is Set with the edge's register after the write (for a replay:
// the edge as it is now), which the API hands the actor in a session token.
func (s *Service) SetResult(ctx context.Context, user, item string, target crdt.State, key string) (ForwardResult, error) {
	op := "unlike"
	if target == crdt.Liked {
		op = "like"
	}
	return s.apply(ctx, Request{
		Item: item, User: user, Target: target, Kind: KindFlip,
		IdemKey: key, Fingerprint: Fingerprint(op, item, user),
	})
}

// Retract unlikes (item, user) on behalf of the abuse system: the same
// conditional write as a user's unlike, marked as a retraction.
func (s *Service) Retract(ctx context.Context, item, user string) (Answer, error) {
	res, err := s.apply(ctx, Request{Item: item, User: user, Target: crdt.Unliked, Kind: KindRetraction})
	return res.Answer, err
}

// Erase tombstones one edge of an erased user.
func (s *Service) Erase(ctx context.Context, item, user string) (Answer, error) {
	res, err := s.apply(ctx, Request{Item: item, User: user, Target: crdt.Erased, Kind: KindErasure})
	return res.Answer, err
}

func (s *Service) apply(ctx context.Context, req Request) (ForwardResult, error) {
	res, err := s.ApplyLocal(ctx, req)
	var owned Owned
	if err != nil && s.cfg.Forwarder != nil && errors.Is(err, ErrNotOwner) && errors.As(err, &owned) {
		res, err = s.cfg.Forwarder.Forward(ctx, owned.OwnerRegion(), req)
	}
	if err != nil {
		return ForwardResult{}, err
	}
	// The overlay is a read-your-writes aid written by the ingress region;
	// failing to write it loses nothing.
	_ = s.cfg.Overlay.Put(ctx, req.User, req.Item, OverlayEntry{State: res.State, Version: res.Version})
	return res, nil
}

// ApplyLocal performs req in this region without forwarding: the handler of
// forwarded writes calls it, so a stale pin can never bounce a write around.
func (s *Service) ApplyLocal(ctx context.Context, req Request) (ForwardResult, error) {
	s.writes.RLock()
	defer s.writes.RUnlock()
	epoch, err := s.cfg.Authority.Authorize(ctx, req.User)
	if err != nil {
		return ForwardResult{}, err
	}
	req.Epoch = epoch
	req.Now = s.cfg.Clock.Now().UnixMilli()
	req.IdemTTLms = s.cfg.IdemTTL.Milliseconds()
	if dl, ok := s.cfg.Authority.(Deadliner); ok {
		req.Deadline = dl.ValidUntil().UnixMilli()
	}
	if s.cfg.Knobs != nil && s.cfg.Knobs.NoIdempotency {
		req.IdemKey = ""
	}
	d, err := s.cfg.Store.Apply(ctx, req)
	if err != nil {
		return ForwardResult{}, err
	}
	if err := d.Err(); err != nil {
		return ForwardResult{}, err
	}
	// For a replay, State/Version are the edge as it is now, so the overlay never
	// shows a stale replayed state.
	return ForwardResult{Answer: d.Answer, State: d.Edge.State, Version: d.Edge.Version}, nil
}

// Admit runs fn as a local write of user's range that is not an edge write:
// only if this region may write the range now (Authority), and ordered with
// Quiesce like every local write. The eraser starts a job through it, so a
// job's start (and its replicated mark) can never land in the log after the
// heads a planned move's new owner waits for.
func (s *Service) Admit(ctx context.Context, user string, fn func() error) error {
	s.writes.RLock()
	defer s.writes.RUnlock()
	if _, err := s.cfg.Authority.Authorize(ctx, user); err != nil {
		return err
	}
	return fn()
}

// Quiesce returns once every local write authorized before the call has
// reached the store (committed or failed). A region that has seen a pin move
// away calls it before reporting its log heads to the new owner (the planned
// move's barrier): no write authorized under the old epoch can land after
// those heads. Writes wait while Quiesce holds the lock, briefly.
func (s *Service) Quiesce(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.writes.Lock()
		close(done)
		s.writes.Unlock()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Liked is the actor's button: the overlay layered over the local edge replica,
// whichever holds the newer version.
func (s *Service) Liked(ctx context.Context, user, item string) (bool, error) {
	r, err := s.Button(ctx, user, item)
	return r.State == crdt.Liked, err
}

// Button is the register behind Liked: the local edge replica merged with the
// session overlay.
func (s *Service) Button(ctx context.Context, user, item string) (crdt.Register, error) {
	e, _, err := s.cfg.Store.Edge(ctx, item, user)
	if err != nil {
		return crdt.Register{}, err
	}
	r := e.Register()
	if o, ok, oerr := s.cfg.Overlay.Get(ctx, user, item); oerr == nil && ok {
		r = crdt.MergeRegister(r, crdt.Register{Version: o.Version, State: o.State})
	}
	return r, nil
}
