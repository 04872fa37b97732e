package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/sessiontok"
	"github.com/likes-dev/likes/internal/tracing"
)

// Limiter is a rate limiter keyed by user or IP.
type Limiter interface {
	Allow(ctx context.Context, key string) (ok bool, retryAfter time.Duration, err error)
}

// Config configures a Server. Every field without a default is required.
type Config struct {
	Region   string
	Service  *edge.Service
	Eraser   *edge.Eraser
	Store    edge.Store // who-liked pages
	Counts   *counts.Reader
	Verifier *auth.Verifier
	// UserLimiter and IPLimiter may be nil (no limit).
	UserLimiter Limiter
	IPLimiter   Limiter
	// MaxInFlightWrites bounds admitted writes; beyond it writes get 503 at once
	// (default 1024).
	MaxInFlightWrites int
	// WriteTimeout bounds one write (default 5s).
	WriteTimeout time.Duration
	// MaxBodyBytes bounds request bodies (default 64 KiB).
	MaxBodyBytes int64
	Registry     *prometheus.Registry
	Clock        clock.Clock
	// Ready reports whether the region can serve (nil: always ready).
	Ready func(ctx context.Context) error
	// Admin serves the operator endpoints (nil: they answer 404).
	Admin Admin
	// Home, when set, names the region that owns a user's range (self: this
	// one). Account erasure runs at the owner (where the user's writes are
	// serialized and the erasure mark blocks them), so other regions relay
	// erasure requests and status reads there through Relay. Nil: this region
	// owns every user.
	Home  func(user string) (owner string, self bool, err error)
	Relay ErasureRelay
	// SessionKey signs and verifies Likes-Session tokens (the same in every
	// region of a cluster). Nil: no tokens are handed out and none is read.
	SessionKey []byte
	// CDN sets the lifetimes of cacheable (anonymous) count reads.
	CDN CDNConfig
	// Owner reads a user's edge at the owner of the user's range (a button
	// read whose token is newer than the local replica). Nil: such reads are
	// answered from the token.
	Owner OwnerReader
	// Tracer makes a server span per request (nil: none). Logger gets one
	// line per request with its request id and trace id (nil: none); see
	// tracing.HTTP for the levels.
	Tracer trace.TracerProvider
	Logger *slog.Logger
}

// OwnerReader reads the register of (user, item) at region owner over the
// authenticated region-to-region plane (*Forwarder).
type OwnerReader interface {
	Read(ctx context.Context, owner, user, item string) (crdt.Register, error)
}

// ErasureRelay carries an erasure request, authorized here, to the owner of the
// user's range over the authenticated region-to-region plane (*Forwarder).
type ErasureRelay interface {
	Erasure(ctx context.Context, owner, user string, start bool) (job edge.ErasureJob, found bool, err error)
}

// Admin is the operator surface of a region.
type Admin interface {
	// Status describes the region: watermarks, aggregator lag, replication peers, lease.
	Status(ctx context.Context) (any, error)
	// Reconcile recounts one item ("" = every item) from local edges, compares with
	// the summed cells, and when heal is set appends healing events.
	Reconcile(ctx context.Context, item string, heal bool) (any, error)
	// Log pages through this region's committed log (for audits and the chaos
	// checker): events of one partition with Pos > after.
	Log(ctx context.Context, partition uint32, after uint64, limit int) (any, error)
	// Backup takes a consistent checkpoint of the region's store and returns
	// it ready to stream (internal/backupfmt); errors wrap ErrBackupUnsupported
	// or ErrBackupBusy when that is why.
	Backup(ctx context.Context) (BackupStream, error)
}

// BackupStream is a checkpoint taken for GET /v1/admin/backup.
type BackupStream interface {
	// WriteTo streams it; beforeFile runs before each file.
	WriteTo(w io.Writer, beforeFile func()) error
	// Close removes the checkpoint.
	Close() error
}

// Why a backup is refused (the Admin wraps them).
var (
	ErrBackupUnsupported = errors.New("api: this region's store has no online backup")
	ErrBackupBusy        = errors.New("api: a backup of this region is already running")
)

