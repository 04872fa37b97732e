package replication

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrPinNotSeen is wrapped by a Fencer that has not yet seen a pin it was asked
// about; the server answers codes.Unavailable, which IsRetryable accepts.
var ErrPinNotSeen = errors.New("replication: pin not seen yet")

// IsRetryable is this package's one classifier of push and digest errors: true
// when the same request may succeed later without anyone changing anything
// (the peer is down or restarting, the call timed out, the peer or the message
// size limit pushed back). Anything else (a partition-count or protocol
// mismatch, an invalid batch, a programming error) needs an operator or a
// deploy, so the shipper keeps trying only at its slowest pace.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

// isTooLarge reports a push the receiver (or the message-size limit) refused as
// too big; the shipper answers it by halving its batch limits.
func isTooLarge(err error) bool {
	return status.Code(err) == codes.ResourceExhausted
}

// sinkError turns a Sink failure into a status: the context's own error when
// the call was cancelled or timed out, else Unavailable (a receiver's store
// failure is transient from the sender's point of view, so it retries).
func sinkError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "replication: receiver store: %s: %v", what, err)
}
