package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrClosed is returned by calls on a closed Relay or Log.
var ErrClosed = errors.New("kafkalog: closed")

// MaxPositionBase bounds Config.PositionBase. Positions end up as cell HWMs,
// which must stay below replica.MaxHWM = 2^62; a base of at most 3·2^60 leaves
// 2^60 offsets per partition above it, more than any topic will hold.
const MaxPositionBase = 3 << 60

// Config configures a Relay and a Log. The zero value of every field but
// Brokers' contents is a usable default; Validate fills the defaults in.
type Config struct {
	// Brokers are the seed brokers, host:port (default 127.0.0.1:9092).
	Brokers []string
	// Topic is the committed-log topic of one region (default "likes.log").
	// Its partitions are the source log's partitions, one to one.
	Topic string
	// DLQTopic receives records the Log cannot decode (default Topic+".dlq").
	DLQTopic string
	// Partitions is the number of log partitions; it must equal the source
	// log's Partitions() and the topic's partition count (default 16, the
	// pebblestore default).
	Partitions int
	// RelayPartitions, when not nil, are the only source partitions a Relay
	// publishes (a region of several nodes splits them over its nodes;
	// epoch.Assign). A partition two relays publish for a while (the nodes
	// disagree during a change) gets its records twice; the aggregators'
	// dedupe drops the copies (pipeline/doc.go).
	RelayPartitions []uint32
	// ReplicationFactor for topics this package creates (default 1, for dev;
	// use 3 with min.insync.replicas=2 in production).
	ReplicationFactor int16
	// ClientID names this process's Kafka clients (default "likes-kafkalog").
	ClientID string

	// MaxBatch bounds the events the relay reads and produces per step (default 500).
	MaxBatch int
	// PollInterval is how often the relay looks at an idle source partition
	// (default 20ms).
	PollInterval time.Duration
	// HeartbeatInterval is the minimum time between watermark heartbeats of an
	// idle partition (default 1s).
	HeartbeatInterval time.Duration
	// Linger is the least time between two looks at one source partition
	// when writes wake its relay (Relay.Kick), so that the events of writes
	// arriving close together go out in one source read and one produce
	// instead of one each (default 0: look at once). Each look costs the
	// source a read of its head and its rows (on Cassandra, two requests), so
	// at a steady write rate a linger divides them by the events it gathers,
	// at the price of at most Linger of staleness. At most 1s; a Linger
	// above PollInterval acts as PollInterval (a look is never put off past
	// the poll that would have made it).
	Linger time.Duration
	// RetryBackoff is the first wait after a relay error; it doubles up to 5s
	// (default 100ms).
	RetryBackoff time.Duration
	// ProduceTimeout bounds one produce, relay or DLQ (default 30s).
	ProduceTimeout time.Duration

	// FetchMaxBytes bounds one fetch of one partition (default 1 MiB; a
	// larger first batch is still returned whole).
	FetchMaxBytes int32
	// PoisonRetries is how many times the Log fetches and decodes a record that
	// fails to decode before it parks the record in DLQTopic and skips it
	// (default 3).
	PoisonRetries int

	// PositionBase is added to every position the Log serves: Pos = offset +
	// 1 + PositionBase. It is fixed for a data set's life; 0 (an original data
	// set) keeps positions equal to offset + 1. A rebuilt data set gets a base
	// above every position of earlier ones (the region chooses it), so its
	// aggregator positions and cell HWMs stay above theirs whether the topic
	// is the old one or a fresh one whose offsets restart at 0. At most
	// MaxPositionBase. The Relay ignores it (src-pos headers are source
	// positions).
	PositionBase uint64

	// OnError reports relay errors (the relay retries by itself).
	OnError func(partition uint32, err error)
	// OnPoison reports a record parked in the DLQ.
	OnPoison func(partition uint32, offset int64, err error)

	// Opts are extra franz-go client options (TLS, SASL, logging, tests).
	Opts []kgo.Opt
}

// relays reports whether a Relay of this Config publishes partition p.
func (c *Config) relays(p uint32) bool {
	return c.RelayPartitions == nil || slices.Contains(c.RelayPartitions, p)
}

