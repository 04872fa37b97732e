// Package api is the HTTP surface of one region: authentication (bearer JWTs),
// input validation, per-user and per-IP rate limits, the bounded in-flight write
// set, JSON errors and Prometheus metrics, in front of the edge service, the
// count reader and the eraser.
//
// Every error is `{"error":{"code","message"}}` with a status that says what to
// do: 400 fix the request, 401 sign in, 403 not yours, 409 key reused for a
// different request, 410 user erased, 413 body too large, 429 slow down (with
// Retry-After), 503 try again (with Retry-After; writes are shed, never queued).
//
// Concurrency: Server is safe for concurrent use; it holds no goroutines of its
// own (net/http owns the connection goroutines).
package api