// backupFileDeadline is how long one file of a backup stream may take to
// send: the server's write timeout is for ordinary answers, and a backup
// of many SSTables is one long answer.
const backupFileDeadline = 10 * time.Minute

// Server is the region's HTTP handler.
type Server struct {
	cfg     Config
	cdn     CDNConfig
	hot     hotItems
	m       *Metrics
	mux     *http.ServeMux
	slots   chan struct{}
	handler http.Handler
}

// New validates cfg and builds the handler.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil || cfg.Store == nil || cfg.Counts == nil || cfg.Verifier == nil || cfg.Eraser == nil {
		return nil, errors.New("api: Config needs Service, Store, Counts, Eraser and Verifier")
	}
	if cfg.MaxInFlightWrites == 0 {
		cfg.MaxInFlightWrites = 1024
	}
	if cfg.MaxInFlightWrites < 0 {
		return nil, fmt.Errorf("api: MaxInFlightWrites must be positive, got %d", cfg.MaxInFlightWrites)
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	s := &Server{cfg: cfg, cdn: cfg.CDN.withDefaults(), m: NewMetrics(cfg.Registry), mux: http.NewServeMux(), slots: make(chan struct{}, cfg.MaxInFlightWrites)}
	s.m.watchHot(&s.hot, cfg.Clock)
	s.route("POST /v1/items/{itemId}/likes", "like", s.like)
	s.route("DELETE /v1/items/{itemId}/likes/{userId}", "unlike", s.unlike)
	s.route("GET /v1/items/{itemId}/count", "count", s.count)
	s.route("GET /v1/items/{itemId}/likes/{userId}", "button", s.button)
	s.route("GET /v1/items/{itemId}/likes", "likers", s.likers)
	s.route("POST /v1/likes:batchGet", "batchGet", s.batchGet)
	s.route("DELETE /v1/users/{userId}", "erase", s.erase)
	s.route("GET /v1/users/{userId}/erasure", "erasure", s.erasure)
	s.route("POST /v1/admin/retractions", "retract", s.retract)
	s.route("GET /v1/admin/status", "status", s.status)
	s.route("POST /v1/admin/reconcile", "reconcile", s.reconcile)
	s.route("GET /v1/admin/log", "log", s.log)
	s.route("GET /v1/admin/backup", "backup", s.backup)
	s.route("GET /v1/openapi.yaml", "openapi", s.openapi)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "region": cfg.Region})
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path))
	})
	s.handler = tracing.HTTP(tracing.HTTPConfig{Tracer: cfg.Tracer, Logger: cfg.Logger, Region: cfg.Region, Clock: cfg.Clock}, s.mux)
	return s, nil
}

// Metrics returns the API's collectors.
func (s *Server) Metrics() *Metrics { return s.m }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

type handlerFunc func(w http.ResponseWriter, r *http.Request) *apiError

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *Server) route(pattern, name string, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		r.Body = http.MaxBytesReader(rec, r.Body, s.cfg.MaxBodyBytes)
		if ip := clientIP(r); s.cfg.IPLimiter != nil {
			if e := s.limit(r.Context(), s.cfg.IPLimiter, "ip:"+ip); e != nil {
				writeError(rec, e)
				s.m.Requests.WithLabelValues(name, strconv.Itoa(rec.code)).Inc()
				return
			}
		}
		if e := h(rec, r); e != nil {
			writeError(rec, e)
		}
		s.m.Requests.WithLabelValues(name, strconv.Itoa(rec.code)).Inc()
	})
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) limit(ctx context.Context, l Limiter, key string) *apiError {
	ok, after, err := l.Allow(ctx, key)
	if err != nil || ok { // a broken limiter must not take writes down
		return nil
	}
	return retryable(http.StatusTooManyRequests, "rate_limited", "too many requests; retry later", after)
}