// Validate fills defaults in and checks every field.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		c.Brokers = []string{"127.0.0.1:9092"}
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || strings.ContainsAny(b, " \t,") {
			return fmt.Errorf("kafkalog: bad broker address %q (one host:port per entry)", b)
		}
	}
	if c.Topic == "" {
		c.Topic = "likes.log"
	}
	if c.DLQTopic == "" {
		c.DLQTopic = c.Topic + ".dlq"
	}
	for _, t := range []string{c.Topic, c.DLQTopic} {
		if err := validTopic(t); err != nil {
			return err
		}
	}
	if c.DLQTopic == c.Topic {
		return fmt.Errorf("kafkalog: DLQTopic must differ from Topic %q", c.Topic)
	}
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.Partitions < 1 || c.Partitions > 1<<16 {
		return fmt.Errorf("kafkalog: Partitions must be in [1, 65536], got %d", c.Partitions)
	}
	for _, p := range c.RelayPartitions {
		if int(p) >= c.Partitions {
			return fmt.Errorf("kafkalog: RelayPartitions names partition %d of %d", p, c.Partitions)
		}
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
	}
	if c.ReplicationFactor < 1 {
		return fmt.Errorf("kafkalog: ReplicationFactor must be positive, got %d", c.ReplicationFactor)
	}
	if c.ClientID == "" {
		c.ClientID = "likes-kafkalog"
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 500
	}
	if c.MaxBatch < 1 || c.MaxBatch > 100_000 {
		return fmt.Errorf("kafkalog: MaxBatch must be in [1, 100000], got %d", c.MaxBatch)
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"PollInterval", &c.PollInterval, 20 * time.Millisecond},
		{"HeartbeatInterval", &c.HeartbeatInterval, time.Second},
		{"RetryBackoff", &c.RetryBackoff, 100 * time.Millisecond},
		{"ProduceTimeout", &c.ProduceTimeout, 30 * time.Second},
	}
	for _, d := range durations {
		if *d.d == 0 {
			*d.d = d.def
		}
		if *d.d < 0 {
			return fmt.Errorf("kafkalog: %s must be positive, got %v", d.name, *d.d)
		}
	}
	if c.Linger < 0 || c.Linger > time.Second {
		return fmt.Errorf("kafkalog: Linger must be in [0, 1s], got %v", c.Linger)
	}
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = 1 << 20
	}
	if c.FetchMaxBytes < 1<<10 {
		return fmt.Errorf("kafkalog: FetchMaxBytes must be at least 1024, got %d", c.FetchMaxBytes)
	}
	if c.PoisonRetries == 0 {
		c.PoisonRetries = 3
	}
	if c.PoisonRetries < 1 || c.PoisonRetries > 100 {
		return fmt.Errorf("kafkalog: PoisonRetries must be in [1, 100], got %d", c.PoisonRetries)
	}
	if c.PositionBase > MaxPositionBase {
		return fmt.Errorf("kafkalog: PositionBase %d is above MaxPositionBase %d (positions must stay below 2^62)", c.PositionBase, uint64(MaxPositionBase))
	}
	if c.OnError == nil {
		c.OnError = func(uint32, error) {}
	}
	if c.OnPoison == nil {
		c.OnPoison = func(uint32, int64, error) {}
	}
	return nil
}

// validTopic applies Kafka's topic name rules.
func validTopic(t string) error {
	if t == "" || t == "." || t == ".." || len(t) > 249 {
		return fmt.Errorf("kafkalog: invalid topic name %q", t)
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("kafkalog: invalid topic name %q (only [a-zA-Z0-9._-])", t)
		}
	}
	return nil
}

func (c *Config) clientOpts(suffix string, extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID + "-" + suffix),
	}
	opts = append(opts, extra...)
	return append(opts, c.Opts...)
}

// EnsureTopics creates the log topic (cfg.Partitions partitions) and the DLQ
// topic (1 partition) if they are missing. It fails if the log topic exists
// with another partition count: the partition number is the log partition,
// so a different count would silently move items between aggregators.
func EnsureTopics(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cl, err := kgo.NewClient(cfg.clientOpts("admin")...)
	if err != nil {
		return fmt.Errorf("kafkalog: client: %w", err)
	}
	defer cl.Close()
	return ensureTopics(ctx, cl, cfg)
}

func ensureTopics(ctx context.Context, cl *kgo.Client, cfg Config) error {
	if err := ensureTopic(ctx, cl, cfg.Topic, int32(cfg.Partitions), cfg.ReplicationFactor, true); err != nil {
		return err
	}
	return ensureTopic(ctx, cl, cfg.DLQTopic, 1, cfg.ReplicationFactor, false)
}

func ensureTopic(ctx context.Context, cl *kgo.Client, topic string, parts int32, rf int16, exact bool) error {
	check := func() (exists bool, err error) {
		m, err := freshMeta(ctx, cl, topic)
		if err != nil {
			return false, err
		}
		if errors.Is(m.err, kerr.UnknownTopicOrPartition) {
			return false, nil
		}
		if m.err != nil {
			return false, fmt.Errorf("kafkalog: metadata of %q: %w", topic, m.err)
		}
		if exact && int32(len(m.leaders)) != parts {
			return true, fmt.Errorf("kafkalog: topic %q exists with %d partitions, the log has %d; "+
				"log partitions map one to one to topic partitions, so use another topic or recreate it",
				topic, len(m.leaders), parts)
		}
		return true, nil
	}
	exists, err := check()
	if err != nil || exists {
		return err
	}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, parts, rf, nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		msg := resp.ErrMessage
		if msg != "" {
			msg = " (" + msg + ")"
		}
		return fmt.Errorf("kafkalog: create topic %q with %d partitions, replication %d: %w%s", topic, parts, rf, err, msg)
	}
	// Someone else may have created it first, with other settings. A new
	// topic's partitions take a moment to be served: wait until every one has
	// a leader that answers for it.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		exists, err := check()
		if err != nil {
			return err
		}
		if exists {
			if err := servable(ctx, cl, topic); err == nil {
				return nil
			} else if !transient(err) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkalog: topic %q created but not ready: %w", topic, ctx.Err())
		case <-tick.C:
		}
	}
}

// servable checks that every partition of topic has a leader that answers a
// ListOffsets for it.
func servable(ctx context.Context, cl *kgo.Client, topic string) error {
	m, err := freshMeta(ctx, cl, topic)
	if err != nil {
		return err
	}
	if m.err != nil {
		return m.err
	}
	for p, l := range m.leaders {
		if l < 0 {
			return kerr.LeaderNotAvailable
		}
		if _, err := listOffset(ctx, cl, topic, uint32(p), -1); err != nil {
			return err
		}
	}
	return nil
}
