// Package region wires one region of likes together: the store, the
// aggregator group, the edge service and eraser, the count reader, the
// overlay, cache and limiters, and the HTTP API.
//
// Config.Engines chooses the backend of each role (DESIGN section 7); its zero
// value is the embedded default (Pebble under DataDir, the aggregators tailing
// its log in process, in-process cache, overlay and limiters). Store
// "cassandra" keeps edges, the outbox log and cells in a Cassandra keyspace;
// Log "kafka" adds a relay that publishes the store's log to Kafka, which the
// aggregators read (cells, dedupe state and positions stay in the store, so
// the fence works on Kafka offsets); Cache "redis" serves the count cache,
// overlay and limiters from Redis. Every choice implements the same contracts,
// and a multi-region Cluster needs the embedded store and log (a peerless one,
// pins and lease only, works on any). See Engines.
//
// With a Cluster (DESIGN section 5) the region also runs: its etcd lease, the
// pin Authority, the failover Controller, the gRPC replication and forwarding
// services, memberlist, the Shipper, and the planned-move barrier (package
// catchup: the new owner of a planned move asks every live region for its log
// heads, waits for its replication cursors to reach them, then settles the
// pin; the catchup.Fencer answers those questions here, after its writes in
// flight under the old epoch have reached the log). Each of these owns one
// loop, closed by Close.
//
// Several nodes per region (Cluster.Node, nodes.go): every node serves the
// API on the region's shared Cassandra store under one shared lease; the log
// partitions' aggregators and relay are split over the live nodes, and one
// elected node runs the shipper and the barrier. The split and the elections
// save work; the fences, not they, keep counts exact (nodes.go says how).
//
// The region registry (registry.go, epoch/doc.go): a retired region, or one
// the cluster's registry does not name, is refused at Open before its data
// folder is registered or its lease taken (ErrRegistry); a joining region on
// a new folder rebuilds from its peers (the regions holding state) and
// records itself active once every snapshot has arrived; a registry view
// (one loop) drops retired peers from shipping, from retention's held
// cursors and from asOf, while their cells stay in every count and in
// reconciliation.
//
// Rebuilding from peers (identity.go): a bootstrapped data set carries a
// position base (its creation time in ms << 20, in the identity file or the
// keyspace's meta row) that the Kafka log adds to every topic position; with
// --log kafka, raiseRebuildBase raises the empty log to it and the
// aggregators past the topic's old records before anything serves, so the
// peers' cursors and the adopted cells' HWMs (all of the lost data set) are
// below every new position, whether the topic is the old one or a new one.
//
// Every region also runs a background reconciler (one loop, ReconcileRate
// items per second; reconciler.go says how it tells a real drift from writes
// in flight) and exports its metrics on Registry without sentinel values
// (metrics_region.go).
//
// Lifecycle: Open starts every component; Close stops them in dependency order
// (API callers first, then the reconciler, the eraser, the aggregators, the count reader, the
// relay and the Kafka log, replication, and the store last, then its
// Cassandra session and Redis) and is idempotent.
package region
