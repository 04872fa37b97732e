// Package apitest holds the checks of the API contract (api/openapi.yaml, the
// embedded api.OpenAPI) for the tests of any package that talks to an
// api.Server: Client wraps an *http.Client so that every response it receives
// is validated against the document (a mismatch fails the test), and
// CheckRequests so that every request it sends is validated too.
//
// kin-openapi loads the document as OpenAPI 3.1 and, for a 3.1 document,
// validates bodies and headers with its JSON Schema 2020-12 validator, so 3.1
// forms (`const`, `type` arrays, keywords next to a `$ref`) apply as written.
// Requests are matched to operations on the escaped path, segment by segment
// (ids may hold an encoded '/'); a request that matches no documented route
// must be answered by the server's catch-all: 404 not_found.
//
// Only test code imports this package. Concurrency: every function is safe
// for concurrent use (the document is loaded once, read-only afterwards).
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/likes-dev/likes/api"
)

// ErrContract prefixes every departure from the document.
var ErrContract = errors.New("apitest: does not match api/openapi.yaml")

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

// Spec is the loaded and validated document.
func Spec() (*openapi3.T, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI)
		if err != nil {
			specErr = fmt.Errorf("apitest: load openapi.yaml: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			specErr = fmt.Errorf("apitest: openapi.yaml is not a valid document: %w", err)
			return
		}
		specDoc = doc
	})
	return specDoc, specErr
}

// FindRoute matches a request against the document's paths and returns the
// operation with its unescaped path parameters; ok is false when no path and
// method match.
func FindRoute(doc *openapi3.T, r *http.Request) (route *routers.Route, params map[string]string, ok bool) {
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

// CheckResponse reports how a response to req departs from the document
// (nil: it matches): an undocumented status, a body or a header that does
// not match its schema, a missing required header, Retry-After on a status
// other than 429 and 503.
func CheckResponse(req *http.Request, status int, header http.Header, body []byte) error {
	doc, err := Spec()
	if err != nil {
		return err
	}
	if req.Method == http.MethodHead {
		return nil
	}
	ra := header.Get("Retry-After")
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable && ra != "" {
		return fmt.Errorf("%w: status %d carries Retry-After %q (only 429 and 503 may)", ErrContract, status, ra)
	}
	route, params, ok := FindRoute(doc, req)
	if !ok {
		if status != http.StatusNotFound {
			return fmt.Errorf("%w: %s %s is not in the document and answered %d (want the catch-all 404)", ErrContract, req.Method, req.URL.EscapedPath(), status)
		}
		return checkBody(doc, "NotFoundError", header, body)
	}
	resp := route.Operation.Responses.Status(status)
	if resp == nil {
		return fmt.Errorf("%w: %s %s (%s): status %d is not documented", ErrContract, req.Method, route.Path, route.Operation.OperationID, status)
	}
	if status == http.StatusNotModified {
		// kin-openapi skips 304: its headers and empty body are checked here.
		for name, h := range resp.Value.Headers {
			if h.Value.Required && header.Get(name) == "" {
				return fmt.Errorf("%w: %s: 304 without the required header %s", ErrContract, route.Operation.OperationID, name)
			}
		}
		if header.Get("ETag") == "" {
			return fmt.Errorf("%w: %s: 304 without an ETag", ErrContract, route.Operation.OperationID)
		}
		if len(bytes.TrimSpace(body)) != 0 {
			return fmt.Errorf("%w: %s: 304 with a body %q", ErrContract, route.Operation.OperationID, body)
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
		return fmt.Errorf("%w: %s %s (%s) answered %d %s: %w", ErrContract, req.Method, route.Path, route.Operation.OperationID, status, bytes.TrimSpace(body), err)
	}
	return nil
}

// checkBody validates a JSON body against a named schema of the document.
func checkBody(doc *openapi3.T, schema string, header http.Header, body []byte) error {
	if ct := header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("%w: Content-Type %q, want application/json", ErrContract, ct)
	}
	s := doc.Components.Schemas[schema]
	if s == nil {
		return fmt.Errorf("%w: no schema %s", ErrContract, schema)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%w: body %q: %w", ErrContract, body, err)
	}
	if err := s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("%w: body %s does not match %s: %w", ErrContract, bytes.TrimSpace(body), schema, err)
	}
	return nil
}

