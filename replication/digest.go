package replication

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/likes-dev/likes/edge"
)

// BucketOf is the anti-entropy bucket of an item's cells: edge.Hash(item) % 256.
func BucketOf(item string) uint32 { return uint32(edge.Hash(item) % DigestBuckets) }

// Digest is the anti-entropy summary of a set of cells: per bucket, the sum
// (mod 2^64) of a 64-bit hash of each cell's key and full state. The sum makes
// it independent of scan order; each cell key occurs once, so sums cannot
// cancel the way XOR of equal entries would.
type Digest [DigestBuckets]uint64

// Add folds one cell into the digest.
func (d *Digest) Add(c CellState) { d[BucketOf(c.Key.Item)] += cellHash(c) }

// Mismatched returns the buckets where d and o differ, ascending.
func (d *Digest) Mismatched(o *Digest) []uint32 {
	var out []uint32
	for i := range d {
		if d[i] != o[i] {
			out = append(out, uint32(i))
		}
	}
	return out
}

// cellHash hashes a cell's key and state with FNV-1a over an unambiguous
// encoding, then mixes the result (splitmix64 finaliser) so that summing many
// hashes does not concentrate on FNV's weak low bits.
func cellHash(c CellState) uint64 {
	h := fnv.New64a()
	var buf [8]byte
	writeStr := func(s string) {
		binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
		_, _ = h.Write(buf[:])
		_, _ = h.Write([]byte(s))
	}
	writeU64 := func(v uint64) {
		binary.BigEndian.PutUint64(buf[:], v)
		_, _ = h.Write(buf[:])
	}
	writeStr(c.Key.Item)
	writeStr(c.Key.Region)
	writeU64(uint64(c.Key.Shard))
	writeU64(c.Cell.P)
	writeU64(c.Cell.N)
	writeU64(c.Cell.HWM)
	writeU64(uint64(c.Cell.Watermark))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
