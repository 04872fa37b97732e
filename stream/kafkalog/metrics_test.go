package kafkalog

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClientMetricsHooks: the hooks count produced records, broker bytes and
// errors.
func TestClientMetricsHooks(t *testing.T) {
	m := NewClientMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.OnProduceBatchWritten(kgo.BrokerMetadata{}, "likes.us.log", 0, kgo.ProduceBatchMetrics{NumRecords: 3, UncompressedBytes: 300})
	m.OnBrokerWrite(kgo.BrokerMetadata{}, 0, 100, 0, 0, nil)
	m.OnBrokerRead(kgo.BrokerMetadata{}, 1, 50, 0, 0, errors.New("eof"))
	m.OnBrokerConnect(kgo.BrokerMetadata{}, 0, nil, errors.New("refused"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			got[mf.GetName()] += s.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"likes_kafka_produced_records_total": 3, "likes_kafka_produced_bytes_total": 300,
		"likes_kafka_broker_written_bytes_total": 100, "likes_kafka_broker_read_bytes_total": 50,
		"likes_kafka_broker_read_errors_total": 1, "likes_kafka_broker_connect_errors_total": 1,
		"likes_kafka_broker_connects_total": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
