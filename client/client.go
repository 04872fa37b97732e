package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/likes-dev/likes/clock"
)

// Errors. An HTTP error answer is an *Error instead (errors.As).
var (
	// ErrTransport: no (complete) answer: the connection failed, was cut off
	// or the attempt timed out. The underlying error stays in the chain.
	ErrTransport = errors.New("client: transport failure")
	// ErrAnswerCut: the status line arrived but the body was cut off (always
	// with ErrTransport; the request may have been applied).
	ErrAnswerCut = errors.New("client: answer cut off")
	// ErrBadAnswer: a success status whose body does not decode.
	ErrBadAnswer = errors.New("client: malformed answer")
	// ErrInvalidArgument: an argument the API would refuse (no request is sent).
	ErrInvalidArgument = errors.New("client: invalid argument")
)

// The API's error codes (api/openapi.yaml, components.schemas.ErrorCode).
const (
	CodeInvalidID              = "invalid_id"
	CodeBadJSON                = "bad_json"
	CodeMissingIdempotencyKey  = "missing_idempotency_key"
	CodeInvalidIdempotencyKey  = "invalid_idempotency_key"
	CodeInvalidLimit           = "invalid_limit"
	CodeInvalidCursor          = "invalid_cursor"
	CodeInvalidBatch           = "invalid_batch"
	CodeInvalidQuery           = "invalid_query"
	CodeUnauthenticated        = "unauthenticated"
	CodeInvalidToken           = "invalid_token"
	CodeForbidden              = "forbidden"
	CodeNotFound               = "not_found"
	CodeIdempotencyKeyConflict = "idempotency_key_conflict"
	CodeNotQuiescent           = "not_quiescent"
	CodeUserErased             = "user_erased"
	CodeBodyTooLarge           = "body_too_large"
	CodeRateLimited            = "rate_limited"
	CodeInternal               = "internal"
	CodeOverloaded             = "overloaded"
	CodeNotAuthoritative       = "not_authoritative"
	CodeStorageUnavailable     = "storage_unavailable"
	CodeTimeout                = "timeout"
	CodeUnavailable            = "unavailable"
	CodeNotReady               = "not_ready"
)

// Error is an error answer of the API: `{"error":{"code","message"}}` with
// its HTTP status.
type Error struct {
	Status     int
	Code       string // "" when the body was not the API's error body
	Message    string
	RetryAfter time.Duration // from the Retry-After header (429, 503)
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("client: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("client: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Retryable reports whether the API says to try again (429, 503).
func (e *Error) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable
}

// MaxIDBytes bounds item ids, user ids and idempotency keys.
const MaxIDBytes = 256

func validID(what, s string) error {
	if s == "" || len(s) > MaxIDBytes || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be 1..%d bytes of UTF-8", ErrInvalidArgument, what, MaxIDBytes)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s contains a control character", ErrInvalidArgument, what)
		}
	}
	return nil
}

// TokenSource supplies the bearer token of a request (nil token source or ""
// token: no Authorization header).
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// StaticToken is a TokenSource that always answers the same token.
type StaticToken string

// Token implements TokenSource.
func (s StaticToken) Token(context.Context) (string, error) { return string(s), nil }

// TokenFunc adapts a function to TokenSource.
type TokenFunc func(ctx context.Context) (string, error)

// Token implements TokenSource.
func (f TokenFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// Session holds the newest Likes-Session token; safe for concurrent use, and
// may be shared by clients (one per user across regions).
type Session struct {
	mu  sync.Mutex
	tok string
}

// Token returns the newest token ("" before any write).
func (s *Session) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tok
}

// Set replaces the token ("" clears it).
func (s *Session) Set(tok string) {
	s.mu.Lock()
	s.tok = tok
	s.mu.Unlock()
}

// RetryPolicy bounds the retries of one logical call. Zero fields take the
// defaults of DefaultRetryPolicy.
type RetryPolicy struct {
	MaxAttempts    int           // attempts per call, the first included (default 4; 1: no retries)
	BaseDelay      time.Duration // first backoff ceiling (default 100ms)
	MaxDelay       time.Duration // backoff ceiling (default 2s)
	MaxWait        time.Duration // total waiting between attempts of one call (default 10s)
	AttemptTimeout time.Duration // per attempt (default 5s; negative: none but the context's)
}

// DefaultRetryPolicy is the policy of a client without WithRetry.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second, MaxWait: 10 * time.Second, AttemptTimeout: 5 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.MaxWait <= 0 {
		p.MaxWait = d.MaxWait
	}
	if p.AttemptTimeout == 0 {
		p.AttemptTimeout = d.AttemptTimeout
	}
	return p
}

// Attempt describes one HTTP attempt of a logical call (WithObserver).
type Attempt struct {
	Op     string // "like", "unlike", "count", … (the operationId)
	N      int    // 1 for the first attempt
	Method string
	Path   string // escaped
	Key    string // the Idempotency-Key sent ("" for reads)
	Start  time.Time
	End    time.Time
	Status int    // 0: no answer
	Code   string // the API error code, if any
	Header http.Header
	Err    error         // nil for any HTTP answer that was read whole
	Wait   time.Duration // the wait before the next attempt (0: none follows)
}

