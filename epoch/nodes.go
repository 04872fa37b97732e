package epoch

import (
	"hash/fnv"
	"strconv"
)

// Assign splits a region's log partitions over its live nodes by rendezvous
// hashing: partition p goes to the node with the highest hash of (node, p).
// Every node computes the same answer from the same list, and a node joining
// or leaving moves only the partitions it takes or held (about 1/n of them).
// It returns the partitions assigned to self, ascending; self need not be in
// nodes (then it gets none), and an empty list assigns nothing.
func Assign(nodes []string, partitions int, self string) []uint32 {
	var out []uint32
	for p := 0; p < partitions; p++ {
		if OwnerOf(nodes, uint32(p)) == self {
			out = append(out, uint32(p))
		}
	}
	return out
}

// OwnerOf is the node of nodes that Assign gives partition p ("" if none).
func OwnerOf(nodes []string, p uint32) string {
	best, bestH := "", uint64(0)
	ps := strconv.FormatUint(uint64(p), 10)
	for _, n := range nodes {
		h := fnv.New64a()
		_, _ = h.Write([]byte(n))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(ps))
		v := mix(h.Sum64())
		if best == "" || v > bestH || (v == bestH && n < best) {
			best, bestH = n, v
		}
	}
	return best
}

// mix is a 64-bit finalizer (splitmix64's): FNV alone spreads short keys
// poorly in its high bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
