package rediscache

import (
	"math"
	"testing"
	"time"

	"github.com/likes-dev/likes/counts"
)

func TestEntryEncodingRoundTrip(t *testing.T) {
	for _, e := range []counts.Entry{
		{},
		{Count: 42, AsOf: 1_893_553_445_000, StoredAt: 1_893_553_445_123},
		{Count: -1, AsOf: math.MinInt64, StoredAt: math.MaxInt64},
	} {
		b := encodeEntry(e)
		got, err := decodeEntry(b)
		if err != nil || got != e {
			t.Fatalf("round trip of %+v = %+v, %v", e, got, err)
		}
	}
	if n := len(encodeEntry(counts.Entry{Count: 1_000_000, AsOf: 1_893_553_445_000, StoredAt: 1_893_553_445_123})); n > 16 {
		t.Errorf("a typical entry takes %d bytes", n)
	}
}

func TestBreaker(t *testing.T) {
	now := time.Unix(1000, 0)
	b := breaker{after: 2, cool: time.Second, now: func() time.Time { return now }}
	if !b.allow() {
		t.Fatal("closed breaker refused")
	}
	b.failure()
	if !b.allow() {
		t.Fatal("opened after one failure of two")
	}
	b.success() // resets the count
	b.failure()
	if !b.allow() {
		t.Fatal("failures are not consecutive after a success")
	}
	b.failure()
	if b.allow() {
		t.Fatal("not open after two consecutive failures")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no probe after the cool-down")
	}
	if b.allow() {
		t.Fatal("two probes at once")
	}
	b.failure() // the probe failed: open for another second
	if b.allow() {
		t.Fatal("open circuit let a call through after a failed probe")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no second probe")
	}
	b.success()
	for range 3 {
		if !b.allow() {
			t.Fatal("a successful probe did not close the circuit")
		}
	}
}

func TestMs(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, -time.Second: 1, time.Microsecond: 1, time.Millisecond: 1, 1500 * time.Microsecond: 2, time.Minute: 60_000} {
		if got := ms(d); got != want {
			t.Errorf("ms(%v) = %d, want %d", d, got, want)
		}
	}
}