// Client talks to one region. Build it with New.
type Client struct {
	base     string
	hc       *http.Client
	tokens   TokenSource
	session  *Session
	retry    RetryPolicy
	observer func(Attempt)
	clk      clock.Clock
	sleep    func(ctx context.Context, d time.Duration) error
	newKey   func() string
	jitter   func() float64 // uniform in [0, 1)
	maxBody  int64
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a client of its own with
// http.DefaultTransport's settings).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTokenSource sets where bearer tokens come from.
func WithTokenSource(ts TokenSource) Option { return func(c *Client) { c.tokens = ts } }

// WithToken is WithTokenSource(StaticToken(tok)).
func WithToken(tok string) Option { return WithTokenSource(StaticToken(tok)) }

// WithSession shares a Session (default: one of the client's own).
func WithSession(s *Session) Option { return func(c *Client) { c.session = s } }

// WithRetry sets the retry policy.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p.withDefaults() } }

// WithoutRetries makes every call a single attempt.
func WithoutRetries() Option {
	return func(c *Client) {
		p := c.retry
		p.MaxAttempts = 1
		c.retry = p
	}
}

// WithObserver calls f after every attempt (from the calling goroutine).
func WithObserver(f func(Attempt)) Option { return func(c *Client) { c.observer = f } }

// WithClock sets the clock that stamps attempts (default clock.Real).
func WithClock(clk clock.Clock) Option { return func(c *Client) { c.clk = clk } }

// WithSleep sets how the client waits between attempts (default: a timer
// that the context cancels). Tests pass one that records and returns.
func WithSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.sleep = f }
}

// WithKeyGenerator sets how a call's Idempotency-Key is made when the caller
// gives none (default: 16 random bytes, hex).
func WithKeyGenerator(f func() string) Option { return func(c *Client) { c.newKey = f } }

// WithJitter sets the jitter source, uniform in [0, 1) (default math/rand/v2).
func WithJitter(f func() float64) Option { return func(c *Client) { c.jitter = f } }

// New builds a client of the region at baseURL (http or https, no query).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: base URL %q must be http(s)://host[:port][/prefix]", ErrInvalidArgument, baseURL)
	}
	c := &Client{
		base:    strings.TrimRight(baseURL, "/"),
		hc:      &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		session: &Session{},
		retry:   DefaultRetryPolicy,
		clk:     clock.Real{},
		sleep:   sleepCtx,
		newKey:  randomKey,
		jitter:  rand.Float64,
		maxBody: 4 << 20,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil || c.session == nil || c.clk == nil || c.sleep == nil || c.newKey == nil || c.jitter == nil {
		return nil, fmt.Errorf("%w: a nil option", ErrInvalidArgument)
	}
	return c, nil
}

// Session returns the client's session holder.
func (c *Client) Session() *Session { return c.session }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randomKey() string {
	var b [16]byte
	if _, err := cryptorand(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; fall back anyway.
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
	}
	return "cl-" + hex.EncodeToString(b[:])
}

var cryptorand = crand.Read

// CallOption tunes one logical call.
type CallOption func(*callOpts)

type callOpts struct {
	key         string
	token       *string
	session     *string
	anonymous   bool
	ifNoneMatch string
	onAttempt   func(Attempt)
}

// IdempotencyKey sets the call's key (Like, Unlike) instead of a generated
// one: pass the key of the first try when re-issuing an action.
func IdempotencyKey(k string) CallOption { return func(o *callOpts) { o.key = k } }

// BearerToken sends tok for this call instead of the token source's.
func BearerToken(tok string) CallOption { return func(o *callOpts) { o.token = &tok } }

// SessionToken sends tok as Likes-Session for this call ("" none) instead of
// the client's session, and leaves the client's session alone (the answer's
// token is in the result).
func SessionToken(tok string) CallOption { return func(o *callOpts) { o.session = &tok } }

// Anonymous sends no Authorization (a public, cacheable BatchGet).
func Anonymous() CallOption { return func(o *callOpts) { o.anonymous = true } }

// OnAttempt calls f after each attempt of this call (after the client's
// WithObserver), from the calling goroutine.
func OnAttempt(f func(Attempt)) CallOption { return func(o *callOpts) { o.onAttempt = f } }

// IfNoneMatch sends an ETag (Count, BatchGet); a match answers NotModified.
func IfNoneMatch(etag string) CallOption { return func(o *callOpts) { o.ifNoneMatch = etag } }

// request is one logical call.
type request struct {
	op     string
	method string
	path   string
	body   []byte
	key    string // Idempotency-Key
	authed bool   // send a token (required or optional)
}

