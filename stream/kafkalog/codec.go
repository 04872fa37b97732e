package kafkalog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/internal/wire"
)

// Record headers. Every record the relay writes carries HeaderFormat and
// HeaderSrcPos; HeaderWM rides on the last event of a batch that reached the
// source head and on every heartbeat.
const (
	// HeaderFormat is the value encoding's version: "2", the protobuf Event
	// of the region-to-region protocol (internal/peerpb), written by this
	// build; "1", the earlier binary encoding, still read.
	HeaderFormat = "v"
	// HeaderSrcPos is the source log position the relay has published through
	// once this record is in Kafka (decimal).
	HeaderSrcPos = "src-pos"
	// HeaderWM is the source partition's CompleteThrough (Unix ms, decimal) as
	// read together with the events up to HeaderSrcPos: every event with
	// EventTime <= wm is at this record's offset or before it.
	HeaderWM = "wm"

	// DLQ headers added to a parked record.
	HeaderDLQTopic     = "dlq-topic"
	HeaderDLQPartition = "dlq-partition"
	HeaderDLQOffset    = "dlq-offset"
	HeaderDLQError     = "dlq-error"
)

const (
	formatV1 = "1"
	formatV2 = "2"
)

// ErrUnknownFormat is returned by Log.Read for a record written in a format
// version this build does not know (a newer relay). It is not poison: the
// record is fine, this reader is old, so the partition stalls until upgraded
// instead of dropping counts.
var ErrUnknownFormat = errors.New("kafkalog: record format version unknown to this build")

var errPoison = errors.New("kafkalog: undecodable record")

// recordKey is the record key: item#bucket, the unit edge.PartitionOf places.
func recordKey(item string, bucket uint32) []byte {
	return []byte(item + "#" + strconv.FormatUint(uint64(bucket), 10))
}

// encodeEvent is the v1 value of an event record. Partition and Pos are not
// encoded: they are the record's placement in Kafka.
func encodeEvent(ev edge.Event) []byte {
	b := make([]byte, 0, 32+len(ev.Item)+len(ev.User))
	b = append(b, byte(ev.Kind), byte(ev.State))
	b = binary.AppendUvarint(b, uint64(ev.Bucket))
	b = binary.AppendVarint(b, int64(ev.Delta))
	b = wire.AppendVersion(b, ev.Version)
	b = binary.AppendVarint(b, ev.EventTime)
	b = wire.AppendStr(b, ev.Item)
	b = wire.AppendStr(b, ev.User)
	return wire.AppendIdem(b, ev.Idem)
}

// decodeEvent inverts encodeEvent, strictly: anything but an exact, plausible
// encoding is poison.
func decodeEvent(v []byte) (edge.Event, error) {
	d := wire.NewDecoder(v, errPoison)
	var ev edge.Event
	ev.Kind = edge.Kind(d.Byte())
	ev.State = crdt.State(d.Byte())
	bucket := d.Uvarint()
	delta := d.Varint()
	ev.Version = d.Version()
	ev.EventTime = d.Varint()
	ev.Item = d.Str()
	ev.User = d.Str()
	ev.Idem = d.Idem()
	switch {
	case d.Err() != nil:
		return edge.Event{}, d.Err()
	case d.Len() != 0:
		return edge.Event{}, fmt.Errorf("%w: %d trailing bytes", errPoison, d.Len())
	}
	if delta < math.MinInt32 || delta > math.MaxInt32 {
		return edge.Event{}, fmt.Errorf("%w: delta %d", errPoison, delta)
	}
	if bucket > math.MaxUint32 {
		return edge.Event{}, fmt.Errorf("%w: bucket %d", errPoison, bucket)
	}
	ev.Bucket = uint32(bucket)
	ev.Delta = int32(delta)
	if err := plausible(ev); err != nil {
		return edge.Event{}, err
	}
	return ev, nil
}

// encodeEventV2 is the format-2 value of an event record: the protobuf Event
// of internal/peerpb, times absolute, the position the record's placement.
func encodeEventV2(ev edge.Event) []byte {
	b, _ := proto.Marshal(peerpb.FromEvent(ev, ev.Pos, 0)) // plain data: cannot fail
	return b
}

