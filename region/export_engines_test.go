package region

import "testing"

// EnginesForTest is a region's configuration on the real servers (a fresh
// keyspace, topic and Redis prefix, dropped when t ends), for the external
// tests; it skips t when a server is missing.
func EnginesForTest(t testing.TB, name string) Engines { return engineConfig(t, realEngines(t), name) }

// OwnedPartitionsForTest is this node's share of the log partitions (nil:
// every partition, a region of one process).
func (r *Region) OwnedPartitionsForTest() []uint32 { return r.ownedParts() }

// ShippingForTest reports whether this node runs the region's shipper now.
func (r *Region) ShippingForTest() bool {
	return r.cluster != nil && r.cluster.shipperRef.Load() != nil
}

// KillForTest closes the region as if its process were killed: its node
// registration, elections and lease are left to expire (the HTTP and gRPC
// servers stop; what a dead process leaves in etcd stays for one TTL).
func (r *Region) KillForTest() error {
	if r.cluster != nil {
		r.cluster.crash = true
	}
	return r.Close()
}
