package kafkalog

import (
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientMetrics are Kafka client metrics recorded through franz-go hooks:
// records and bytes produced, bytes written to and read from brokers (the
// log's fetches are raw Fetch requests, so they count here, not as consumed
// batches), broker connects and errors. Add
// Opt to a Config's Opts so every client of the log, the relay and the
// admin records into them; register it on a registry (it is a
// prometheus.Collector). Safe for concurrent use (counters only).
type ClientMetrics struct {
	produced, producedBytes                    *prometheus.CounterVec
	written, read                              prometheus.Counter
	connects, connectErrs, writeErrs, readErrs prometheus.Counter
}

var (
	_ prometheus.Collector        = (*ClientMetrics)(nil)
	_ kgo.HookBrokerConnect       = (*ClientMetrics)(nil)
	_ kgo.HookBrokerWrite         = (*ClientMetrics)(nil)
	_ kgo.HookBrokerRead          = (*ClientMetrics)(nil)
	_ kgo.HookProduceBatchWritten = (*ClientMetrics)(nil)
)

// NewClientMetrics returns unregistered Kafka client metrics.
func NewClientMetrics() *ClientMetrics {
	cv := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"topic"})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &ClientMetrics{
		produced:      cv("likes_kafka_produced_records_total", "Records produced to Kafka (acked batches), by topic."),
		producedBytes: cv("likes_kafka_produced_bytes_total", "Uncompressed bytes of the records produced to Kafka, by topic."),
		written:       c("likes_kafka_broker_written_bytes_total", "Bytes of requests written to Kafka brokers."),
		read:          c("likes_kafka_broker_read_bytes_total", "Bytes of responses read from Kafka brokers (fetches included)."),
		connects:      c("likes_kafka_broker_connects_total", "Connections opened to Kafka brokers."),
		connectErrs:   c("likes_kafka_broker_connect_errors_total", "Failed connection attempts to Kafka brokers."),
		writeErrs:     c("likes_kafka_broker_write_errors_total", "Failed writes of requests to Kafka brokers."),
		readErrs:      c("likes_kafka_broker_read_errors_total", "Failed reads of responses from Kafka brokers."),
	}
}

// Opt is the client option that installs the hooks.
func (m *ClientMetrics) Opt() kgo.Opt { return kgo.WithHooks(m) }

func (m *ClientMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.produced, m.producedBytes, m.written, m.read, m.connects, m.connectErrs, m.writeErrs, m.readErrs}
}

// Describe implements prometheus.Collector.
func (m *ClientMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *ClientMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (m *ClientMetrics) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		m.connectErrs.Inc()
		return
	}
	m.connects.Inc()
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (m *ClientMetrics) OnBrokerWrite(_ kgo.BrokerMetadata, _ int16, n int, _, _ time.Duration, err error) {
	m.written.Add(float64(n))
	if err != nil {
		m.writeErrs.Inc()
	}
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (m *ClientMetrics) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, n int, _, _ time.Duration, err error) {
	m.read.Add(float64(n))
	if err != nil {
		m.readErrs.Inc()
	}
}

// OnProduceBatchWritten implements kgo.HookProduceBatchWritten.
func (m *ClientMetrics) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, pm kgo.ProduceBatchMetrics) {
	m.produced.WithLabelValues(topic).Add(float64(pm.NumRecords))
	m.producedBytes.WithLabelValues(topic).Add(float64(pm.UncompressedBytes))
}
