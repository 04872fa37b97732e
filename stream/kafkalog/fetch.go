package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errOutOfRange is a fetch offset outside [log start, end].
var errOutOfRange = errors.New("kafkalog: offset out of range")

// fetcher reads one partition at an arbitrary offset with a raw, sessionless
// Fetch to the partition's leader. The Log contract is random access by
// position, which a consumer group's streaming fetches are not; a raw fetch is
// stateless, so any reader can serve any partition from any position.
type fetcher struct {
	cl       *kgo.Client
	topic    string
	parts    int
	maxBytes int32
	dec      kgo.Decompressor

	mu      sync.Mutex
	leaders []int32 // nil: reload
	topicID [16]byte
}

func newFetcher(cl *kgo.Client, topic string, parts int, maxBytes int32) *fetcher {
	return &fetcher{cl: cl, topic: topic, parts: parts, maxBytes: maxBytes, dec: kgo.DefaultDecompressor()}
}

func (f *fetcher) invalidate() {
	f.mu.Lock()
	f.leaders = nil
	f.mu.Unlock()
}

// leader returns the leader of partition p and the topic id.
func (f *fetcher) leader(ctx context.Context, p uint32) (int32, [16]byte, error) {
	f.mu.Lock()
	if f.leaders != nil {
		l, id := f.leaders[p], f.topicID
		f.mu.Unlock()
		return l, id, nil
	}
	f.mu.Unlock()
	m, err := freshMeta(ctx, f.cl, f.topic)
	if err != nil {
		return 0, [16]byte{}, err
	}
	if m.err != nil {
		return 0, [16]byte{}, fmt.Errorf("kafkalog: topic %q: %w", f.topic, m.err)
	}
	if len(m.leaders) != f.parts {
		return 0, [16]byte{}, fmt.Errorf("kafkalog: topic %q has %d partitions, the log has %d", f.topic, len(m.leaders), f.parts)
	}
	leaders := m.leaders
	for i, l := range leaders {
		if l < 0 {
			return 0, [16]byte{}, fmt.Errorf("kafkalog: %s/%d has no leader", f.topic, i)
		}
	}
	f.mu.Lock()
	f.leaders, f.topicID = leaders, m.id
	f.mu.Unlock()
	return leaders[p], m.id, nil
}

// fetched is one fetch of one partition.
type fetched struct {
	records  []*kgo.Record // offsets >= the fetch offset, in order
	next     int64         // the offset after everything this fetch covered (control and aborted records included)
	end      int64         // the last stable offset: records below it are readable
	logStart int64
}

// transient reports whether err is worth retrying as is: a retriable Kafka
// error (leadership moving, a topic not served yet), a network error, or
// records timing out while brokers are unreachable.
func transient(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable ||
			errors.Is(err, kerr.NotLeaderForPartition) ||
			errors.Is(err, kerr.UnknownTopicOrPartition) ||
			errors.Is(err, kerr.UnknownTopicID) ||
			errors.Is(err, kerr.FencedLeaderEpoch) ||
			errors.Is(err, kerr.UnknownLeaderEpoch) ||
			errors.Is(err, kerr.LeaderNotAvailable)
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries)
}

// refetchable: a partition error in a fetch answer that a new fetch (after a
// metadata refresh) may not have; everything but a non-retriable Kafka error
// (a bad CRC or a truncated batch included).
func refetchable(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return transient(err)
	}
	return true
}

// fetch reads records of partition p from offset on (read_committed: aborted
// transactional records of foreign producers are never returned).
func (f *fetcher) fetch(ctx context.Context, p uint32, offset int64) (fetched, error) {
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		if err := ctx.Err(); err != nil {
			return fetched{}, err
		}
		leader, id, err := f.leader(ctx, p)
		if err != nil {
			last = err
			f.invalidate()
			continue
		}
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MinBytes = 1
		req.MaxBytes = f.maxBytes
		req.IsolationLevel = 1
		req.SessionID = 0
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = f.topic
		rt.TopicID = id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = int32(p)
		rp.FetchOffset = offset
		rp.PartitionMaxBytes = f.maxBytes
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, f.cl.Broker(int(leader)))
		if err != nil {
			last = fmt.Errorf("kafkalog: fetch %s/%d@%d: %w", f.topic, p, offset, err)
			f.invalidate()
			continue
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			last = fmt.Errorf("kafkalog: fetch %s/%d@%d: %w", f.topic, p, offset, err)
			f.invalidate()
			continue
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].Partition != int32(p) {
			return fetched{}, fmt.Errorf("kafkalog: fetch %s/%d@%d: malformed response", f.topic, p, offset)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         offset,
			IsolationLevel: kgo.ReadCommitted(),
			Topic:          f.topic,
			Partition:      int32(p),
		}, &resp.Topics[0].Partitions[0], f.dec, nil)
		if fp.Err != nil {
			if errors.Is(fp.Err, kerr.OffsetOutOfRange) {
				return fetched{}, f.outOfRange(ctx, p, offset)
			}
			last = fmt.Errorf("kafkalog: fetch %s/%d@%d: %w", f.topic, p, offset, fp.Err)
			if !refetchable(fp.Err) {
				return fetched{}, last
			}
			f.invalidate()
			continue
		}
		end := fp.LastStableOffset
		if end < 0 {
			end = fp.HighWatermark
		}
		out := fetched{next: min(max(next, offset), end), end: end, logStart: fp.LogStartOffset}
		for _, r := range fp.Records {
			if r.Offset >= offset && r.Offset < end {
				out.records = append(out.records, r)
			}
		}
		return out, nil
	}
	return fetched{}, last
}

