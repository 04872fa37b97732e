package rpcjson

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Name is the content-subtype the codec announces.
const Name = "json"

// Codec is a grpc encoding.CodecV2. Sent and Received, when set, count encoded
// bytes (for replication statistics).
type Codec struct {
	Sent, Received *atomic.Uint64
}

var _ encoding.CodecV2 = Codec{}

// Marshal implements encoding.CodecV2.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	var (
		b   []byte
		err error
	)
	if m, ok := v.(proto.Message); ok {
		b, err = proto.Marshal(m)
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return nil, fmt.Errorf("rpcjson: marshal %T: %w", v, err)
	}
	if c.Sent != nil {
		c.Sent.Add(uint64(len(b)))
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal implements encoding.CodecV2.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	b := data.Materialize()
	if c.Received != nil {
		c.Received.Add(uint64(len(b)))
	}
	if m, ok := v.(proto.Message); ok {
		return proto.Unmarshal(b, m)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("rpcjson: unmarshal %T: %w", v, err)
	}
	return nil
}

// Name implements encoding.CodecV2.
func (Codec) Name() string { return Name }

// Reconnect caps gRPC's reconnect backoff (default: up to 120 s) so a link
// that heals after a partition is used again within a couple of seconds:
// replication catch-up and forwarding both wait on it.
func Reconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
		MinConnectTimeout: 2 * time.Second,
	})
}
