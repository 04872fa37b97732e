// Package kafkalog is the committed log on Kafka (DESIGN sections 4 and 7): a
// Relay that publishes a region's committed outbox to a topic, and a Log that
// serves that topic to the aggregators as a pipeline.Log.
//
//	edge write ─atomic─► outbox (any pipeline.Log: the Pebble log or the Cassandra outbox; region.Engines wires them)
//	                      │ Relay: partition p → topic partition p, in order,
//	                      │        idempotent producer, acks=all, key item#bucket
//	                      ▼
//	              topic (P partitions == P log partitions) ──► Log.Read ──► pipeline.Aggregator
//	                                                                       (cells, dedupe, position
//	                                                                        in the CellStore, one commit)
//
// # Records
//
// One record per source event, value = the event (kind, state, bucket, delta,
// version, event time, item, user, idempotency reference; format "v"=1 in a
// header), key = item#bucket (what edge.PartitionOf hashes), partition = the
// event's source partition. Headers: "src-pos" = the event's source position;
// on the last record of a batch that reached the source head, "wm" = the
// source's Head.CompleteThrough read together with that batch. An idle
// partition gets a heartbeat record (empty value, "src-pos" = the source
// position published through, "wm") at most every HeartbeatInterval while its
// source watermark advances. The Kafka timestamp is the publish time (wall
// clock), so retention works on wall time; event time travels in the value.
//
// # When the relay looks
//
// One loop per partition reads the source and produces what it found, then
// waits for PollInterval or a Kick (a writer's hint that it appended there),
// whichever comes first. With Linger set, a kick that comes less than Linger
// after the last look waits for the rest of it (never past PollInterval
// after it, where the poll would have looked), so a busy partition costs
// the source one read (on Cassandra: its sequence row and its rows) and
// Kafka one produce per Linger instead of one per write; staleness grows by
// at most Linger. Neither setting bears on what is published, only on when.
//
// # Relay position: in Kafka (option a)
//
// The relay keeps no state of its own. On start (and after any produce error)
// it scans each topic partition backwards from its end for the last record
// with a "src-pos" header, and resumes the source after that position. The
// position can therefore never disagree with what Kafka holds: a relay that
// crashed after Kafka acked a batch does not publish it again, and one that
// crashed before the ack publishes it again from the source. It refuses to run
// when the topic claims a source position beyond the source's head (the topic
// belongs to another source) or when retention emptied a partition so that its
// position is lost (it will not silently republish the whole source). The
// other choice (b), a position stored next to the source, would need a second
// write after every ack; a crash between the two re-publishes, and a position
// ahead of Kafka (written, then the produce lost) would be a gap, which is the
// one thing this design must never do.
//
// Log.Relayed reads that position for every partition: the bound below
// which the source store may truncate its log (store/retain's Round.Relayed;
// the aggregators' own positions are offsets of this topic, not of the
// source). Truncating there never loses an event: each has an acknowledged
// copy in the topic, and a relay that starts later resumes after it (a
// zombie relay still behind reads below the source's floor, fails, and
// resumes from Kafka).
//
// Trust: the topic is inside the region's trust boundary, like its store. Its
// records are validated (an undecodable one is parked in the DLQ, never
// guessed at) but not signed: a well-formed event record is counted, and the
// src-pos headers are the relay's memory and retention's bound (a record
// claiming a position at or below the source's head makes the relay skip to
// it and retention cut below it). So only the region may produce to its
// topics: deploy Kafka with client authentication (--kafka-tls-cert) and ACLs
// that grant Write on the log topic and its DLQ to the region's principal
// alone.
//
// A source with a floor (LogFloor: both stores) is resumed after
// max(src-pos, floor). A store's floor never passes an event the relay has
// not published: retention cuts only below Log.Relayed, and a rebuild raises
// the floor of an empty log before any event is appended. So nothing
// unpublished lies between the src-pos and the floor, and resuming at the
// src-pos would only fail with ErrTruncated again and again (a rebuilt
// source behind an old topic).
//
// Only one relay per region should run (the region's lease holder); a second
// one, or a produce the broker applies after the relay gave up on it, only
// adds duplicate records, which the next section makes harmless.
//
// # Consumer: positions are Kafka offsets plus a base
//
// Log.Read(p, after, max) is a sessionless raw Fetch of partition p at offset
// after − base from the partition leader (read_committed), so reads are
// random access and stateless like the Pebble log's. An event's Pos is its
// Kafka offset + 1 + base (Config.PositionBase); the aggregator's position
// and every cell's hwm are therefore Kafka offsets shifted by the base. The
// base is fixed for a data set's life: 0 for an original data set (Pos =
// offset + 1), and for a rebuilt one a value the region chooses above every
// position of earlier data sets, so new positions (and HWMs) stay above old
// ones whether the topic is the old one or a fresh one whose offsets restart
// at 0. A position below the base reads from offset 0; Log.EndPositions
// (base + each partition's end) is where an aggregator starts to skip every
// record the topic holds now. Events keep their original item, user, version
// and event time. Head.Pos is base + the partition's last stable offset;
// Head.CompleteThrough is the highest "wm" seen below it: that record's claim
// is that every event with EventTime <= wm was published before it. Read
// skips heartbeats (they are counted in Stats) and remembers, per partition,
// that the stretch after the last event holds none, so an idle partition's
// heartbeats are crossed once, not on every poll. An empty answer always
// means "no event up to Head.Pos". A position before the log start
// (retention deleted unapplied records) or beyond the end (positions of
// another log, or a recreated topic) is an error, never an empty read.
// Consequently a region's cell positions belong to this topic and base:
// switching a region between the Pebble log and Kafka needs fresh cells, not
// a reinterpretation of old positions.
//
// # Exactly once
//
//  1. Outbox → Kafka is at-least-once and in source order per partition: the
//     relay resumes from the src-pos Kafka holds, and the idempotent producer
//     (acks=all, ordered retries) never duplicates or reorders within a session.
//  2. Kafka → cells: a window commits its cells fenced on hwm (a Kafka offset)
//     together with the dedupe state and the position, atomically in the
//     CellStore; replaying offsets already applied (a crash, a rebalance, a new
//     owner starting from an older position) fails the fence or adds nothing.
//  3. A duplicate record (step 1's retry after a crash, a second relay) lands at
//     a new offset, past the fence, and is dropped by the (edge, version)
//     dedupe: an edge's versions strictly increase in source order, every
//     relay publishes in source order, so the first copy of each version comes
//     before the first copy of any later version, and every later copy finds
//     Applied at or past its version (a reconcile event's version is its unique
//     source position, carried in the value, so its copies dedupe the same way).
//  4. Watermarks stay honest with duplicates: a "wm" is published only after
//     every event it covers, so first copies precede it; later copies add nothing.
//  5. Hence every source event changes its cell exactly once. The dedupe state
//     must outlive the window in which duplicates can appear (Kafka retention +
//     relay lag); the Pebble CellStore keeps it per edge for good.
//
// # Consumer groups and rebalances
//
// The aggregator's position lives in its CellStore, committed atomically with
// the cells and the dedupe state, so kafkalog commits no Kafka offsets: a
// committed offset would be a second, non-atomic copy of the position. Where
// aggregator dedupe state lives across Kafka rebalances (DESIGN section 7):
// next to the cells, in the same commit as the hwm fence; nothing lives in the
// consumer process. A rebalance (by a consumer group's assignment or by the
// region's lease) only changes which process runs the aggregator of a
// partition; the new owner reads position, cells and dedupe state from the
// CellStore, and anything it replays that the old owner already committed is
// stopped by the fence, while a zombie old owner's late commit fails the fence
// (its expected hwm moved). A Cassandra CellStore must keep that property:
// cells, dedupe and position in one LWT-fenced write, or each idempotent
// against the fence.
//
// # Poison records
//
// A record the Log cannot decode (no format header, a bad value, a foreign
// producer's record) is fetched and decoded again up to PoisonRetries times in
// all, then copied with its headers plus dlq-topic, dlq-partition, dlq-offset
// and dlq-error to DLQTopic (acked) and skipped; Stats().Poisoned counts them
// and OnPoison reports each. If the DLQ produce fails, Read fails: a record is
// never dropped unrecorded. A record whose format version is newer than this
// build knows is not poison: Read returns ErrUnknownFormat and the partition
// stalls until the reader is upgraded, because skipping it would lose counts.
// Another process that reads the same record parks it again (the DLQ headers
// identify copies).
//
// # Topics
//
// NewRelay, NewLog and EnsureTopics create the topic (Config.Partitions
// partitions) and the DLQ (1 partition) with kadm when missing, and wait until
// every partition is served; an existing topic with another partition count is
// an error, since the partition number is the log partition.
//
// Concurrency: Relay runs one goroutine per partition; Flush may run
// concurrently with them (a per-partition mutex serializes publishing). Close
// stops every goroutine and is idempotent. Log is safe for concurrent use.
package kafkalog
