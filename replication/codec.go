package replication

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codecName is the content-subtype our codec announces ("application/grpc+json").
const codecName = "json"

// jsonCodec is a grpc encoding.CodecV2 that marshals plain Go structs as JSON.
// It is never registered globally: clients install it per connection with
// grpc.ForceCodecV2 and servers with grpc.ForceServerCodecV2 (ServerOptions).
// Protocol-buffer messages are still encoded as protobuf, so a *grpc.Server
// forced to this codec can also host generated services (health, reflection).
//
// sent and received count the encoded bytes (for per-peer stats); they may be nil.
type jsonCodec struct {
	sent, received *atomic.Uint64
}

var _ encoding.CodecV2 = jsonCodec{}

func (c jsonCodec) Marshal(v any) (mem.BufferSlice, error) {
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
		return nil, fmt.Errorf("replication codec: marshal %T: %w", v, err)
	}
	if c.sent != nil {
		c.sent.Add(uint64(len(b)))
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c jsonCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b := data.Materialize()
	if c.received != nil {
		c.received.Add(uint64(len(b)))
	}
	if m, ok := v.(proto.Message); ok {
		return proto.Unmarshal(b, m)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("replication codec: unmarshal %T: %w", v, err)
	}
	return nil
}

func (jsonCodec) Name() string { return codecName }
