package wire_test

import (
	"errors"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/wire"
)

var errBad = errors.New("test: corrupt")

func idemGen() *rapid.Generator[*edge.IdemRef] {
	return rapid.Custom(func(t *rapid.T) *edge.IdemRef {
		if rapid.Bool().Draw(t, "nil") {
			return nil
		}
		return &edge.IdemRef{
			Key: rapid.String().Draw(t, "key"), Fingerprint: rapid.String().Draw(t, "fp"),
			ExpiresAt: rapid.Int64().Draw(t, "exp"), Liked: rapid.Bool().Draw(t, "liked"), Changed: rapid.Bool().Draw(t, "changed"),
		}
	})
}

// Everything appended reads back, in order, and nothing is left over.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		v := crdt.Version{Epoch: rapid.Uint64().Draw(t, "epoch"), Op: rapid.Uint64().Draw(t, "op")}
		idem := idemGen().Draw(t, "idem")
		b := wire.AppendStr(nil, s)
		b = wire.AppendVersion(b, v)
		b = wire.AppendIdem(b, idem)
		bs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) crdt.Branch {
			return crdt.Branch{Epoch: rapid.Uint64().Draw(t, "be"), Base: crdt.Register{
				Version: crdt.Version{Epoch: rapid.Uint64().Draw(t, "bve"), Op: rapid.Uint64().Draw(t, "bvo")},
				State:   crdt.State(rapid.IntRange(0, 3).Draw(t, "bs"))}}
		}), 0, 4).Draw(t, "branches")
		b = wire.AppendBranches(b, bs)
		b = append(b, 7)
		d := wire.NewDecoder(b, errBad)
		if got := d.Str(); got != s {
			t.Fatalf("Str = %q, want %q", got, s)
		}
		if got := d.Version(); got != v {
			t.Fatalf("Version = %v, want %v", got, v)
		}
		got := d.Idem()
		if (got == nil) != (idem == nil) || (got != nil && *got != *idem) {
			t.Fatalf("Idem = %+v, want %+v", got, idem)
		}
		gotBs := d.Branches()
		if len(gotBs) != len(bs) {
			t.Fatalf("Branches = %v, want %v", gotBs, bs)
		}
		for i := range bs {
			if gotBs[i] != bs[i] {
				t.Fatalf("Branches = %v, want %v", gotBs, bs)
			}
		}
		if d.Byte() != 7 || d.End() != nil {
			t.Fatalf("tail: err %v", d.Err())
		}
	})
}

func TestFailures(t *testing.T) {
	d := wire.NewDecoder([]byte{0x80}, errBad) // a truncated varint
	if d.Uvarint() != 0 || !errors.Is(d.Err(), errBad) {
		t.Fatalf("truncated varint: err %v", d.Err())
	}
	if d.Str() != "" || d.Byte() != 0 || d.Uint64() != 0 {
		t.Fatal("reads after a failure must return zero values")
	}
	d = wire.NewDecoder(wire.AppendStr(nil, "abc")[:2], errBad)
	if d.Str() != "" || d.Err() == nil {
		t.Fatal("short string accepted")
	}
	for _, flags := range []byte{2, 4, 6, 8, 0x81} {
		d = wire.NewDecoder([]byte{flags, 0, 0, 0}, errBad)
		if d.Idem() != nil || d.Err() == nil {
			t.Fatalf("idem flags %#x accepted", flags)
		}
	}
	d = wire.NewDecoder([]byte{1, 2}, errBad)
	d.Byte()
	if d.End() == nil {
		t.Fatal("End accepted a trailing byte")
	}
	var big [8]byte
	for i := range big {
		big[i] = math.MaxUint8
	}
	d = wire.NewDecoder(big[:], errBad)
	if d.Uint64() != math.MaxUint64 || d.End() != nil {
		t.Fatal("Uint64")
	}
}

// No input makes a Decoder panic or read past its end.
func FuzzDecoder(f *testing.F) {
	f.Add(wire.AppendIdem(wire.AppendStr(nil, "k"), &edge.IdemRef{Key: "a", Fingerprint: "b", Liked: true}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := wire.NewDecoder(b, errBad)
		for d.Err() == nil && d.Len() > 0 {
			switch d.Byte() % 7 {
			case 0:
				d.Str()
			case 1:
				d.Version()
			case 2:
				d.Idem()
			case 3:
				d.Varint()
			case 4:
				d.Uint64()
			case 5:
				d.Branches()
			default:
				d.Uvarint()
			}
		}
	})
}
