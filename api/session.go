package api

import (
	"context"
	"net/http"
	"time"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/internal/sessiontok"
)

// Where a session-aware button read was answered from.
const (
	sourceLocal   = "local"
	sourceOwner   = "owner"
	sourceSession = "session"
)

// sessionOf is the request's Likes-Session token when it verifies and names
// user; a forged, foreign or malformed token is ignored (never trusted).
func (s *Server) sessionOf(r *http.Request, user string) (sessiontok.Token, bool) {
	h := r.Header.Get(sessiontok.Header)
	if len(s.cfg.SessionKey) == 0 || h == "" {
		return sessiontok.Token{}, false
	}
	t, err := sessiontok.Parse(s.cfg.SessionKey, h)
	if err != nil || t.User != user {
		return sessiontok.Token{}, false
	}
	return t, true
}

// handOutSession answers a write with the actor's token: the request's own
// (when valid) plus this write.
func (s *Server) handOutSession(w http.ResponseWriter, r *http.Request, user string, wr sessiontok.Write) {
	if len(s.cfg.SessionKey) == 0 {
		return
	}
	t, ok := s.sessionOf(r, user)
	if !ok {
		t = sessiontok.Token{User: user}
	}
	w.Header().Set(sessiontok.Header, sessiontok.Sign(s.cfg.SessionKey, t.With(wr)))
}

// ownerReadTimeout bounds asking the owner for a button the local replica
// has not caught up on; past it the token answers.
const ownerReadTimeout = time.Second

// buttonAtLeast is user's register for item, never older than the write the
// request's token names for it: the local replica when it has caught up, else
// the owner's (asked over the authenticated plane), else the token's own state.
// source is "" without a token naming the item.
func (s *Server) buttonAtLeast(r *http.Request, user, item string) (crdt.Register, string, error) {
	reg, err := s.cfg.Service.Button(r.Context(), user, item)
	if err != nil {
		return reg, "", err
	}
	t, ok := s.sessionOf(r, user)
	if !ok {
		return reg, "", nil
	}
	wr, ok := t.Lookup(item)
	if !ok {
		return reg, "", nil
	}
	floor := wr.Register()
	source := sourceLocal
	if reg.Less(floor) {
		reg, source = floor, sourceSession
		if or, ok := s.askOwner(r.Context(), user, item); ok && !or.Less(floor) {
			reg, source = or, sourceOwner
		}
	}
	s.m.SessionReads.WithLabelValues(source).Inc()
	return reg, source, nil
}

func (s *Server) askOwner(ctx context.Context, user, item string) (crdt.Register, bool) {
	if s.cfg.Home == nil || s.cfg.Owner == nil {
		return crdt.Register{}, false
	}
	owner, self, err := s.cfg.Home(user)
	if err != nil || self {
		return crdt.Register{}, false // this region is the owner and is behind: the token answers
	}
	ctx, cancel := context.WithTimeout(ctx, ownerReadTimeout)
	defer cancel()
	reg, err := s.cfg.Owner.Read(ctx, owner, user, item)
	return reg, err == nil
}
