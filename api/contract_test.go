package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/likes-dev/likes/api"
)

// The contract: every response an api test receives through env.client is
// validated against api/openapi.yaml (the embedded api.OpenAPI) by
// contractTransport, and a mismatch fails the test. kin-openapi loads the
// document as OpenAPI 3.1 and, for a 3.1 document, validates bodies and
// headers with its JSON Schema 2020-12 validator (so 3.1 forms such as
// `const`, `type` arrays and keywords next to a `$ref` apply as written).
//
// Only responses are held to the document: the tests send invalid requests on
// purpose (and the document says how they are answered).

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

func spec(t testing.TB) *openapi3.T {
	t.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI)
		if err != nil {
			specErr = fmt.Errorf("load openapi.yaml: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			specErr = fmt.Errorf("openapi.yaml is not a valid document: %w", err)
			return
		}
		specDoc = doc
	})
	if specErr != nil {
		t.Fatal(specErr)
	}
	return specDoc
}

// findRoute matches a request against the document's paths on the escaped
// path, segment by segment (ids may hold an encoded '/'), and returns the
// operation with its unescaped path parameters. ok is false when no path
// and method match: the server's catch-all answers those.
func findRoute(doc *openapi3.T, r *http.Request) (route *routers.Route, params map[string]string, ok bool) {
	segs := strings.Split(r.URL.EscapedPath(), "/")
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	for tmpl, item := range doc.Paths.Map() {
		tsegs := strings.Split(tmpl, "/")
		if len(tsegs) != len(segs) {
			continue
		}
		p := map[string]string{}
		match := true
		for i, ts := range tsegs {
			v, err := url.PathUnescape(segs[i])
			if err != nil {
				match = false
				break
			}
			if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") {
				if v == "" {
					match = false
					break
				}
				p[ts[1:len(ts)-1]] = v
			} else if ts != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		op := item.GetOperation(method)
		if op == nil {
			return nil, nil, false
		}
		return &routers.Route{Spec: doc, Path: tmpl, PathItem: item, Method: method, Operation: op}, p, true
	}
	return nil, nil, false
}

// checkResponse reports how a response departs from the document (nil: it
// matches).
func checkResponse(doc *openapi3.T, req *http.Request, status int, header http.Header, body []byte) error {
	if req.Method == http.MethodHead {
		return nil
	}
	ra := header.Get("Retry-After")
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable && ra != "" {
		return fmt.Errorf("status %d carries Retry-After %q (only 429 and 503 may)", status, ra)
	}
	route, params, ok := findRoute(doc, req)
	if !ok {
		// The catch-all: 404 not_found with the error body.
		if status != http.StatusNotFound {
			return fmt.Errorf("%s %s is not in the document and answered %d (want the catch-all 404)", req.Method, req.URL.EscapedPath(), status)
		}
		return checkBody(doc, "NotFoundError", header, body)
	}
	if route.Operation.Responses.Status(status) == nil {
		return fmt.Errorf("%s %s (%s): status %d is not documented", req.Method, route.Path, route.Operation.OperationID, status)
	}
	if status == http.StatusNotModified {
		// kin-openapi skips 304: check its headers and empty body here.
		for name, h := range route.Operation.Responses.Status(status).Value.Headers {
			if h.Value.Required && header.Get(name) == "" {
				return fmt.Errorf("%s: 304 without required header %s", route.Operation.OperationID, name)
			}
		}
		if header.Get("ETag") == "" {
			return fmt.Errorf("%s: 304 without an ETag", route.Operation.OperationID)
		}
		if len(bytes.TrimSpace(body)) != 0 {
			return fmt.Errorf("%s: 304 with a body %q", route.Operation.OperationID, body)
		}
		return nil
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts},
		Status:                 status,
		Header:                 header,
		Options:                opts,
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s (%s) answered %d %s: %w", req.Method, route.Path, route.Operation.OperationID, status, bytes.TrimSpace(body), err)
	}
	return nil
}