// decodeEventV2 inverts encodeEventV2, as strictly as decodeEvent.
func decodeEventV2(v []byte) (edge.Event, error) {
	var m peerpb.Event
	if err := proto.Unmarshal(v, &m); err != nil {
		return edge.Event{}, fmt.Errorf("%w: %v", errPoison, err)
	}
	if m.GetPosDelta() != 0 {
		return edge.Event{}, fmt.Errorf("%w: a position in the value", errPoison)
	}
	ev, err := m.ToEvent(0, 0, 0)
	if err != nil {
		return edge.Event{}, fmt.Errorf("%w: %v", errPoison, err)
	}
	if err := plausible(ev); err != nil {
		return edge.Event{}, err
	}
	return ev, nil
}

// plausible is what every decoded event must be, whatever its format.
func plausible(ev edge.Event) error {
	switch {
	case ev.Kind < edge.KindFlip || ev.Kind > edge.LastKind:
		return fmt.Errorf("%w: kind %d", errPoison, ev.Kind)
	case ev.State > crdt.Erased:
		return fmt.Errorf("%w: state %d", errPoison, ev.State)
	case ev.Bucket >= edge.Buckets:
		return fmt.Errorf("%w: bucket %d", errPoison, ev.Bucket)
	case ev.Kind.HasItem() && ev.Item == "":
		return fmt.Errorf("%w: empty item", errPoison)
	case !ev.Kind.HasItem() && ev.Item != "":
		return fmt.Errorf("%w: a %s event with an item", errPoison, ev.Kind)
	}
	return nil
}

func header(r *kgo.Record, key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

func intHeader(r *kgo.Record, key string) (int64, bool, error) {
	s, ok := header(r, key)
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: header %s=%q", errPoison, key, s)
	}
	return v, true, nil
}

// parsed is one Kafka record as the log sees it.
type parsed struct {
	event  *edge.Event // nil for a heartbeat
	srcPos uint64
	hasSrc bool
	wm     int64
	hasWM  bool
}

// parseRecord classifies a record: an event (Value set), a heartbeat (empty
// Value, HeaderWM set), poison (errPoison: undecodable, or not ours), or a
// record of a newer format (ErrUnknownFormat).
func parseRecord(r *kgo.Record) (parsed, error) {
	var p parsed
	f, ok := header(r, HeaderFormat)
	if !ok {
		return p, fmt.Errorf("%w: no %q header", errPoison, HeaderFormat)
	}
	if f != formatV1 && f != formatV2 {
		if n, err := strconv.Atoi(f); err == nil && n > 2 {
			return p, fmt.Errorf("%w: %q=%q at offset %d", ErrUnknownFormat, HeaderFormat, f, r.Offset)
		}
		return p, fmt.Errorf("%w: %q=%q", errPoison, HeaderFormat, f)
	}
	wm, hasWM, err := intHeader(r, HeaderWM)
	if err != nil {
		return p, err
	}
	sp, hasSrc, err := intHeader(r, HeaderSrcPos)
	if err != nil {
		return p, err
	}
	if sp < 0 {
		return p, fmt.Errorf("%w: negative %s", errPoison, HeaderSrcPos)
	}
	p.wm, p.hasWM, p.srcPos, p.hasSrc = wm, hasWM, uint64(sp), hasSrc
	if len(r.Value) == 0 {
		if !hasWM {
			return p, fmt.Errorf("%w: empty value without %q", errPoison, HeaderWM)
		}
		return p, nil
	}
	decode := decodeEvent
	if f == formatV2 {
		decode = decodeEventV2
	}
	ev, err := decode(r.Value)
	if err != nil {
		return p, err
	}
	p.event = &ev
	return p, nil
}

// eventRecord is the record the relay writes for ev.
func eventRecord(topic string, ev edge.Event) *kgo.Record {
	return &kgo.Record{
		Topic:     topic,
		Partition: int32(ev.Partition),
		Key:       recordKey(ev.Item, ev.Bucket),
		Value:     encodeEventV2(ev),
		Headers: []kgo.RecordHeader{
			{Key: HeaderFormat, Value: []byte(formatV2)},
			{Key: HeaderSrcPos, Value: strconv.AppendUint(nil, ev.Pos, 10)},
		},
	}
}

func withWM(r *kgo.Record, wm int64) {
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderWM, Value: strconv.AppendInt(nil, wm, 10)})
}

// heartbeatRecord carries the source watermark of an idle partition.
func heartbeatRecord(topic string, partition uint32, srcPos uint64, wm int64) *kgo.Record {
	r := &kgo.Record{
		Topic:     topic,
		Partition: int32(partition),
		Headers: []kgo.RecordHeader{
			{Key: HeaderFormat, Value: []byte(formatV2)},
			{Key: HeaderSrcPos, Value: strconv.AppendUint(nil, srcPos, 10)},
		},
	}
	withWM(r, wm)
	return r
}
