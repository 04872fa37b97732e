package chaos

import (
	"context"
	"testing"
	"time"
	"encoding/json"
)

func TestScratch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := StartCluster(ctx, ClusterConfig{Binary: "/tmp/likesd", Dir: dir, Regions: []string{"us","eu","ap"}, Secret: "s3cret",
		LeaseTTL: 2*time.Second, Window: 100*time.Millisecond, AntiEntropy: 2*time.Second, Partitions: 16, Ranges: 64, Logf: t.Logf})
	if err != nil { t.Fatal(err) }
	defer c.Close()
	for _, n := range c.Regions() {
		st, err := c.Status(ctx, n)
		b, _ := json.Marshal(st)
		t.Logf("%s %v %s", n, err, b)
	}
	o, err := c.OwnedRanges(ctx)
	t.Log(o, err)
}