func (f *fetcher) outOfRange(ctx context.Context, p uint32, offset int64) error {
	start, end, err := f.bounds(ctx, p)
	if err != nil {
		return fmt.Errorf("%w: %s/%d@%d (bounds unknown: %v)", errOutOfRange, f.topic, p, offset, err)
	}
	if offset < start {
		return fmt.Errorf("%w: %s/%d position %d is before the log start %d: records were deleted (retention) before they were applied",
			errOutOfRange, f.topic, p, offset, start)
	}
	return fmt.Errorf("%w: %s/%d position %d is beyond the end %d: positions from another log, or the topic was recreated",
		errOutOfRange, f.topic, p, offset, end)
}

// bounds returns the partition's log start and end (high watermark) offsets.
func (f *fetcher) bounds(ctx context.Context, p uint32) (start, end int64, err error) {
	if start, err = listOffset(ctx, f.cl, f.topic, p, -2); err != nil {
		return 0, 0, fmt.Errorf("kafkalog: start offset of %s/%d: %w", f.topic, p, err)
	}
	if end, err = listOffset(ctx, f.cl, f.topic, p, -1); err != nil {
		return 0, 0, fmt.Errorf("kafkalog: end offset of %s/%d: %w", f.topic, p, err)
	}
	return start, end, nil
}

// stableEnd returns the partition's last stable offset: the end a
// read_committed fetch reports (fetched.end), without fetching records.
func (f *fetcher) stableEnd(ctx context.Context, p uint32) (int64, error) {
	end, err := listOffsetIsolated(ctx, f.cl, f.topic, p, -1, 1)
	if err != nil {
		return 0, fmt.Errorf("kafkalog: end offset of %s/%d: %w", f.topic, p, err)
	}
	return end, nil
}

// lastPublished scans partition p backwards from its end for the last record
// with a src-pos header.
func (f *fetcher) lastPublished(ctx context.Context, p uint32) (pos uint64, wm int64, err error) {
	start, end, err := f.bounds(ctx, p)
	if err != nil {
		return 0, 0, fmt.Errorf("kafkalog: offsets of %s/%d: %w", f.topic, p, err)
	}
	if end <= start {
		if start > 0 {
			return 0, 0, fmt.Errorf("kafkalog: %s/%d is empty but once held %d records (retention deleted them), "+
				"so the relay's source position is lost; refusing to republish the whole source", f.topic, p, start)
		}
		return 0, 0, nil
	}
	window := int64(64)
	hi := end
	for hi > start {
		lo := max(start, hi-window)
		var found bool
		for off := lo; off < hi; {
			fr, err := f.fetch(ctx, p, off)
			if err != nil {
				return 0, 0, err
			}
			if len(fr.records) == 0 {
				break
			}
			for _, rec := range fr.records {
				if rec.Offset >= hi {
					break
				}
				if ps, err := parseRecord(rec); err == nil && ps.hasSrc {
					pos, found = max(pos, ps.srcPos), true
					if ps.hasWM {
						wm = max(wm, ps.wm)
					}
				}
			}
			off = fr.records[len(fr.records)-1].Offset + 1
		}
		if found {
			return pos, wm, nil
		}
		hi = lo
		window *= 4
	}
	if start > 0 {
		return 0, 0, fmt.Errorf("kafkalog: %s/%d holds no relay record since log start %d; the relay's source position is lost",
			f.topic, p, start)
	}
	return 0, 0, nil
}
