package retain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
)

// With Config.Relayed (the aggregators read Kafka) every round carries the
// relayed positions; when they cannot be read, the round still runs (the
// idempotency records expire) but keeps the log, and fails.
func TestRelayedRounds(t *testing.T) {
	var got []Round
	relayed, relErr := []uint64{3, 0, 9}, error(nil)
	l := New(Config{
		Retain: func(_ context.Context, in Round) (Stats, error) {
			got = append(got, in)
			return Stats{}, nil
		},
		Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), Retention: time.Hour, Interval: time.Minute,
		Relayed: func(context.Context) ([]uint64, error) { return relayed, relErr },
	}, true)
	ctx := context.Background()
	if _, err := l.Step(ctx); err != nil {
		t.Fatal(err)
	}
	relErr = errors.New("broker down")
	if _, err := l.Step(ctx); err == nil || !errors.Is(err, relErr) {
		t.Fatalf("round with unknown relayed positions: %v, want the cause", err)
	}
	relayed, relErr = nil, nil
	if _, err := l.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d rounds ran, want 3", len(got))
	}
	if r := got[0]; !r.Log || r.LogBound(2, 100) != 9 || r.LogBound(1, 100) != 0 || r.LogBound(7, 100) != 0 || r.PruneDedupe() {
		t.Fatalf("round 1 %+v: want the relayed bounds and no dedupe pruning", r)
	}
	if r := got[1]; r.Log || r.Relayed != nil {
		t.Fatalf("round 2 %+v: want the log kept", r)
	}
	if r := got[2]; r.Relayed == nil || r.LogBound(0, 100) != 0 {
		t.Fatalf("round 3 %+v: no positions relayed must bound at 0, not fall back to the aggregators'", r)
	}
	if st := l.Stats(); st.Failures != 1 || st.Rounds != 3 {
		t.Fatalf("stats %+v", st)
	}
	plain := Round{Log: true}
	if plain.LogBound(0, 42) != 42 || !plain.PruneDedupe() {
		t.Fatal("without Relayed the aggregators' positions bound the log and dedupe is pruned")
	}
}