// session returns the verified caller, or an error when required and absent.
func (s *Server) session(r *http.Request, required bool) (auth.Claims, bool, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if required {
			return auth.Claims{}, false, errorf(http.StatusUnauthorized, "unauthenticated", "missing Authorization: Bearer token")
		}
		return auth.Claims{}, false, nil
	}
	// The scheme is case-insensitive (RFC 9110 section 11.1).
	const scheme = "bearer "
	var tok string
	if len(h) > len(scheme) && strings.EqualFold(h[:len(scheme)], scheme) {
		tok = strings.TrimSpace(h[len(scheme):])
	}
	if tok == "" {
		return auth.Claims{}, false, errorf(http.StatusUnauthorized, "invalid_token", "Authorization must be 'Bearer <token>'")
	}
	c, err := s.cfg.Verifier.Verify(tok)
	if err != nil {
		return auth.Claims{}, false, errorf(http.StatusUnauthorized, "invalid_token", "token does not verify")
	}
	if err := ValidateID("token subject", c.User); err != nil {
		return auth.Claims{}, false, errorf(http.StatusUnauthorized, "invalid_token", err.Error())
	}
	return c, true, nil
}

func pathID(r *http.Request, name, what string) (string, *apiError) {
	v := r.PathValue(name)
	if err := ValidateID(what, v); err != nil {
		return "", errorf(http.StatusBadRequest, "invalid_id", err.Error())
	}
	return v, nil
}

// drainBody reads and discards a body that carries nothing, so an oversized one
// is still refused with 413.
func drainBody(r *http.Request) *apiError {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return bodyError(err)
	}
	return nil
}

func bodyError(err error) *apiError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
	}
	return errorf(http.StatusBadRequest, "bad_json", "request body: "+err.Error())
}

func decodeBody(r *http.Request, v any) *apiError {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return errorf(http.StatusBadRequest, "bad_json", "request body has data after the JSON value")
		}
		return bodyError(err)
	}
	return nil
}

// admit takes an in-flight slot or sheds the write.
func (s *Server) admit(op string) (release func(), e *apiError) {
	select {
	case s.slots <- struct{}{}:
		s.m.InFlight.Inc()
		return func() { <-s.slots; s.m.InFlight.Dec() }, nil
	default:
		s.m.Shed.Inc()
		s.m.Outcomes.WithLabelValues(op, "shed").Inc()
		return nil, retryable(http.StatusServiceUnavailable, "overloaded", "too many writes in flight; retry later", time.Second)
	}
}

func (s *Server) writeErr(op string, err error) *apiError {
	outcome, e := "error", errorf(http.StatusInternalServerError, "internal", "internal error")
	switch {
	case errors.Is(err, edge.ErrKeyConflict):
		outcome, e = "conflict", errorf(http.StatusConflict, "idempotency_key_conflict", "this Idempotency-Key was used for a different request")
	case errors.Is(err, edge.ErrErased):
		outcome, e = "erased", errorf(http.StatusGone, "user_erased", "this user has been erased")
	case errors.Is(err, edge.ErrNotOwner), errors.Is(err, edge.ErrFailClosed), errors.Is(err, edge.ErrStaleEpoch):
		outcome, e = "unavailable", retryable(http.StatusServiceUnavailable, "not_authoritative", "this region cannot write this user's likes right now; retry", time.Second)
	case errors.Is(err, edge.ErrStorageUnavailable):
		// Refused before anything was acknowledged: the store cannot write now
		// (disk full or below its watermark, a failed sync, a stall).
		outcome, e = "storage_unavailable", retryable(http.StatusServiceUnavailable, "storage_unavailable", "this region's storage cannot accept writes right now; retry with the same Idempotency-Key", 5*time.Second)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		outcome, e = "unavailable", retryable(http.StatusServiceUnavailable, "timeout", "the write did not finish in time; retry with the same Idempotency-Key", time.Second)
	}
	s.m.Outcomes.WithLabelValues(op, outcome).Inc()
	return e
}

