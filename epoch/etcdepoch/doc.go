// Package etcdepoch keeps write authority in etcd: the pin Directory (Init,
// Move, Drain, Settle, Regions, Homes; the region registry: Registry,
// AddRegion, SetRegionState, CheckRegionStart, each write a transaction on
// the revision read, each value validated strictly when read back), a region's KeepAlive (its lease and
// registration, SetDraining), the Authority (edge.Authority over a watch-fed
// pin table) and the Controller (elected failover of dead regions' ranges and
// failback of ranges to their home). The rules they follow are package
// epoch's (Decide, Home, the invariants in its documentation); this package
// is their I/O.
//
// Concurrency: Directory is stateless over a clientv3.Client and safe for
// concurrent use. KeepAlive, Authority and Controller each run one goroutine
// loop started by their constructor; Close is idempotent and returns after the
// loop stopped. None closes the etcd client it was given.
package etcdepoch
