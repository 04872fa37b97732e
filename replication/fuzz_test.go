package replication

import (
	"google.golang.org/protobuf/proto"

	"context"
	"encoding/json"
	"github.com/likes-dev/likes/internal/peerpb"
	"testing"

	"github.com/likes-dev/likes/edge"
)

// FuzzPush feeds the receive path hostile batches, as a peer's bytes arrive
// (JSON, the wire codec): it never panics, and whatever it accepts is valid:
// every applied event passes edge.ValidateEvent, lies within what was sent,
// and every merged cell is the sender's own.
func FuzzPush(f *testing.F) {
	good, _ := json.Marshal(Batch{From: "eu", Partitions: 2, Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 1), ev(0, 2)}, Through: 2}},
		Cells: []CellState{cell("x", 3)}, CellsThrough: 1, Watermark: 5})
	f.Add(good)
	f.Add([]byte(`{"From":"eu","Partitions":2,"Parts":[{"Partition":0,"Through":18446744073709551615}]}`))
	f.Add([]byte(`{"From":"zz","Partitions":2,"Cells":[{"Key":{"Item":"x","Region":"zz"},"Cell":{"P":1000000,"HWM":9223372036854775807}}]}`))
	f.Add([]byte(`{"From":"eu","Partitions":2,"Parts":[{"Partition":1,"Events":[{"Partition":1,"Pos":1,"Item":"i","User":"u\u0000","Kind":3,"Delta":-1000}],"Through":1}]}`))
	f.Add([]byte(`{"From":"eu","Partitions":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		if json.Unmarshal(data, &b) != nil {
			return
		}
		pushAndCheck(t, b)
	})
}

// FuzzPushV2 is FuzzPush over protocol 2: any bytes a peer sends as a
// PushRequest either fail to decode or reach the same validation, and
// nothing invalid is applied.
func FuzzPushV2(f *testing.F) {
	good, _ := proto.Marshal(&peerpb.PushRequest{Protocol: 2, Batch: batchToPB(Batch{From: "eu", Partitions: 2,
		Parts: []PartBatch{{Partition: 0, Events: []edge.Event{ev(0, 1), ev(0, 2)}, Through: 2}},
		Cells: []CellState{cell("x", 3)}, CellsThrough: 1, Watermark: 5})})
	f.Add(good)
	bad, _ := proto.Marshal(&peerpb.PushRequest{Protocol: 2, Batch: &peerpb.Batch{From: "eu", Partitions: 2,
		Parts: []*peerpb.Part{{Partition: 1, After: 3, Events: []*peerpb.Event{{Item: "i", User: "u\x00", Kind: 3, Delta: -1000}}}}}})
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m peerpb.PushRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		b, err := batchFromPB(m.GetBatch())
		if err != nil {
			return
		}
		pushAndCheck(t, b)
	})
}

// pushAndCheck pushes b to a fresh server and fails if anything invalid, or
// anything of another sender, was applied.
func pushAndCheck(t *testing.T, b Batch) {
	t.Helper()
	sink := newFakeSink(2)
	srv, err := NewServer(ServerConfig{Region: "us", Partitions: 2, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Push(context.Background(), b); err != nil {
		return
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for from, parts := range sink.applied {
		if from != b.From {
			t.Fatalf("events applied as %q from a batch of %q", from, b.From)
		}
		for p, evs := range parts {
			for _, e := range evs {
				if err := edge.ValidateEvent(e, 2); err != nil || int(e.Partition) != p {
					t.Fatalf("accepted an invalid event %+v: %v", e, err)
				}
			}
		}
	}
	for k := range sink.cells {
		if k.Region != b.From {
			t.Fatalf("merged a cell of %q from %q", k.Region, b.From)
		}
	}
}
