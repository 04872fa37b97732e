package kafkalog

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/likes-dev/likes/clock"
)

// TestRelayReportsRefusedWrites: while the broker refuses produce requests
// (KAFKA_STORAGE_ERROR, a broker with a full disk), StuckSince says since
// when; when it takes writes again the relay catches up by itself and
// StuckSince clears.
func TestRelayReportsRefusedWrites(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var refuse atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range preq.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.KafkaStorageError.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	b := backend{name: "kfake", brokers: func(*testing.T) []string { return c.ListenAddrs() }}
	clk := clock.NewFake(time.UnixMilli(t0))
	src := openSource(t, 2, clk)
	cfg := testConfig(t, b, 2)
	cfg.ProduceTimeout = time.Second
	r := newRelay(t, cfg, src)
	newWorkload(src, nil, 1).run(t, 20)
	flush(t, r)
	if since, stuck := r.StuckSince(); stuck && time.Since(since) > time.Second {
		t.Fatal("stuck while the broker takes writes")
	}
	refuse.Store(true)
	newWorkload(src, nil, 2).run(t, 20)
	waitFor(t, "the relay to report refused writes", 20*time.Second, func() bool {
		since, stuck := r.StuckSince()
		return stuck && time.Since(since) > time.Second
	})
	refuse.Store(false)
	waitFor(t, "the relay to publish again", 30*time.Second, func() bool {
		since, stuck := r.StuckSince()
		return !stuck || time.Since(since) < 100*time.Millisecond
	})
	flush(t, r)
	checkSameLog(t, src, newLog(t, cfg))
}
