package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/stream/kafkalog"
)

const dlqLong = `The dead-letter topic <topic>.dlq holds records the Kafka log's reader could not
decode: it parks each (with headers dlq-topic, dlq-partition, dlq-offset, dlq-error)
and skips it, so a poisoned record never stalls counting. The topic is --topic, or
likes.<region>.log with --region (likesd's default).`

const dlqReplayLong = `Re-publishes DLQ records to the partition of the log topic they came from, after
decoding each with the reader's own decoder: a record that still does not decode is
refused and reported (exit 1), and nothing is published for it. Select records by
their origin offset (--offset N[,N...], with --partition when offsets repeat across
partitions) or --all; --dry-run only checks them. Copies of one record (parked by
several readers) are replayed once.

Why a replay is safe, and idempotent: a replayed record carries the event's edge,
epoch and op unchanged, and the aggregators apply an edge's event only if its
(epoch, op) version is newer than the last one they applied for that edge (their
(edge, epoch, op) dedupe, committed with the cells). So replaying twice, or replaying
an event that was applied after all, changes no count. The flip side: if a later
version of the same edge was applied since, the replayed one is dropped as old; run
likectl reconcile (--heal) to recount such items. The replay strips the relay's
src-pos and wm headers (they are the relay's resume position and watermark) and
adds dlq-replayed-from.

JSON: {"topic", "replayed": [{"dlqOffset", "partition", "offset", "newOffset"}],
"refused": [{"dlqOffset", "partition", "offset", "error"}], "duplicates", "notFound":
[offsets], "dryRun", "truncated"}. Exit 1 when a record is refused, a selected offset
is not in the DLQ, or the scan stopped at --limit (truncated).`

const dlqListLong = `Lists DLQ records oldest first, from DLQ offset --from, at most --limit of them; if
more remain the table says so, the JSON has "truncated": true, and the exit status is 1.
"decodes" says whether the record decodes now (a replay would publish it).
JSON: {"topic", "dlqTopic", "start", "end", "next", "records": [{"dlqOffset", "topic",
"partition", "offset", "error", "size", "time", "decodes", "decodeError"}], "truncated"}`

// kafkaFlags name the brokers and the log topic.
type kafkaFlags struct {
	brokers, topic, region string
	timeout                time.Duration
	tlsCA, tlsCert, tlsKey string
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("LIKES_KAFKA_BROKERS")
	if def == "" {
		def = "127.0.0.1:9092"
	}
	fs.StringVar(&k.brokers, "kafka", def, "Kafka seed brokers, comma-separated host:port (default $LIKES_KAFKA_BROKERS)")
	fs.StringVar(&k.topic, "topic", "", "the region's log topic (its DLQ is TOPIC.dlq)")
	fs.StringVar(&k.region, "region", "", "the region whose default topic likes.REGION.log to use (instead of --topic)")
	fs.DurationVar(&k.timeout, "timeout", 30*time.Second, "overall deadline")
	fs.StringVar(&k.tlsCA, "kafka-tls-ca", "", "connect to the brokers over TLS, verifying their certificates with this CA (PEM)")
	fs.StringVar(&k.tlsCert, "kafka-tls-cert", "", "client certificate for the brokers (PEM; with --kafka-tls-key)")
	fs.StringVar(&k.tlsKey, "kafka-tls-key", "", "the client certificate's key (PEM)")
}

