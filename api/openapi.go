package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's contract: the OpenAPI 3.1 document api/openapi.yaml,
// which describes every route of Server (request parameters and bodies with
// their limits, every status with its headers and body, every error code).
// The package's tests validate every response they receive against it, and
// check that the routes it lists are exactly the routes Server registers.
// Server serves it at GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// openAPIETag is the document's validator (it changes only with the binary).
var openAPIETag = `"` + hash36(string(OpenAPI)) + `"`

// openapi serves the document (RFC 9512 media type), cacheable for 5 minutes.
func (s *Server) openapi(w http.ResponseWriter, r *http.Request) *apiError {
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("ETag", openAPIETag)
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, openAPIETag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	h.Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(OpenAPI)
	return nil
}
