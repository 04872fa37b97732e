package epoch

import (
	"fmt"
	"testing"
)

// Every partition has exactly one owner among the live nodes, the split is
// roughly even, and a node leaving moves only its own partitions.
func TestAssignProperties(t *testing.T) {
	const parts = 64
	for n := 1; n <= 5; n++ {
		var nodes []string
		for i := 0; i < n; i++ {
			nodes = append(nodes, fmt.Sprintf("us-%d", i+1))
		}
		seen := map[uint32]string{}
		for _, self := range nodes {
			got := Assign(nodes, parts, self)
			if n > 1 && (len(got) < parts/n/3 || len(got) > 3*parts/n) {
				t.Errorf("%d nodes: %s got %d of %d partitions", n, self, len(got), parts)
			}
			for _, p := range got {
				if o, dup := seen[p]; dup {
					t.Fatalf("partition %d assigned to %s and %s", p, o, self)
				}
				seen[p] = self
			}
		}
		if len(seen) != parts {
			t.Fatalf("%d nodes: %d of %d partitions assigned", n, len(seen), parts)
		}
		if n < 2 {
			continue
		}
		gone := nodes[n-1]
		rest := nodes[:n-1]
		for p := uint32(0); p < parts; p++ {
			if before, after := seen[p], OwnerOf(rest, p); before != gone && before != after {
				t.Errorf("partition %d moved %s → %s when %s left", p, before, after, gone)
			}
		}
	}
	if got := Assign(nil, 4, "a"); len(got) != 0 {
		t.Fatalf("no nodes: %v", got)
	}
	if got := Assign([]string{"b"}, 4, "a"); len(got) != 0 {
		t.Fatalf("self not live: %v", got)
	}
}
