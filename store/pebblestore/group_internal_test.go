package pebblestore

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// TestGroupCommitDropsAFailedOpsWrites (issue 10): an operation of a group
// commit that fails after it has written (a read error after the idempotency
// record, a remote apply failing mid-way) leaves nothing behind, while the
// other operations of the same group commit. Before the fix the failed op's
// key and log event were committed with the group.
func TestGroupCommitDropsAFailedOpsWrites(t *testing.T) {
	ctx := context.Background()
	s, err := Open(Options{Dir: "/db", FS: vfs.NewMem(), Region: "r1", Partitions: 1, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	like := func(user string) *op {
		return &op{req: edge.Request{Item: "i1", User: user, Target: crdt.Liked, Kind: edge.KindFlip, Epoch: 1,
			IdemKey: "k-" + user, Fingerprint: "f", IdemTTLms: 1e9}, done: make(chan result, 1)}
	}
	boom := errors.New("injected read failure")
	bad := &op{done: make(chan result, 1), fn: func(b *pebble.Batch, w *batchWriter) error {
		_ = b.Set([]byte("zz-partial"), []byte("x"), nil)
		w.appendEvent(edge.Event{Item: "i1", User: "ghost", Bucket: edge.BucketOf("ghost"), Kind: edge.KindFlip})
		return boom
	}}
	a, c := like("alice"), like("carol")
	s.commit([]*op{a, bad, c})
	if r := <-bad.done; !errors.Is(r.err, boom) {
		t.Fatalf("failed op answered %v", r.err)
	}
	for _, o := range []*op{a, c} {
		if r := <-o.done; r.err != nil || r.d.Action != edge.ActWrite {
			t.Fatalf("a good op of the group: %+v %v", r.d, r.err)
		}
	}
	if _, closer, err := s.db.Get([]byte("zz-partial")); err == nil {
		closer.Close()
		t.Fatal("the failed op's write was committed with the group")
	}
	evs, head, err := s.Read(ctx, 0, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || head.Pos != 2 || evs[0].User != "alice" || evs[1].User != "carol" || evs[1].Pos != 2 {
		t.Fatalf("log after the group: head %d, %+v; want alice@1, carol@2 and no ghost", head.Pos, evs)
	}
}
