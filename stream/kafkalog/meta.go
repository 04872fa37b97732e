package kafkalog

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicMeta is a topic's metadata as a broker answers now.
type topicMeta struct {
	id      [16]byte
	leaders []int32 // by partition; -1 when leaderless
	err     error   // the topic's error (kerr.UnknownTopicOrPartition if missing)
}

// freshMeta asks a broker for topic's metadata, bypassing the client's
// metadata cache (kadm's listing is cached and would hide a topic created a
// moment ago).
func freshMeta(ctx context.Context, cl *kgo.Client, topic string) (topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return topicMeta{}, fmt.Errorf("kafkalog: metadata of %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		m := topicMeta{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode)}
		if m.err != nil {
			return m, nil
		}
		m.leaders = make([]int32, len(t.Partitions))
		for i := range m.leaders {
			m.leaders[i] = -1
		}
		for _, p := range t.Partitions {
			if p.Partition < 0 || int(p.Partition) >= len(m.leaders) {
				return topicMeta{}, fmt.Errorf("kafkalog: metadata of %q: partition %d of %d", topic, p.Partition, len(m.leaders))
			}
			if kerr.ErrorForCode(p.ErrorCode) == nil {
				m.leaders[p.Partition] = p.Leader
			}
		}
		return m, nil
	}
	return topicMeta{err: kerr.UnknownTopicOrPartition}, nil
}

// listOffset returns the partition's offset at ts (-2 earliest, -1 latest),
// read_uncommitted (the high watermark for -1).
func listOffset(ctx context.Context, cl *kgo.Client, topic string, p uint32, ts int64) (int64, error) {
	return listOffsetIsolated(ctx, cl, topic, p, ts, 0)
}

// listOffsetIsolated is listOffset at an isolation level (1, read_committed:
// the last stable offset for -1, the end a read_committed fetch reports).
func listOffsetIsolated(ctx context.Context, cl *kgo.Client, topic string, p uint32, ts int64, isolation int8) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = int32(p)
	rp.Timestamp = ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if t.Topic == topic && rp.Partition == int32(p) {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return 0, err
				}
				return rp.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("kafkalog: no offset for %s/%d in the answer", topic, p)
}
