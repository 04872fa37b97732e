package cassandra

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// These tests need no Cassandra.

func TestCodecRoundTrip(t *testing.T) {
	evs := []edge.Event{
		{Item: "日本", User: "😀", Bucket: edge.BucketOf("😀"), Version: crdt.Version{Epoch: 3, Op: 9}, State: crdt.Liked,
			Delta: 1, EventTime: 1_700_000_000_123, Kind: edge.KindFlip,
			Idem: &edge.IdemRef{Key: "k", Fingerprint: "fp", ExpiresAt: 42, Liked: true, Changed: true}},
		{Item: "i", User: "u", Bucket: 7, State: crdt.Erased, Delta: -1, Kind: edge.KindErasure},
		{Item: "r", Kind: edge.KindReconcile, Delta: -(1 << 30), Version: crdt.Version{Op: 5}},
		{User: "gone", Bucket: edge.BucketOf("gone"), Kind: edge.KindPurge},
	}
	for _, ev := range evs {
		got, err := decodeEvent(3, 11, encodeEvent(ev))
		want := ev
		want.Partition, want.Pos = 3, 11
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("event round trip: %+v, %v; want %+v", got, err, want)
		}
		p := pending{Nonce: 1<<63 + 5, TTLSec: 86400, Minute: 28_333_333, Event: ev}
		gp, err := decodePending(encodePending(p))
		if err != nil || !reflect.DeepEqual(gp, p) {
			t.Fatalf("pending round trip: %+v, %v; want %+v", gp, err, p)
		}
	}
	slots := []slot{{Pos: 5, ESeq: 2, Nonce: 9, Event: evs[0]}, {Pos: 6, Nonce: 1, Event: evs[3]}}
	got, err := decodeInflight(4, encodeInflight(slots))
	if err != nil || len(got) != 2 {
		t.Fatalf("inflight round trip: %+v, %v", got, err)
	}
	for i := range slots {
		want := slots[i]
		want.Event.Partition, want.Event.Pos = 4, want.Pos
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("slot %d = %+v, want %+v", i, got[i], want)
		}
	}
	if ss, err := decodeInflight(0, nil); err != nil || ss != nil {
		t.Fatalf("empty inflight = %v, %v", ss, err)
	}
	bs := crdt.Branches{{Epoch: 1}, {Epoch: 4, Base: crdt.Register{Version: crdt.Version{Epoch: 1, Op: 3}, State: crdt.Liked}}}
	if gb, err := decodeBranches(encodeBranches(bs)); err != nil || !reflect.DeepEqual(gb, bs) {
		t.Fatalf("branches round trip: %+v, %v", gb, err)
	}
	if gb, err := decodeBranches(encodeBranches(nil)); err != nil || gb != nil {
		t.Fatalf("no branches: %+v, %v", gb, err)
	}
}

func TestCodecRejectsCorrupt(t *testing.T) {
	good := encodeEvent(edge.Event{Item: "i", User: "u", Kind: edge.KindFlip, Idem: &edge.IdemRef{Key: "k"}})
	for i := 0; i < len(good); i++ {
		if _, err := decodeEvent(0, 1, good[:i]); err == nil {
			t.Fatalf("truncated event (%d of %d bytes) decoded", i, len(good))
		}
	}
	if _, err := decodeEvent(0, 1, append(append([]byte(nil), good...), 0)); err == nil {
		t.Fatal("event with trailing bytes decoded")
	}
	bad := append([]byte{9}, good[1:]...)
	if _, err := decodeEvent(0, 1, bad); !errors.Is(err, errCorrupt) {
		t.Fatalf("unknown format: %v", err)
	}
	p := encodePending(pending{Nonce: 1, Event: edge.Event{Item: "i"}})
	if _, err := decodePending(p[:len(p)-1]); err == nil {
		t.Fatal("truncated pending decoded")
	}
	in := encodeInflight([]slot{{Pos: 1, Event: edge.Event{Item: "i"}}})
	if _, err := decodeInflight(0, in[:len(in)-2]); err == nil {
		t.Fatal("truncated inflight decoded")
	}
}

func TestRetryable(t *testing.T) {
	for _, err := range []error{gocql.ErrTimeoutNoResponse, gocql.ErrConnectionClosed, gocql.ErrNoConnections,
		&gocql.RequestErrWriteTimeout{}, &gocql.RequestErrReadTimeout{}, &gocql.RequestErrUnavailable{}} {
		if !retryable(err) {
			t.Fatalf("%T %v not retryable", err, err)
		}
	}
	for _, err := range []error{nil, errors.New("syntax"), &gocql.RequestErrAlreadyExists{}, ErrClosed} {
		if retryable(err) {
			t.Fatalf("%v retryable", err)
		}
	}
}
