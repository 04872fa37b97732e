// Package client is a Go client of the likes HTTP API (api/openapi.yaml): a
// *Client talks to one region's base URL and offers Like, Unlike, Count,
// Liked (the button), Likers (paged by cursor), BatchGet, EraseUser,
// ErasureStatus, Retract and Health.
//
// # Retries and idempotency (the contract)
//
//   - A logical call is one call of a method. Its Idempotency-Key (Like and
//     Unlike) is generated ONCE per logical call, or given by the caller with
//     IdempotencyKey, and every attempt of that call sends the SAME key: a
//     retry after a lost answer (the server applied the like, then the
//     connection dropped) replays the first answer instead of liking twice.
//     A caller that retries a call itself (after a crash, from a queue) must
//     pass the key it used the first time.
//   - An attempt is retried when it got 429 or 503, when it timed out
//     (RetryPolicy.AttemptTimeout) or when the connection failed (refused,
//     reset, cut off mid-answer). Any other status is final: 2xx succeeds,
//     and 4xx other than 429 (and 500) returns an *Error at once.
//   - The wait before a retry is exponential backoff with full jitter
//     (uniform in [0, min(MaxDelay, BaseDelay·2^(n-1))]), and never shorter
//     than the answer's Retry-After. The budget is bounded: at most
//     MaxAttempts attempts and MaxWait of waiting in all; a Retry-After that
//     would overrun the budget or the context's deadline ends the call at once
//     with the last error.
//   - Context cancellation ends the call (and any wait) at once.
//   - Below the client, net/http itself re-sends a request that carries an
//     Idempotency-Key once when a reused keep-alive connection turns out
//     closed before any answer; it sends the same key, so this is safe, but
//     such a re-send is not an attempt the client (or WithObserver) sees.
//
// WithoutRetries makes every call a single attempt; WithObserver sees every
// attempt (key, status, code, error, timing), which a test harness that must
// record each attempt uses.
//
// # Sessions
//
// A write's 200 carries a Likes-Session token (read-your-writes at any
// region). The client keeps the newest one it received in its *Session (one
// per client unless WithSession shares one, e.g. per user across regions) and
// sends it on every request; SessionToken overrides it for one call.
//
// # Errors
//
// An HTTP answer other than 2xx and 304 is an *Error (errors.As) with the
// status, the API's error code (CodeRateLimited, CodeUserErased, …), the
// message and the Retry-After. No answer at all is ErrTransport (the net error
// stays in the chain; with ErrAnswerCut too when the body was cut off after
// the status line); a 2xx whose body does not decode is ErrBadAnswer; an
// argument the server would refuse anyway is ErrInvalidArgument, before any
// request.
//
// # Concurrency
//
// A *Client is safe for concurrent use and holds no goroutine; it keeps no
// global state (every setting, the session and the token source are the
// client's own).
package client
