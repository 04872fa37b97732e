package region_test

import (
	"testing"
	"time"

	"github.com/likes-dev/likes/region"
)

// TestMixedProtocolCluster (issue 11): ap runs limited to protocol 1 (the
// previous release during a rolling upgrade) while us and eu speak 2; likes
// written at every region (forwarded where they are not the owner) replicate
// everywhere and every count converges exactly.
func TestMixedProtocolCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions and etcd")
	}
	c := startTriWith(t, triOpts{region: func(name string, cfg *region.Config) {
		if name == "ap" {
			cfg.Cluster.MaxProtocol = 1
		}
	}})
	want := map[string]int64{}
	for i, u := range triUsers(1) {
		item := "mixed"
		if _, err := c.setRetry(c.nodes[i%3], u, item, "mixed-"+u, true, 20*time.Second); err != nil {
			t.Fatalf("like by %s: %v", u, err)
		}
		want[item]++
	}
	c.waitCounts(t, want, 30*time.Second)
}
