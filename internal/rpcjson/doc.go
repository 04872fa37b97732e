// Package rpcjson is the gRPC codec of likes' internal services: plain Go structs
// marshalled as JSON, installed per connection (grpc.ForceCodecV2) and per server
// (grpc.ForceServerCodecV2), never registered globally. Protocol-buffer messages
// (health, reflection) still encode as protobuf, so one server can host both.
package rpcjson