func (s *Server) setLike(w http.ResponseWriter, r *http.Request, op string, item, user string, target crdt.State) *apiError {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return errorf(http.StatusBadRequest, "missing_idempotency_key", "the Idempotency-Key header is required (one key per tap, kept across retries)")
	}
	if err := ValidateID("Idempotency-Key", key); err != nil {
		return errorf(http.StatusBadRequest, "invalid_idempotency_key", err.Error())
	}
	if e := drainBody(r); e != nil {
		return e
	}
	if s.cfg.UserLimiter != nil {
		if e := s.limit(r.Context(), s.cfg.UserLimiter, "user:"+user); e != nil {
			s.m.Outcomes.WithLabelValues(op, "rate_limited").Inc()
			return e
		}
	}
	release, e := s.admit(op)
	if e != nil {
		return e
	}
	defer release()
	start := s.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	res, err := s.cfg.Service.SetResult(ctx, user, item, target, key)
	s.m.WriteLatency.WithLabelValues(op).Observe(s.cfg.Clock.Now().Sub(start).Seconds())
	if err != nil {
		return s.writeErr(op, err)
	}
	ans := res.Answer
	if ans.Changed {
		s.hot.wrote(item, s.cfg.Clock.Now())
	}
	s.handOutSession(w, r, user, sessiontok.Write{Item: item, State: res.State, Version: res.Version})
	outcome := "unchanged"
	if ans.Changed {
		outcome = "changed"
	}
	s.m.Outcomes.WithLabelValues(op, outcome).Inc()
	writeJSON(w, http.StatusOK, ans)
	return nil
}

func (s *Server) like(w http.ResponseWriter, r *http.Request) *apiError {
	c, _, e := s.session(r, true)
	if e != nil {
		return e
	}
	item, e := pathID(r, "itemId", "itemId")
	if e != nil {
		return e
	}
	return s.setLike(w, r, "like", item, c.User, crdt.Liked)
}

func (s *Server) unlike(w http.ResponseWriter, r *http.Request) *apiError {
	c, _, e := s.session(r, true)
	if e != nil {
		return e
	}
	item, e := pathID(r, "itemId", "itemId")
	if e != nil {
		return e
	}
	user, e := pathID(r, "userId", "userId")
	if e != nil {
		return e
	}
	if user != c.User {
		return errorf(http.StatusForbidden, "forbidden", "you can only unlike as yourself")
	}
	return s.setLike(w, r, "unlike", item, user, crdt.Unliked)
}

type countJSON struct {
	Item        string `json:"itemId"`
	Count       int64  `json:"count"`
	AsOf        string `json:"asOf"`
	StalenessMs int64  `json:"stalenessMs"`
	Liked       *bool  `json:"liked,omitempty"`
	// LikedSource says where liked came from when the local replica was older
	// than the request's Likes-Session token: "owner" or "session".
	LikedSource string `json:"likedSource,omitempty"`
}

func countBody(item string, res counts.Result) countJSON {
	return countJSON{Item: item, Count: res.Count, AsOf: res.AsOf.UTC().Format(time.RFC3339Nano), StalenessMs: res.Staleness.Milliseconds()}
}

func (s *Server) count(w http.ResponseWriter, r *http.Request) *apiError {
	item, e := pathID(r, "itemId", "itemId")
	if e != nil {
		return e
	}
	res, err := s.cfg.Counts.Count(r.Context(), item)
	if err != nil {
		return retryable(http.StatusServiceUnavailable, "unavailable", "count unavailable: "+err.Error(), time.Second)
	}
	body := countBody(item, res)
	s.m.served(res)
	if s.publicCache(w, r, countETag(body), item) {
		return nil
	}
	writeJSONCached(w, http.StatusOK, body)
	return nil
}

func (s *Server) button(w http.ResponseWriter, r *http.Request) *apiError {
	item, e := pathID(r, "itemId", "itemId")
	if e != nil {
		return e
	}
	user, e := pathID(r, "userId", "userId")
	if e != nil {
		return e
	}
	reg, source, err := s.buttonAtLeast(r, user, item)
	if err != nil {
		return retryable(http.StatusServiceUnavailable, "unavailable", "edge read failed", time.Second)
	}
	body := map[string]any{"itemId": item, "userId": user, "liked": reg.State == crdt.Liked}
	if source != "" && source != sourceLocal {
		body["source"] = source
	}
	privateNoStore(w)
	writeJSONCached(w, http.StatusOK, body)
	return nil
}

