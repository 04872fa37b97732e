package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/cache/inproc"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/pebblestore"
)

var testSecret = []byte("api-test-secret")

// env is a real region behind a real HTTP server on loopback.
type env struct {
	t      *testing.T
	srv    *httptest.Server
	client *http.Client
	secret []byte
	now    func() time.Time // the server's clock, for signing tokens
	reg    *region.Region   // nil for a kit built by hand
}

// newRegionEnv opens a region in a temporary folder (fast windows, no per-user
// limit unless mod sets one) and serves its API on loopback.
func newRegionEnv(t *testing.T, mod func(*region.Config)) *env {
	t.Helper()
	cfg := region.Config{
		Name: "us", DataDir: t.TempDir(), Partitions: 4, Window: 10 * time.Millisecond,
		Secret: testSecret, UserRate: -1,
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := region.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("region.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("region.Close: %v", err)
		}
	})
	srv := httptest.NewServer(r.API)
	t.Cleanup(srv.Close)
	c := cfg.Clock
	if c == nil {
		c = clock.Real{}
	}
	return &env{t: t, srv: srv, client: contractClient(t, srv.Client()), secret: cfg.Secret, now: c.Now, reg: r}
}

// kitOptions shape a server assembled by hand from api.New over a real Pebble
// store, so a test can put a fake in front of any dependency.
type kitOptions struct {
	wrapStore    func(edge.Store) edge.Store
	authority    edge.Authority
	countStore   func(counts.CountStore) counts.CountStore
	maxInFlight  int
	writeTimeout time.Duration
}

