package cassandra

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
)

func intentsLeft(t *testing.T, ks string) int {
	t.Helper()
	var n int
	if err := SharedSession(t).Query("SELECT COUNT(*) FROM " + ks + ".relay_intents").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The intents of finished relays are deleted by the reaper in batches, not
// one request per like on the write path; Sweep sends the waiting deletes
// before it reads any edge, and Close sends what is left.
func TestIntentsReapedInBatches(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0)) // never ticks: only Sweep and Close send
	s := openTest(t, ks, 2, clk)
	const likes = 40
	for i := range likes {
		mustApply(t, s, edgetest.Like(fmt.Sprintf("i%d", i), "u1", fmt.Sprintf("k%d", i), 1, t0+int64(i)), edge.ActWrite)
	}
	if n := intentsLeft(t, ks); n != likes {
		t.Fatalf("%d intents before the reaper sent anything, want %d (one per like, their deletes waiting)", n, likes)
	}
	before := s.OpsByStatement()
	if n, err := s.Sweep(context.Background(), 0); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0 relayed", n, err)
	}
	after := s.OpsByStatement()
	if n := intentsLeft(t, ks); n != 0 {
		t.Fatalf("%d intents left after Sweep", n)
	}
	if d := after["plain BATCH relay_intents deletes"] - before["plain BATCH relay_intents deletes"]; d == 0 || d > 4 {
		t.Errorf("%d delete batches for %d intents in 2 partitions, want 2 to 4 (reapBatch %d)", d, likes, reapBatch)
	}
	for stmt, n := range after {
		if n != before[stmt] && stmt != "plain BATCH relay_intents deletes" && stmt != "plain DELETE FROM relay_intents" &&
			stmt != "plain SELECT item, user, eseq, nonce, created_at FROM relay_intents" &&
			stmt != "plain SELECT minute FROM sweep_cursors" && stmt != "plain SELECT created_ms FROM meta" {
			t.Errorf("Sweep after the reaper's flush sent %d of %q: it should find no intent to check", n-before[stmt], stmt)
		}
	}

	// Close sends the deletes still waiting.
	mustApply(t, s, edgetest.Like("late", "u1", "k-late", 1, t0+100), edge.ActWrite)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := intentsLeft(t, ks); n != 0 {
		t.Fatalf("%d intents left after Close", n)
	}
}