// tlsConfig is the brokers' TLS configuration, nil without --kafka-tls-*.
func (k *kafkaFlags) tlsConfig() (*tls.Config, error) {
	if k.tlsCA == "" && k.tlsCert == "" && k.tlsKey == "" {
		return nil, nil
	}
	if k.tlsCA == "" {
		return nil, usagef("dlq: --kafka-tls-ca is required with --kafka-tls-cert/--kafka-tls-key")
	}
	if (k.tlsCert == "") != (k.tlsKey == "") {
		return nil, usagef("dlq: --kafka-tls-cert and --kafka-tls-key go together")
	}
	pem, err := os.ReadFile(k.tlsCA)
	if err != nil {
		return nil, usagef("dlq: --kafka-tls-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usagef("dlq: --kafka-tls-ca %s holds no PEM certificate", k.tlsCA)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if k.tlsCert != "" {
		kp, err := tls.LoadX509KeyPair(k.tlsCert, k.tlsKey)
		if err != nil {
			return nil, usagef("dlq: --kafka-tls-cert/--kafka-tls-key: %v", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

func (k *kafkaFlags) config() (kafkalog.Config, error) {
	topic := k.topic
	switch {
	case topic != "" && k.region != "":
		return kafkalog.Config{}, usagef("dlq: give --topic or --region, not both")
	case topic == "" && k.region == "":
		return kafkalog.Config{}, usagef("dlq: need --topic TOPIC or --region NAME")
	case topic == "":
		topic = "likes." + k.region + ".log"
	}
	var brokers []string
	for _, b := range strings.Split(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return kafkalog.Config{}, usagef("dlq: --kafka names no broker")
	}
	if k.timeout <= 0 {
		return kafkalog.Config{}, usagef("dlq: --timeout must be positive")
	}
	tc, err := k.tlsConfig()
	if err != nil {
		return kafkalog.Config{}, err
	}
	cfg := kafkalog.Config{Brokers: brokers, Topic: topic, ClientID: "likectl", ProduceTimeout: k.timeout}
	if tc != nil {
		cfg.Opts = append(cfg.Opts, kgo.DialTLSConfig(tc))
	}
	if err := cfg.Validate(); err != nil {
		return kafkalog.Config{}, usagef("dlq: %v", err)
	}
	return cfg, nil
}

func (k *kafkaFlags) open(ctx context.Context) (*kafkalog.DLQ, kafkalog.Config, error) {
	cfg, err := k.config()
	if err != nil {
		return nil, cfg, err
	}
	d, err := kafkalog.OpenDLQ(ctx, cfg)
	if err != nil {
		if errors.Is(err, kafkalog.ErrNoDLQ) {
			return nil, cfg, err
		}
		return nil, cfg, fmt.Errorf("cannot reach Kafka at %s: %w", k.brokers, err)
	}
	return d, cfg, nil
}

func dlqCommand() *command {
	return &command{
		name:    "dlq",
		summary: "list | replay: the Kafka log's dead-letter topic",
		long:    dlqLong,
		subs: []*command{{
			name:    "list",
			summary: "DLQ records: origin partition and offset, error, size, time, whether they decode now",
			usage:   "dlq list (--topic T | --region R) [--kafka h:p,...] [--from N] [--limit 100] [-o table|json]",
			long:    dlqListLong,
			setup: func(fs *flag.FlagSet, e *env) runFunc {
				var kf kafkaFlags
				kf.register(fs)
				from := fs.Int64("from", 0, "first DLQ offset to list")
				limit := fs.Int("limit", 100, "at most this many records (1..100000)")
				var out outputFlag
				out.register(fs)
				return func(ctx context.Context, args []string) error {
					if err := out.check(); err != nil {
						return err
					}
					if err := noArgs("dlq list", args); err != nil {
						return err
					}
					if *limit < 1 || *limit > 100000 || *from < 0 {
						return usagef("dlq list: --limit must be in [1, 100000] and --from >= 0")
					}
					ctx, cancel := context.WithTimeout(ctx, kf.timeout)
					defer cancel()
					d, cfg, err := kf.open(ctx)
					if err != nil {
						return err
					}
					defer d.Close()
					return dlqList(ctx, d, cfg, *from, *limit, out, e.stdout)
				}
			},
		}, {
			name:    "replay",
			summary: "re-publish DLQ records that decode now to the log topic (idempotent: the aggregators dedupe)",
			usage:   "dlq replay (--topic T | --region R) (--offset N[,N...] [--partition P] | --all) [--dry-run] [-o table|json]",
			long:    dlqReplayLong,
			setup: func(fs *flag.FlagSet, e *env) runFunc {
				var kf kafkaFlags
				kf.register(fs)
				offsets := fs.String("offset", "", "origin offsets (in the log topic) of the records to replay, comma-separated")
				partition := fs.Int("partition", -1, "only records from this log partition")
				all := fs.Bool("all", false, "replay every record (that --partition selects)")
				dry := fs.Bool("dry-run", false, "check the records, publish nothing")
				limit := fs.Int("limit", 100000, "scan at most this many DLQ records")
				quiet := fs.Bool("quiet", false, "no progress lines on stderr")
				var out outputFlag
				out.register(fs)
				return func(ctx context.Context, args []string) error {
					if err := out.check(); err != nil {
						return err
					}
					if err := noArgs("dlq replay", args); err != nil {
						return err
					}
					sel, err := parseOffsets(*offsets)
					if err != nil {
						return err
					}
					if (len(sel) == 0) == !*all {
						return usagef("dlq replay: give --offset N[,N...] or --all (one of them)")
					}
					if *limit < 1 || *limit > 100000 {
						return usagef("dlq replay: --limit must be in [1, 100000]")
					}
					ctx, cancel := context.WithTimeout(ctx, kf.timeout)
					defer cancel()
					d, cfg, err := kf.open(ctx)
					if err != nil {
						return err
					}
					defer d.Close()
					return dlqReplay(ctx, d, cfg, replaySel{offsets: sel, partition: *partition, all: *all, dry: *dry, limit: *limit},
						out, newProgress(e, *quiet, "dlq replay"), e.stdout)
				}
			},
		}},
	}
}

func parseOffsets(s string) ([]int64, error) {
	var out []int64
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 0 {
			return nil, usagef("dlq replay: --offset %q: want non-negative offsets, comma-separated", f)
		}
		out = append(out, n)
	}
	return out, nil
}

type dlqRecordJSON struct {
	DLQOffset   int64  `json:"dlqOffset"`
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	Error       string `json:"error"`
	Size        int    `json:"size"`
	Time        string `json:"time"`
	Decodes     bool   `json:"decodes"`
	DecodeError string `json:"decodeError,omitempty"`
}

type dlqListJSON struct {
	Topic     string          `json:"topic"`
	DLQTopic  string          `json:"dlqTopic"`
	Start     int64           `json:"start"`
	End       int64           `json:"end"`
	Next      int64           `json:"next"`
	Records   []dlqRecordJSON `json:"records"`
	Truncated bool            `json:"truncated"`
}

func dlqList(ctx context.Context, d *kafkalog.DLQ, cfg kafkalog.Config, from int64, limit int, out outputFlag, stdout io.Writer) error {
	pg, err := d.List(ctx, from, limit)
	if err != nil {
		return err
	}
	res := dlqListJSON{Topic: cfg.Topic, DLQTopic: cfg.DLQTopic, Start: pg.Start, End: pg.End, Next: pg.Next, Records: []dlqRecordJSON{}, Truncated: pg.Truncated}
	for _, r := range pg.Records {
		rj := dlqRecordJSON{DLQOffset: r.Offset, Topic: r.Topic, Partition: r.Partition, Offset: r.OriginOffset, Error: r.Error,
			Size: r.Size(), Time: r.Time.UTC().Format(time.RFC3339Nano), Decodes: true}
		if _, err := r.Decode(); err != nil {
			rj.Decodes, rj.DecodeError = false, err.Error()
		}
		res.Records = append(res.Records, rj)
	}
	if out.json() {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DLQ OFFSET\tORIGIN\tTIME\tSIZE\tDECODES NOW\tERROR")
		for _, r := range res.Records {
			origin := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%v\t%s\n", r.DLQOffset, origin, r.Time, r.Size, r.Decodes, oneLine(r.Error))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d records listed of %s offsets [%d, %d)\n", len(res.Records), cfg.DLQTopic, pg.Start, pg.End)
		if res.Truncated {
			fmt.Fprintf(stdout, "TRUNCATED: more records after offset %d (raise --limit or pass --from %d)\n", pg.Next-1, pg.Next)
		}
	}
	if res.Truncated {
		return findingf("dlq list: truncated at --limit %d; records remain from DLQ offset %d", limit, pg.Next)
	}
	return nil
}

// oneLine makes a free-form string from the outside (a DLQ header, a
// region's answer) safe for one table cell: no control characters (a hostile
// value could carry terminal escapes), at most 120 runes.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 120 {
		s = string(r[:117]) + "..."
	}
	return s
}

type replaySel struct {
	offsets   []int64
	partition int
	all, dry  bool
	limit     int
}

type replayedJSON struct {
	DLQOffset int64 `json:"dlqOffset"`
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	NewOffset int64 `json:"newOffset,omitempty"`
}

type refusedJSON struct {
	DLQOffset int64  `json:"dlqOffset"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Error     string `json:"error"`
}

type replayJSON struct {
	Topic      string         `json:"topic"`
	Replayed   []replayedJSON `json:"replayed"`
	Refused    []refusedJSON  `json:"refused"`
	Duplicates int            `json:"duplicates"`
	NotFound   []int64        `json:"notFound,omitempty"`
	DryRun     bool           `json:"dryRun"`
	Truncated  bool           `json:"truncated"`
}

func dlqReplay(ctx context.Context, d *kafkalog.DLQ, cfg kafkalog.Config, sel replaySel, out outputFlag, pr *progress, stdout io.Writer) error {
	pg, err := d.List(ctx, 0, sel.limit)
	if err != nil {
		return err
	}
	want := map[int64]bool{}
	for _, o := range sel.offsets {
		want[o] = true
	}
	// Pick the records, one per origin.
	type origin struct {
		p   int32
		off int64
	}
	seen := map[origin]bool{}
	partsOf := map[int64]map[int32]bool{}
	var picked []kafkalog.DLQRecord
	dups := 0
	for _, r := range pg.Records {
		if sel.partition >= 0 && int(r.Partition) != sel.partition {
			continue
		}
		if !sel.all && !want[r.OriginOffset] {
			continue
		}
		if r.HeaderErr == "" && r.Topic != cfg.Topic {
			continue // another topic's record (a shared DLQ)
		}
		o := origin{r.Partition, r.OriginOffset}
		if seen[o] && r.HeaderErr == "" {
			dups++
			continue
		}
		seen[o] = true
		if partsOf[r.OriginOffset] == nil {
			partsOf[r.OriginOffset] = map[int32]bool{}
		}
		partsOf[r.OriginOffset][r.Partition] = true
		picked = append(picked, r)
	}
	if !sel.all {
		for _, o := range sel.offsets {
			if len(partsOf[o]) > 1 {
				var ps []string
				for p := range partsOf[o] {
					ps = append(ps, strconv.Itoa(int(p)))
				}
				sort.Strings(ps)
				return usagef("dlq replay: offset %d is in the DLQ for partitions %s: add --partition", o, strings.Join(ps, ", "))
			}
		}
	}
	res := replayJSON{Topic: cfg.Topic, Replayed: []replayedJSON{}, Refused: []refusedJSON{}, Duplicates: dups, DryRun: sel.dry, Truncated: pg.Truncated}
	for _, o := range sel.offsets {
		if len(partsOf[o]) == 0 {
			res.NotFound = append(res.NotFound, o)
		}
	}
	for i, r := range picked {
		if _, err := r.Decode(); err != nil {
			res.Refused = append(res.Refused, refusedJSON{DLQOffset: r.Offset, Partition: r.Partition, Offset: r.OriginOffset, Error: err.Error()})
			continue
		}
		rj := replayedJSON{DLQOffset: r.Offset, Partition: r.Partition, Offset: r.OriginOffset}
		if !sel.dry {
			off, err := d.Replay(ctx, r)
			if errors.Is(err, kafkalog.ErrDLQRecord) {
				res.Refused = append(res.Refused, refusedJSON{DLQOffset: r.Offset, Partition: r.Partition, Offset: r.OriginOffset, Error: err.Error()})
				continue
			}
			if err != nil {
				return fmt.Errorf("dlq replay: %w (replayed %d records before it)", err, len(res.Replayed))
			}
			rj.NewOffset = off
		}
		res.Replayed = append(res.Replayed, rj)
		pr.step(i+1, len(picked), false, "records checked")
	}
	if len(picked) > 0 {
		pr.step(len(picked), len(picked), true, "records checked")
	}
	if out.json() {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		verb := "replayed"
		if sel.dry {
			verb = "would replay"
		}
		for _, r := range res.Replayed {
			if sel.dry {
				fmt.Fprintf(stdout, "%s %s/%d@%d (DLQ offset %d)\n", verb, cfg.Topic, r.Partition, r.Offset, r.DLQOffset)
			} else {
				fmt.Fprintf(stdout, "%s %s/%d@%d (DLQ offset %d) as offset %d\n", verb, cfg.Topic, r.Partition, r.Offset, r.DLQOffset, r.NewOffset)
			}
		}
		for _, r := range res.Refused {
			fmt.Fprintf(stdout, "REFUSED %s/%d@%d (DLQ offset %d): %s\n", cfg.Topic, r.Partition, r.Offset, r.DLQOffset, oneLine(r.Error))
		}
		fmt.Fprintf(stdout, "%s %d records, refused %d, skipped %d duplicate copies\n", verb, len(res.Replayed), len(res.Refused), res.Duplicates)
		if len(res.NotFound) > 0 {
			fmt.Fprintf(stdout, "NOT FOUND in the DLQ: offsets %v\n", res.NotFound)
		}
		if res.Truncated {
			fmt.Fprintf(stdout, "TRUNCATED: the DLQ holds more than --limit %d records; those after offset %d were not considered\n", sel.limit, pg.Next-1)
		}
	}
	var msgs []string
	if len(res.Refused) > 0 {
		msgs = append(msgs, fmt.Sprintf("%d records refused (they still do not decode)", len(res.Refused)))
	}
	if len(res.NotFound) > 0 {
		msgs = append(msgs, fmt.Sprintf("offsets %v not in the DLQ", res.NotFound))
	}
	if res.Truncated {
		msgs = append(msgs, "truncated at --limit")
	}
	if len(msgs) > 0 {
		return findingf("dlq replay: %s", strings.Join(msgs, "; "))
	}
	return nil
}