func newKit(t *testing.T, o kitOptions) *env {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(t.TempDir(), "db"), Region: "us", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var es edge.Store = st
	if o.wrapStore != nil {
		es = o.wrapStore(st)
	}
	svc, err := edge.NewService(edge.ServiceConfig{Store: es, Overlay: inproc.NewOverlay(nil, 0), Authority: o.authority})
	if err != nil {
		t.Fatal(err)
	}
	er, err := edge.NewEraser(context.Background(), edge.EraserConfig{Service: svc, Store: es, Jobs: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = er.Close() })
	aggs, err := pipeline.NewGroup(context.Background(), pipeline.Config{Region: "us", Log: st, Cells: st, Window: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aggs.Close() })
	var cs counts.CountStore = st
	if o.countStore != nil {
		cs = o.countStore(st)
	}
	cr, err := counts.NewReader(counts.Config{Store: cs, Cache: inproc.NewCache(nil, 0), Regions: []string{"us"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cr.Close() })
	s, err := api.New(api.Config{
		Region: "us", Service: svc, Eraser: er, Store: es, Counts: cr,
		Verifier:          auth.NewVerifier(testSecret, time.Now),
		MaxInFlightWrites: o.maxInFlight, WriteTimeout: o.writeTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, client: contractClient(t, srv.Client()), secret: testSecret, now: time.Now}
}

func (e *env) token(user string, admin bool) string {
	e.t.Helper()
	tok, err := auth.Sign(e.secret, user, admin, time.Hour, e.now())
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// call is one HTTP request.
type call struct {
	method string
	path   string // already escaped
	token  string // bearer token; "" sends no Authorization header
	key    string // Idempotency-Key; "" sends none
	body   []byte
	header map[string]string
}

// resp is an HTTP answer (e.client has checked it against api/openapi.yaml:
// contractTransport) with its body read.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

func (e *env) do(c call) resp {
	e.t.Helper()
	r, err := e.try(c)
	if err != nil {
		e.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	return r
}

// try is do without failing the test (safe from any goroutine).
func (e *env) try(c call) (resp, error) {
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, e.srv.URL+c.path, body)
	if err != nil {
		return resp{}, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	res, err := e.client.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return resp{}, err
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}, nil
}

func itemPath(item string) string { return "/v1/items/" + escape(item) }

// escape percent-encodes a path segment, '/' and '.' included (so that ids "."
// and ".." are not dot segments).
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// answer is the body of a like or unlike.
type answer struct {
	Item    string `json:"itemId"`
	User    string `json:"userId"`
	Liked   bool   `json:"liked"`
	Changed bool   `json:"changed"`
}

func (e *env) like(tok, item, key string) resp {
	e.t.Helper()
	return e.do(call{method: "POST", path: itemPath(item) + "/likes", token: tok, key: key})
}

func (e *env) unlike(tok, user, item, key string) resp {
	e.t.Helper()
	return e.do(call{method: "DELETE", path: itemPath(item) + "/likes/" + escape(user), token: tok, key: key})
}

// mustAnswer checks a 200 write answer.
func mustAnswer(t *testing.T, r resp, liked, changed bool) answer {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("want 200, got %v", r)
	}
	var a answer
	decodeStrict(t, r.body, &a)
	if a.Liked != liked || a.Changed != changed {
		t.Fatalf("want liked=%v changed=%v, got %+v", liked, changed, a)
	}
	return a
}

func decodeStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// wantError checks status, the exact error body shape and the code.
func wantError(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("want %d %s, got %v", status, code, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type = %q, want application/json (%v)", ct, r)
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	decodeStrict(t, r.body, &body)
	if body.Error.Code != code {
		t.Fatalf("want code %q, got %v", code, r)
	}
	if body.Error.Message == "" {
		t.Fatalf("error without a message: %v", r)
	}
	retry := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
	ra := r.header.Get("Retry-After")
	if retry {
		n, err := strconv.Atoi(ra)
		if err != nil || n < 1 {
			t.Fatalf("%d without a valid Retry-After (%q): %v", status, ra, r)
		}
	} else if ra != "" {
		t.Fatalf("%d with Retry-After %q", status, ra)
	}
}

// countBody is GET /v1/items/{id}/count.
type countBody struct {
	Item        string `json:"itemId"`
	Count       int64  `json:"count"`
	AsOf        string `json:"asOf"`
	StalenessMs int64  `json:"stalenessMs"`
	Liked       *bool  `json:"liked,omitempty"`
}

func (c countBody) asOf(t *testing.T) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, c.AsOf)
	if err != nil {
		t.Fatalf("asOf %q: %v", c.AsOf, err)
	}
	return at
}

const pollTimeout = 20 * time.Second

// countAfter polls an item's count until its asOf label proves it includes every
// write acknowledged before `after`, and returns that count. Event times are
// assigned at commit (at most 1ms past the wall clock), hence the margin.
func (e *env) countAfter(item string, after time.Time) countBody {
	e.t.Helper()
	return e.countsAfter([]string{item}, after)[item]
}

// countsAfter does countAfter for many items through batchGet.
func (e *env) countsAfter(items []string, after time.Time) map[string]countBody {
	e.t.Helper()
	bound := after.Add(2 * time.Millisecond).UnixMilli()
	out := map[string]countBody{}
	deadline := time.Now().Add(pollTimeout)
	pending := append([]string(nil), items...)
	for len(pending) > 0 {
		var next []string
		for start := 0; start < len(pending); start += api.MaxBatchItems {
			chunk := pending[start:min(len(pending), start+api.MaxBatchItems)]
			for _, c := range e.batchGet("", chunk) {
				if c.asOf(e.t).UnixMilli() >= bound {
					out[c.Item] = c
				} else {
					next = append(next, c.Item)
				}
			}
		}
		pending = next
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("counts of %d items never caught up with %v (e.g. %q)", len(pending), after, pending[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out
}

func (e *env) batchGet(tok string, items []string) []countBody {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"itemIds": items})
	r := e.do(call{method: "POST", path: "/v1/likes:batchGet", token: tok, body: b})
	if r.status != http.StatusOK {
		e.t.Fatalf("batchGet: %v", r)
	}
	var body struct {
		Items []countBody `json:"items"`
	}
	decodeStrict(e.t, r.body, &body)
	if len(body.Items) != len(items) {
		e.t.Fatalf("batchGet of %d items answered %d", len(items), len(body.Items))
	}
	for i, c := range body.Items {
		if c.Item != items[i] {
			e.t.Fatalf("batchGet item %d is %q, want %q", i, c.Item, items[i])
		}
	}
	return body.Items
}

func (e *env) getCount(item string) countBody {
	e.t.Helper()
	r := e.do(call{method: "GET", path: itemPath(item) + "/count"})
	if r.status != http.StatusOK {
		e.t.Fatalf("count %q: %v", item, r)
	}
	var c countBody
	decodeStrict(e.t, r.body, &c)
	return c
}

func (e *env) button(user, item string) bool {
	e.t.Helper()
	r := e.do(call{method: "GET", path: itemPath(item) + "/likes/" + escape(user)})
	if r.status != http.StatusOK {
		e.t.Fatalf("button: %v", r)
	}
	var b struct {
		Item  string `json:"itemId"`
		User  string `json:"userId"`
		Liked bool   `json:"liked"`
	}
	decodeStrict(e.t, r.body, &b)
	if b.Item != item || b.User != user {
		e.t.Fatalf("button answered for (%q, %q), want (%q, %q)", b.Item, b.User, item, user)
	}
	return b.Liked
}

// likersPage is GET /v1/items/{id}/likes.
type likersPage struct {
	Item   string   `json:"itemId"`
	Users  []string `json:"userIds"`
	Cursor string   `json:"nextCursor"`
}

func (e *env) likers(item, query string) (likersPage, error) {
	r, err := e.try(call{method: "GET", path: itemPath(item) + "/likes" + query})
	if err != nil {
		return likersPage{}, err
	}
	if r.status != http.StatusOK {
		return likersPage{}, fmt.Errorf("likers: %v", r)
	}
	var p likersPage
	if err := json.Unmarshal(r.body, &p); err != nil {
		return likersPage{}, err
	}
	return p, nil
}

// allLikers walks every page with the given page size (0: the default).
func (e *env) allLikers(item string, limit int) ([]string, error) {
	var users []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			return nil, fmt.Errorf("pagination does not end")
		}
		q := "?cursor=" + cursor
		if limit > 0 {
			q += "&limit=" + strconv.Itoa(limit)
		}
		p, err := e.likers(item, q)
		if err != nil {
			return nil, err
		}
		if limit > 0 && len(p.Users) > limit {
			return nil, fmt.Errorf("page of %d users with limit %d", len(p.Users), limit)
		}
		users = append(users, p.Users...)
		if p.Cursor == "" {
			return users, nil
		}
		cursor = p.Cursor
	}
}

// parallel runs f(i) for i in [0, n) on `workers` goroutines and reports the
// first error.
func parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// likeOK is a goroutine-safe like that expects 200.
func (e *env) likeOK(tok, item, key string) error {
	r, err := e.try(call{method: "POST", path: itemPath(item) + "/likes", token: tok, key: key})
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return fmt.Errorf("like %q: %v", item, r)
	}
	return nil
}

func (e *env) unlikeOK(tok, user, item, key string) error {
	r, err := e.try(call{method: "DELETE", path: itemPath(item) + "/likes/" + escape(user), token: tok, key: key})
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return fmt.Errorf("unlike %q: %v", item, r)
	}
	return nil
}