// response is the final answer of a call.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (c *Client) do(ctx context.Context, r request, o callOpts) (response, error) {
	var tok string
	if r.authed && !o.anonymous {
		if o.token != nil {
			tok = *o.token
		} else if c.tokens != nil {
			t, err := c.tokens.Token(ctx)
			if err != nil {
				return response{}, fmt.Errorf("client: token source: %w", err)
			}
			tok = t
		}
	}
	sess := c.session.Token()
	if o.session != nil {
		sess = *o.session
	}
	var waited time.Duration
	var last error
	for n := 1; ; n++ {
		res, a, err := c.attempt(ctx, r, n, tok, sess, o)
		if err == nil {
			if o.session == nil && res.status/100 == 2 {
				if s := res.header.Get("Likes-Session"); s != "" {
					c.session.Set(s)
				}
			}
			c.observe(a, o)
			return res, nil
		}
		last = err
		wait, retry := c.backoff(ctx, err, n, waited)
		if !retry {
			c.observe(a, o)
			return res, err
		}
		a.Wait = wait
		c.observe(a, o)
		if err := c.sleep(ctx, wait); err != nil {
			return response{}, fmt.Errorf("client: %s: %w (last attempt: %w)", r.op, err, last)
		}
		waited += wait
	}
}

func (c *Client) observe(a Attempt, o callOpts) {
	if c.observer != nil {
		c.observer(a)
	}
	if o.onAttempt != nil {
		o.onAttempt(a)
	}
}

// backoff decides whether attempt n's error is retried, and after what wait.
func (c *Client) backoff(ctx context.Context, err error, n int, waited time.Duration) (time.Duration, bool) {
	p := c.retry
	if n >= p.MaxAttempts || ctx.Err() != nil {
		return 0, false
	}
	var after time.Duration
	var ae *Error
	switch {
	case errors.As(err, &ae):
		if !ae.Retryable() {
			return 0, false
		}
		after = ae.RetryAfter
	case errors.Is(err, ErrTransport):
	default:
		return 0, false
	}
	ceil := p.BaseDelay << (n - 1)
	if ceil > p.MaxDelay || ceil <= 0 {
		ceil = p.MaxDelay
	}
	wait := time.Duration(c.jitter() * float64(ceil))
	if wait < after {
		wait = after
	}
	if waited+wait > p.MaxWait {
		return 0, false
	}
	if dl, ok := ctx.Deadline(); ok && c.clk.Now().Add(wait).After(dl) {
		return 0, false
	}
	return wait, true
}

func (c *Client) attempt(ctx context.Context, r request, n int, tok, sess string, o callOpts) (response, Attempt, error) {
	a := Attempt{Op: r.op, N: n, Method: r.method, Path: r.path, Key: r.key}
	actx := ctx
	if c.retry.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.retry.AttemptTimeout)
		defer cancel()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(actx, r.method, c.base+r.path, body)
	if err != nil {
		a.Err = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		return response{}, a, a.Err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	if sess != "" {
		req.Header.Set("Likes-Session", sess)
	}
	if o.ifNoneMatch != "" {
		req.Header.Set("If-None-Match", o.ifNoneMatch)
	}
	a.Start = c.clk.Now()
	res, err := c.hc.Do(req)
	if err != nil {
		a.End = c.clk.Now()
		if ctx.Err() != nil { // the caller's context, not the attempt's timeout
			a.Err = fmt.Errorf("client: %s: %w", r.op, ctx.Err())
		} else {
			a.Err = fmt.Errorf("%w: %s: %w", ErrTransport, r.op, err)
		}
		return response{}, a, a.Err
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, c.maxBody))
	_ = res.Body.Close()
	a.End = c.clk.Now()
	a.Status, a.Header = res.StatusCode, res.Header
	out := response{status: res.StatusCode, header: res.Header, body: raw}
	if err != nil {
		a.Err = fmt.Errorf("%w: %w: %s: reading the %d answer: %w", ErrTransport, ErrAnswerCut, r.op, res.StatusCode, err)
		return out, a, a.Err
	}
	if res.StatusCode/100 != 2 && res.StatusCode != http.StatusNotModified {
		e := &Error{Status: res.StatusCode}
		var eb struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
			e.Code, e.Message = eb.Error.Code, eb.Error.Message
		} else {
			e.Message = strings.TrimSpace(string(raw))
		}
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		a.Code, a.Err = e.Code, e
		return out, a, e
	}
	return out, a, nil
}

func decode(op string, res response, v any) error {
	if err := json.Unmarshal(res.body, v); err != nil {
		return fmt.Errorf("%w: %s: %d %q: %w", ErrBadAnswer, op, res.status, truncate(res.body), err)
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

func itemPath(item string) string { return "/v1/items/" + escape(item) }

// escape percent-encodes a path segment, '/' and '.' included (so that ids
// "." and ".." are not dot segments).
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

func opts(o []CallOption) callOpts {
	var co callOpts
	for _, f := range o {
		f(&co)
	}
	return co
}