func (s *Server) likers(w http.ResponseWriter, r *http.Request) *apiError {
	item, e := pathID(r, "itemId", "itemId")
	if e != nil {
		return e
	}
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return errorf(http.StatusBadRequest, "invalid_limit", "limit must be an integer in [1, 500]")
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if len(cursor) > 4*MaxIDBytes {
		return errorf(http.StatusBadRequest, "invalid_cursor", "cursor is too long")
	}
	users, next, err := s.cfg.Store.Likers(r.Context(), item, cursor, limit)
	if err != nil {
		if errors.Is(err, edge.ErrBadCursor) {
			return errorf(http.StatusBadRequest, "invalid_cursor", "cursor was not issued by this service")
		}
		return retryable(http.StatusServiceUnavailable, "unavailable", "who-liked read failed", time.Second)
	}
	if users == nil {
		users = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"itemId": item, "userIds": users, "nextCursor": next})
	return nil
}

// MaxBatchItems bounds a batchGet.
const MaxBatchItems = 100

func (s *Server) batchGet(w http.ResponseWriter, r *http.Request) *apiError {
	c, authed, e := s.session(r, false)
	if e != nil {
		return e
	}
	var req struct {
		ItemIDs []string `json:"itemIds"`
	}
	if e := decodeBody(r, &req); e != nil {
		return e
	}
	if len(req.ItemIDs) == 0 || len(req.ItemIDs) > MaxBatchItems {
		return errorf(http.StatusBadRequest, "invalid_batch", fmt.Sprintf("itemIds must hold 1 to %d ids", MaxBatchItems))
	}
	out := make([]countJSON, 0, len(req.ItemIDs))
	for i, item := range req.ItemIDs {
		if err := ValidateID(fmt.Sprintf("itemIds[%d]", i), item); err != nil {
			return errorf(http.StatusBadRequest, "invalid_id", err.Error())
		}
		res, err := s.cfg.Counts.Count(r.Context(), item)
		if err != nil {
			return retryable(http.StatusServiceUnavailable, "unavailable", "count unavailable", time.Second)
		}
		cj := countBody(item, res)
		s.m.served(res)
		if authed {
			reg, source, err := s.buttonAtLeast(r, c.User, item)
			if err != nil {
				return retryable(http.StatusServiceUnavailable, "unavailable", "edge read failed", time.Second)
			}
			liked := reg.State == crdt.Liked
			cj.Liked = &liked
			if source != sourceLocal {
				cj.LikedSource = source
			}
		}
		out = append(out, cj)
	}
	if authed {
		privateNoStore(w)
	} else {
		// The same request with a token answers `liked` too: a shared cache
		// must key this public answer on the (absent) Authorization header.
		w.Header().Add("Vary", "Authorization")
		if s.publicCache(w, r, countETag(out...), req.ItemIDs...) {
			return nil
		}
	}
	writeJSONCached(w, http.StatusOK, map[string]any{"items": out})
	return nil
}

func (s *Server) selfOrAdmin(r *http.Request) (string, *apiError) {
	c, _, e := s.session(r, true)
	if e != nil {
		return "", e
	}
	user, e := pathID(r, "userId", "userId")
	if e != nil {
		return "", e
	}
	if user != c.User && !c.Admin {
		return "", errorf(http.StatusForbidden, "forbidden", "only the user or an admin may do this")
	}
	return user, nil
}