// checkBody validates a JSON body against a named schema of the document.
func checkBody(doc *openapi3.T, schema string, header http.Header, body []byte) error {
	if ct := header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("Content-Type %q, want application/json", ct)
	}
	s := doc.Components.Schemas[schema]
	if s == nil {
		return fmt.Errorf("no schema %s", schema)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("body %q: %w", body, err)
	}
	if err := s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("body %s does not match %s: %w", bytes.TrimSpace(body), schema, err)
	}
	return nil
}

// contractTransport validates every response against the document and fails
// the test on a mismatch (t.Errorf is safe from any goroutine); the response
// itself is handed on unchanged.
type contractTransport struct {
	t    testing.TB
	base http.RoundTripper
}

func (c *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(req)
	if err != nil {
		return res, err
	}
	body, rerr := io.ReadAll(res.Body)
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return res, nil // a cut-off body: the caller sees the truncated bytes
	}
	doc := spec(c.t)
	if verr := checkResponse(doc, req, res.StatusCode, res.Header, body); verr != nil {
		c.t.Errorf("response does not match api/openapi.yaml: %v", verr)
	}
	coverage.hit(req, doc, res.StatusCode)
	return res, nil
}

// contractClient wraps a test server's client with the contract check.
func contractClient(t testing.TB, c *http.Client) *http.Client {
	cc := *c
	base := cc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc.Transport = &contractTransport{t: t, base: base}
	return &cc
}

// coverage counts, over the package's tests, the (operation, status) pairs
// seen, for TestContractCoverage's report.
var coverage = &seen{m: map[string]int{}}

type seen struct {
	mu sync.Mutex
	m  map[string]int
}

func (s *seen) hit(req *http.Request, doc *openapi3.T, status int) {
	id := "catch-all"
	if route, _, ok := findRoute(doc, req); ok {
		id = route.Operation.OperationID
	}
	s.mu.Lock()
	s.m[id+" "+strconv.Itoa(status)]++
	s.mu.Unlock()
}

// serverRoutes reads the patterns api.New registers (s.route, s.mux.HandleFunc,
// s.mux.Handle with a literal pattern) from server.go, the catch-all "/" left out.
func serverRoutes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "server.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "route" && sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		p, err := strconv.Unquote(lit.Value)
		if err != nil || p == "/" {
			return true
		}
		out = append(out, p)
		return true
	})
	sort.Strings(out)
	return out
}

// TestContractRoutes: the document lists exactly the routes the server
// registers, method and path, and the document is a valid OpenAPI 3.1 one.
func TestContractRoutes(t *testing.T) {
	doc := spec(t)
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	sort.Strings(documented)
	registered := serverRoutes(t)
	if len(registered) < 15 {
		t.Fatalf("read only %d routes from server.go: %v", len(registered), registered)
	}
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is registered but not documented", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("route %q is documented but not registered", d)
		}
	}
	// Every operation documents its 2xx and, past the ops routes, 429 (the
	// per-IP limit applies to every API route).
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
			if strings.HasPrefix(path, "/v1/") && op.Responses.Status(429) == nil {
				t.Errorf("%s %s does not document 429", method, path)
			}
		}
	}
}

