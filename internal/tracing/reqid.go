package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// RequestIDHeader is the HTTP header (and, lower-cased, the gRPC metadata
// key) of request ids.
const RequestIDHeader = "X-Request-Id"

// requestIDKey is the gRPC metadata key (metadata keys are lower case).
const requestIDKey = "x-request-id"

// MaxRequestIDLen bounds an accepted request id.
const MaxRequestIDLen = 128

// SaneRequestID reports whether id may be used as given: 1 to
// MaxRequestIDLen visible ASCII characters (no spaces, controls or
// non-ASCII bytes, so a log line cannot be forged or broken by it).
func SaneRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// NewRequestID returns a fresh random request id (32 hex digits).
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

type ctxKey struct{}

// WithRequestID returns ctx carrying request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestID is ctx's request id, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}