// relayHome sends an erasure request (start) or status read to the user's
// home region when that is not this one; handled reports whether it did
// (successfully or with an error).
func (s *Server) relayHome(w http.ResponseWriter, r *http.Request, user string, start bool) (handled bool, e *apiError) {
	if s.cfg.Home == nil || s.cfg.Relay == nil {
		return false, nil
	}
	owner, self, err := s.cfg.Home(user)
	if err != nil {
		return true, retryable(http.StatusServiceUnavailable, "not_authoritative", "the user's home region is unknown right now; retry", time.Second)
	}
	if self {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	job, found, err := s.cfg.Relay.Erasure(ctx, owner, user, start)
	if err != nil {
		return true, retryable(http.StatusServiceUnavailable, "not_authoritative", "the user's home region could not take the request; retry", time.Second)
	}
	if !found {
		return true, errorf(http.StatusNotFound, "not_found", "no erasure for this user")
	}
	code := http.StatusOK
	if start && job.State != edge.ErasureDone {
		code = http.StatusAccepted
	}
	writeJSON(w, code, job)
	return true, nil
}

func (s *Server) erase(w http.ResponseWriter, r *http.Request) *apiError {
	user, e := s.selfOrAdmin(r)
	if e != nil {
		return e
	}
	if e := drainBody(r); e != nil {
		return e
	}
	if handled, e := s.relayHome(w, r, user, true); handled {
		return e
	}
	job, err := s.cfg.Eraser.Start(r.Context(), user)
	if err != nil && job.User == "" {
		switch {
		case errors.Is(err, edge.ErrNotOwner), errors.Is(err, edge.ErrFailClosed), errors.Is(err, edge.ErrStaleEpoch):
			// The user's range is between owners (a hand-off, a failback):
			// the same retryable answer as a write's.
			return retryable(http.StatusServiceUnavailable, "not_authoritative", "this region cannot start this user's erasure right now; retry", time.Second)
		case errors.Is(err, edge.ErrStorageUnavailable):
			return retryable(http.StatusServiceUnavailable, "storage_unavailable", "this region's storage cannot accept writes right now; retry", 5*time.Second)
		}
		if s.cfg.Logger != nil {
			s.cfg.Logger.Warn("erasure did not start", "user", user, "err", err)
		}
		return retryable(http.StatusServiceUnavailable, "unavailable", "could not start erasure; retry", time.Second)
	}
	status := http.StatusOK
	if job.State != edge.ErasureDone {
		status = http.StatusAccepted
	}
	writeJSON(w, status, job)
	return nil
}

func (s *Server) erasure(w http.ResponseWriter, r *http.Request) *apiError {
	user, e := s.selfOrAdmin(r)
	if e != nil {
		return e
	}
	if handled, e := s.relayHome(w, r, user, false); handled {
		return e
	}
	job, ok, err := s.cfg.Eraser.Status(r.Context(), user)
	if err != nil {
		return retryable(http.StatusServiceUnavailable, "unavailable", "status read failed", time.Second)
	}
	if !ok {
		return errorf(http.StatusNotFound, "not_found", "no erasure for this user")
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}

// MaxRetractUsers bounds one retraction request.
const MaxRetractUsers = 1000

func (s *Server) retract(w http.ResponseWriter, r *http.Request) *apiError {
	c, _, e := s.session(r, true)
	if e != nil {
		return e
	}
	if !c.Admin {
		return errorf(http.StatusForbidden, "forbidden", "retractions need an admin token")
	}
	var req struct {
		ItemID  string   `json:"itemId"`
		UserIDs []string `json:"userIds"`
	}
	if e := decodeBody(r, &req); e != nil {
		return e
	}
	if err := ValidateID("itemId", req.ItemID); err != nil {
		return errorf(http.StatusBadRequest, "invalid_id", err.Error())
	}
	if len(req.UserIDs) == 0 || len(req.UserIDs) > MaxRetractUsers {
		return errorf(http.StatusBadRequest, "invalid_batch", fmt.Sprintf("userIds must hold 1 to %d ids", MaxRetractUsers))
	}
	for i, u := range req.UserIDs {
		if err := ValidateID(fmt.Sprintf("userIds[%d]", i), u); err != nil {
			return errorf(http.StatusBadRequest, "invalid_id", err.Error())
		}
	}
	release, e := s.admit("retract")
	if e != nil {
		return e
	}
	defer release()
	type result struct {
		User    string `json:"userId"`
		Changed bool   `json:"changed"`
		Error   string `json:"error,omitempty"`
	}
	results := make([]result, 0, len(req.UserIDs))
	retracted := 0
	for _, u := range req.UserIDs {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
		ans, err := s.cfg.Service.Retract(ctx, req.ItemID, u)
		cancel()
		res := result{User: u, Changed: ans.Changed}
		if err != nil {
			res.Error = s.writeErr("retract", err).code
		} else if ans.Changed {
			retracted++
			s.m.Outcomes.WithLabelValues("retract", "changed").Inc()
		}
		results = append(results, res)
	}
	writeJSON(w, http.StatusOK, map[string]any{"itemId": req.ItemID, "retracted": retracted, "results": results})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(r.Context()); err != nil {
			writeError(w, retryable(http.StatusServiceUnavailable, "not_ready", err.Error(), time.Second))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "region": s.cfg.Region})
}

func (s *Server) admin(r *http.Request) *apiError {
	c, _, e := s.session(r, true)
	if e != nil {
		return e
	}
	if !c.Admin {
		return errorf(http.StatusForbidden, "forbidden", "this endpoint needs an admin token")
	}
	if s.cfg.Admin == nil {
		return errorf(http.StatusNotFound, "not_found", "operator endpoints are not enabled")
	}
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.admin(r); e != nil {
		return e
	}
	st, err := s.cfg.Admin.Status(r.Context())
	if err != nil {
		return retryable(http.StatusServiceUnavailable, "unavailable", "status: "+err.Error(), time.Second)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) reconcile(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.admin(r); e != nil {
		return e
	}
	var req struct {
		ItemID string `json:"itemId"`
		Heal   bool   `json:"heal"`
	}
	if e := decodeBody(r, &req); e != nil {
		return e
	}
	if req.ItemID != "" {
		if err := ValidateID("itemId", req.ItemID); err != nil {
			return errorf(http.StatusBadRequest, "invalid_id", err.Error())
		}
	}
	out, err := s.cfg.Admin.Reconcile(r.Context(), req.ItemID, req.Heal)
	if err != nil {
		return errorf(http.StatusConflict, "not_quiescent", err.Error())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// backup streams a consistent checkpoint of the region's store as a tar
// (internal/backupfmt). A failure after the first byte cannot become a JSON
// error: the stream then lacks its END entry, which the reader refuses.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.admin(r); e != nil {
		return e
	}
	b, err := s.cfg.Admin.Backup(r.Context())
	switch {
	case errors.Is(err, ErrBackupUnsupported):
		return errorf(http.StatusNotImplemented, "backup_unsupported", err.Error())
	case errors.Is(err, ErrBackupBusy):
		return errorf(http.StatusConflict, "backup_in_progress", err.Error())
	case err != nil:
		return retryable(http.StatusServiceUnavailable, "unavailable", "backup: "+err.Error(), time.Second)
	}
	defer b.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="`+s.cfg.Region+`.tar"`)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// A socket deadline is wall time, whatever clock the server was given.
	err = b.WriteTo(w, func() { _ = rc.SetWriteDeadline(time.Now().Add(backupFileDeadline)) })
	if err != nil && s.cfg.Logger != nil {
		s.cfg.Logger.Warn("backup stream failed", "err", err)
	}
	return nil
}

func (s *Server) log(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.admin(r); e != nil {
		return e
	}
	q := r.URL.Query()
	part, err1 := strconv.ParseUint(q.Get("partition"), 10, 32)
	after, err2 := strconv.ParseUint(q.Get("after"), 10, 64)
	if q.Get("after") == "" {
		after, err2 = 0, nil
	}
	limit := 1000
	var err3 error
	if v := q.Get("limit"); v != "" {
		limit, err3 = strconv.Atoi(v)
	}
	if err := errors.Join(err1, err2, err3); err != nil || limit < 1 || limit > 10000 {
		return errorf(http.StatusBadRequest, "invalid_query", "want partition=N&after=POS&limit=1..10000")
	}
	out, err := s.cfg.Admin.Log(r.Context(), uint32(part), after, limit)
	if err != nil {
		return errorf(http.StatusBadRequest, "invalid_query", err.Error())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