// TestContractRejectsDrift: the check fails responses the document does not
// allow (so a passing suite means something).
func TestContractRejectsDrift(t *testing.T) {
	doc := spec(t)
	req := func(method, path string) *http.Request {
		r, err := http.NewRequest(method, "http://127.0.0.1"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	jsonH := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	okCount := `{"itemId":"a","count":1,"asOf":"2026-01-02T03:04:05.123Z","stalenessMs":5}`
	public := "public, max-age=30, stale-while-revalidate=30, stale-if-error=300"
	good := []struct {
		name   string
		r      *http.Request
		status int
		h      http.Header
		body   string
	}{
		{"count", req("GET", "/v1/items/a/count"), 200, jsonH("Cache-Control", public, "ETag", `W/"1-abc"`, "Surrogate-Key", "item:a"), okCount},
		{"encoded slash id", req("GET", "/v1/items/a%2Fb/count"), 200, jsonH("Cache-Control", public), okCount},
		{"like", req("POST", "/v1/items/a/likes"), 200, jsonH("Likes-Session", "tok"), `{"itemId":"a","userId":"u","liked":true,"changed":false}`},
		{"503", req("POST", "/v1/items/a/likes"), 503, jsonH("Retry-After", "1"), `{"error":{"code":"overloaded","message":"m"}}`},
		{"catch-all", req("PUT", "/v1/nothing"), 404, jsonH(), `{"error":{"code":"not_found","message":"m"}}`},
		{"304", req("GET", "/v1/items/a/count"), 304, hdr("Cache-Control", public, "ETag", `W/"1-abc"`), ""},
	}
	for _, g := range good {
		if err := checkResponse(doc, g.r, g.status, g.h, []byte(g.body)); err != nil {
			t.Errorf("%s: a valid response was refused: %v", g.name, err)
		}
	}
	bad := []struct {
		name   string
		r      *http.Request
		status int
		h      http.Header
		body   string
	}{
		{"undocumented status", req("GET", "/v1/items/a/count"), 418, jsonH(), `{"error":{"code":"internal","message":"m"}}`},
		{"missing field", req("GET", "/v1/items/a/count"), 200, jsonH("Cache-Control", public), `{"itemId":"a","count":1,"asOf":"2026-01-02T03:04:05Z"}`},
		{"extra field", req("GET", "/v1/items/a/count"), 200, jsonH("Cache-Control", public), `{"itemId":"a","count":1,"asOf":"2026-01-02T03:04:05Z","stalenessMs":1,"x":1}`},
		{"bad asOf", req("GET", "/v1/items/a/count"), 200, jsonH("Cache-Control", public), `{"itemId":"a","count":1,"asOf":"yesterday","stalenessMs":1}`},
		{"personal count cached privately", req("GET", "/v1/items/a/count"), 200, jsonH("Cache-Control", "private, no-store"), okCount},
		{"button without Vary", req("GET", "/v1/items/a/likes/u"), 200, jsonH("Cache-Control", "private, no-store"), `{"itemId":"a","userId":"u","liked":true}`},
		{"503 without Retry-After", req("POST", "/v1/items/a/likes"), 503, jsonH(), `{"error":{"code":"overloaded","message":"m"}}`},
		{"400 with Retry-After", req("POST", "/v1/items/a/likes"), 400, jsonH("Retry-After", "1"), `{"error":{"code":"invalid_id","message":"m"}}`},
		{"unknown code", req("POST", "/v1/items/a/likes"), 400, jsonH(), `{"error":{"code":"oops","message":"m"}}`},
		{"code of another status", req("POST", "/v1/items/a/likes"), 400, jsonH(), `{"error":{"code":"rate_limited","message":"m"}}`},
		{"empty message", req("POST", "/v1/items/a/likes"), 400, jsonH(), `{"error":{"code":"invalid_id","message":""}}`},
		{"text error", req("POST", "/v1/items/a/likes"), 400, http.Header{"Content-Type": {"text/plain"}, "Cache-Control": {"no-store"}}, "bad"},
		{"catch-all 405", req("PUT", "/v1/nothing"), 405, jsonH(), `{"error":{"code":"not_found","message":"m"}}`},
		{"304 without ETag", req("GET", "/v1/items/a/count"), 304, hdr("Cache-Control", public), ""},
		{"304 on a write", req("POST", "/v1/items/a/likes"), 304, hdr("ETag", `W/"x"`), ""},
	}
	for _, b := range bad {
		if err := checkResponse(doc, b.r, b.status, b.h, []byte(b.body)); err == nil {
			t.Errorf("%s: the check let a response the document forbids pass", b.name)
		}
	}
}

// TestMain prints, with -v, which (operation, status) pairs the package's
// tests received, so an operation no test exercises shows.
func TestMain(m *testing.M) {
	code := m.Run()
	if testing.Verbose() {
		coverage.mu.Lock()
		keys := make([]string, 0, len(coverage.m))
		for k := range coverage.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Printf("contract: %d (operation, status) pairs validated:\n", len(keys))
		for _, k := range keys {
			fmt.Printf("  %-40s %d\n", k, coverage.m[k])
		}
		coverage.mu.Unlock()
	}
	os.Exit(code)
}

// TestContractOperatorAnswers exercises the answers no other test reads in
// full (a log page with events, an unready region, a mismatched reconcile
// after healing, the metrics text), so the contract checks them too.
func TestContractOperatorAnswers(t *testing.T) {
	e := newRegionEnv(t, nil)
	admin := e.token("root", true)
	for i, u := range []string{"a", "b"} {
		mustAnswer(t, e.like(e.token(u, false), "ops-item", fmt.Sprint("k", i)), true, true)
	}
	e.countAfter("ops-item", time.Now())
	events := 0
	for p := range 4 {
		r := e.do(call{method: "GET", path: fmt.Sprintf("/v1/admin/log?partition=%d&limit=10", p), token: admin})
		if r.status != http.StatusOK {
			t.Fatalf("log: %v", r)
		}
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		events += len(page.Events)
	}
	if events < 2 {
		t.Fatalf("the log pages held %d events, want the 2 likes", events)
	}
	if r := e.do(call{method: "POST", path: "/v1/admin/reconcile", token: admin, body: []byte(`{"heal":true}`)}); r.status != http.StatusOK && r.status != http.StatusConflict {
		t.Fatalf("reconcile heal: %v", r)
	}
	if r := e.do(call{method: "GET", path: "/metrics"}); r.status != http.StatusOK || !strings.Contains(string(r.body), "# TYPE") {
		t.Fatalf("metrics: %d", r.status)
	}
	if r := e.do(call{method: "GET", path: "/v1/admin/status", token: admin}); r.status != http.StatusOK {
		t.Fatalf("status: %v", r)
	}
	// An unready region answers 503 not_ready with Retry-After.
	e.reg.AddReadyCheck("contract-test", func(context.Context) error { return errors.New("not today") })
	wantError(t, e.do(call{method: "GET", path: "/readyz"}), http.StatusServiceUnavailable, "not_ready")
}

// requestCheck validates every request against the document before sending
// it (for a well-behaved client such as package client; the api tests send
// invalid requests on purpose and do not use it).
type requestCheck struct {
	t    testing.TB
	base http.RoundTripper
}

func (c *requestCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	doc := spec(c.t)
	route, params, ok := findRoute(doc, req)
	if !ok {
		c.t.Errorf("request %s %s is not in api/openapi.yaml", req.Method, req.URL.EscapedPath())
		return c.base.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: func(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
			if req.Header.Get("Authorization") == "" {
				return errors.New("no bearer token")
			}
			return nil
		}, MultiError: true},
	}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		c.t.Errorf("request %s %s (%s) does not match api/openapi.yaml: %v", req.Method, req.URL.EscapedPath(), route.Operation.OperationID, err)
	}
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	return c.base.RoundTrip(req)
}

// checkRequests wraps a client so its requests are validated too.
func checkRequests(t testing.TB, c *http.Client) *http.Client {
	cc := *c
	base := cc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc.Transport = &requestCheck{t: t, base: base}
	return &cc
}

// TestServesOpenAPI: GET /v1/openapi.yaml is the embedded document, with an
// ETag that answers 304.
func TestServesOpenAPI(t *testing.T) {
	e := newKit(t, kitOptions{})
	r := e.do(call{method: "GET", path: "/v1/openapi.yaml"})
	if r.status != http.StatusOK || !bytes.Equal(r.body, api.OpenAPI) || r.header.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /v1/openapi.yaml: %d %q, %d bytes", r.status, r.header.Get("Content-Type"), len(r.body))
	}
	etag := r.header.Get("ETag")
	if r := e.do(call{method: "GET", path: "/v1/openapi.yaml", header: map[string]string{"If-None-Match": etag}}); r.status != http.StatusNotModified {
		t.Fatalf("If-None-Match: %v", r)
	}
}
