package api

import _ "embed"

// OpenAPI is the API's contract: the OpenAPI 3.1 document api/openapi.yaml,
// which describes every route of Server (request parameters and bodies with
// their limits, every status with its headers and body, every error code).
// The package's tests validate every response they receive against it, and
// check that the routes it lists are exactly the routes Server registers.
//
//go:embed openapi.yaml
var OpenAPI []byte