// CheckRequest reports how a request with the given body departs from the
// document (nil: it matches): an undocumented route, a parameter, header or
// body that does not match its schema, a missing bearer token where the
// operation needs one. req.Body is not read.
func CheckRequest(req *http.Request, body []byte) error {
	doc, err := Spec()
	if err != nil {
		return err
	}
	route, params, ok := FindRoute(doc, req)
	if !ok {
		return fmt.Errorf("%w: request %s %s is not a documented route", ErrContract, req.Method, req.URL.EscapedPath())
	}
	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(body))
	auth := func(context.Context, *openapi3filter.AuthenticationInput) error {
		if req.Header.Get("Authorization") == "" {
			return errors.New("no bearer token")
		}
		return nil
	}
	in := &openapi3filter.RequestValidationInput{
		Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: auth, MultiError: true},
	}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return fmt.Errorf("%w: request %s %s (%s): %w", ErrContract, req.Method, req.URL.EscapedPath(), route.Operation.OperationID, err)
	}
	return nil
}

// transport validates responses (and, with requests set, requests) and fails
// the test on a mismatch (t.Errorf is safe from any goroutine); the response
// itself is handed on unchanged.
type transport struct {
	t        testing.TB
	base     http.RoundTripper
	requests bool
}

func (c *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.requests {
		var body []byte
		if req.Body != nil && req.Body != http.NoBody {
			b, err := io.ReadAll(req.Body)
			_ = req.Body.Close()
			if err != nil {
				return nil, err
			}
			body = b
			// Send a copy with the bytes read (a RoundTripper leaves req alone).
			out := req.Clone(req.Context())
			out.Body = io.NopCloser(bytes.NewReader(body))
			req = out
		}
		if err := CheckRequest(req, body); err != nil {
			c.t.Errorf("%v", err)
		}
	}
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
	if verr := CheckResponse(req, res.StatusCode, res.Header, body); verr != nil {
		c.t.Errorf("%v", verr)
	}
	coverage.hit(req, res.StatusCode)
	return res, nil
}

// Transport wraps base (nil: http.DefaultTransport) with the response check.
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, base: base}
}

// Client is a copy of c whose responses are checked against the document.
func Client(t testing.TB, c *http.Client) *http.Client {
	cc := *c
	cc.Transport = Transport(t, cc.Transport)
	return &cc
}

// CheckRequests is a copy of c whose requests are checked too (for a
// well-behaved client, such as package client; tests that send invalid
// requests on purpose use Client).
func CheckRequests(t testing.TB, c *http.Client) *http.Client {
	cc := *c
	base := cc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc.Transport = &transport{t: t, base: base, requests: true}
	return &cc
}

// coverage counts the (operation, status) pairs checked in this process.
var coverage = &seen{m: map[string]int{}}

type seen struct {
	mu sync.Mutex
	m  map[string]int
}

func (s *seen) hit(req *http.Request, status int) {
	id := "catch-all"
	if doc, err := Spec(); err == nil {
		if route, _, ok := FindRoute(doc, req); ok {
			id = route.Operation.OperationID
		}
	}
	s.mu.Lock()
	s.m[id+" "+strconv.Itoa(status)]++
	s.mu.Unlock()
}

// Coverage lists the "operationId status" pairs checked so far in this
// process, sorted, with their counts.
func Coverage() []string {
	coverage.mu.Lock()
	defer coverage.mu.Unlock()
	out := make([]string, 0, len(coverage.m))
	for k, n := range coverage.m {
		out = append(out, fmt.Sprintf("%-40s %d", k, n))
	}
	sort.Strings(out)
	return out
}
