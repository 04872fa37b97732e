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
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/api/apitest"
)

// The contract: every response an api test receives through env.client is
// validated against api/openapi.yaml by apitest.Client, and a mismatch fails
// the test (see package apitest). Only responses are held to the document
// there: the tests send invalid requests on purpose (and the document says
// how they are answered); the client package's requests are checked too
// (apitest.CheckRequests in client_test.go).

func spec(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := apitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func contractClient(t testing.TB, c *http.Client) *http.Client { return apitest.Client(t, c) }

func checkRequests(t testing.TB, c *http.Client) *http.Client { return apitest.CheckRequests(t, c) }

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
	spec(t)
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
		if err := apitest.CheckResponse(g.r, g.status, g.h, []byte(g.body)); err != nil {
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
		if err := apitest.CheckResponse(b.r, b.status, b.h, []byte(b.body)); err == nil {
			t.Errorf("%s: the check let a response the document forbids pass", b.name)
		}
	}
}

// TestMain prints, with -v, which (operation, status) pairs the package's
// tests received, so an operation no test exercises shows.
func TestMain(m *testing.M) {
	code := m.Run()
	if testing.Verbose() {
		cov := apitest.Coverage()
		fmt.Printf("contract: %d (operation, status) pairs validated:\n", len(cov))
		for _, k := range cov {
			fmt.Println("  " + k)
		}
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
