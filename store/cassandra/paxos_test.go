package cassandra

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
)

// TestPaxosPerLike: without contention a like on a new edge costs one edge
// LWT and one sequence LWT (the appender remembers the row its own append
// left, so no SERIAL read precedes it), and no SERIAL read at all.
func TestPaxosPerLike(t *testing.T) {
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 1, clk)
	mustApply(t, s, edgetest.Like("warm", "u0", "", 1, t0), edge.ActWrite) // creates the sequence row
	const n = 10
	before := s.Ops()
	for i := range n {
		mustApply(t, s, edgetest.Like(fmt.Sprintf("i%d", i), "u", "", 1, t0), edge.ActWrite)
	}
	got := s.Ops().Paxos - before.Paxos
	t.Logf("%d likes: %d Paxos requests, %d plain", n, got, s.Ops().Plain-before.Plain)
	// A Cassandra timeout under load retries a request: allow one.
	if got > 2*n+1 {
		t.Fatalf("%d likes took %d Paxos requests, want at most %d (edge LWT + sequence LWT each)", n, got, 2*n+1)
	}
	if evs := logOf(t, s); len(evs) != n+1 {
		t.Fatalf("log holds %d events, want %d", len(evs), n+1)
	}
	// The per-statement counts add up to the totals, and name the edge LWT
	// without the keyspace.
	var paxos, plain uint64
	for k, v := range s.OpsByStatement() {
		switch {
		case strings.HasPrefix(k, "paxos "):
			paxos += v
		case strings.HasPrefix(k, "plain "):
			plain += v
		default:
			t.Fatalf("statement %q has no kind", k)
		}
		if strings.Contains(k, ks+".") {
			t.Fatalf("statement %q names the keyspace", k)
		}
	}
	if ops := s.Ops(); paxos != ops.Paxos || plain != ops.Plain {
		t.Fatalf("per statement %d Paxos, %d plain; totals %+v", paxos, plain, ops)
	}
	var edgeLWT uint64
	for k, v := range s.OpsByStatement() {
		if strings.HasPrefix(k, "paxos INSERT INTO edges ") {
			edgeLWT += v
		}
	}
	if edgeLWT < n {
		t.Fatalf("the edge LWT is counted %d times by its statement, want at least %d: %v", edgeLWT, n, s.OpsByStatement())
	}
}

// TestPendingFromOlderRelease: an edge whose pending event was written by a
// release before schema 4 (format 1, relay to be recorded by clearing the
// column) is relayed exactly once by this release, and this release's pending
// blobs are format 2, which such a release refuses to decode.
func TestPendingFromOlderRelease(t *testing.T) {
	if b := encodePending(pending{Nonce: 1}); b[0] != pendingV2 {
		t.Fatalf("pending blob format %d, want %d", b[0], pendingV2)
	}
	ks := FreshKeyspace(t)
	clk := clock.NewFake(time.UnixMilli(t0))
	s := openTest(t, ks, 2, clk)
	ctx := context.Background()
	crashAfterEdge(t, s, edgetest.Like("a", "u1", "k1", 1, t0))
	row, err := s.readEdge(ctx, "a", "u1", true)
	if err != nil || row.pending == nil {
		t.Fatalf("edge after crash: %+v, %v; want a pending event", row, err)
	}
	old := encodePending(*row.pending)
	old[0] = blobV1
	if err := s.write(ctx, "UPDATE "+ks+".edges SET pending = ? WHERE item = ? AND bucket = ? AND user = ?",
		old, "a", int(edge.BucketOf("u1")), "u1").Exec(); err != nil {
		t.Fatal(err)
	}
	d := mustApply(t, s, edgetest.Like("a", "u1", "k1", 1, t0+1), edge.ActReplay)
	if !d.Answer.Liked || !d.Answer.Changed {
		t.Fatalf("replay answered %+v", d.Answer)
	}
	mustApply(t, s, edgetest.Like("a", "u1", "k2", 1, t0+2), edge.ActNoop)
	if n, err := s.Sweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want nothing left to relay", n, err)
	}
	flips := 0
	for _, ev := range eventsOf(logOf(t, s), "a", "u1") {
		if ev.Kind == edge.KindFlip {
			flips++
		}
	}
	if flips != 1 {
		t.Fatalf("%d flip events in the log, want 1", flips)
	}
}
