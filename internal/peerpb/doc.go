// Package peerpb holds the generated Go code of peer.proto, the
// region-to-region protocol version 2 (`make gen` regenerates it with the
// protoc-gen-go pinned in go.mod's tool directive and Debian's protoc;
// gen_test.go fails when the committed code is stale). The messages are
// plain data: package replication converts them and validates their content.
package peerpb
