package region_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestThreeRegionErasure: an erasure requested at a region that does not own
// the user's range is relayed to the owner (where the user's writes are
// serialized and the erasure mark blocks them); counts drop by exactly one per
// liked edge in every region; later writes by the user are refused everywhere.
func TestThreeRegionErasure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions and etcd")
	}
	c := startTri(t)
	testTriErasure(t, c, triUserOf(t, c, "eu", nil), c.byName["us"]) // relayed to the owner
}

// triUserOf is a user whose range owner owns, not in skip.
func triUserOf(t *testing.T, c *triCluster, owner string, skip []string) string {
	t.Helper()
	ps := c.mustPins(t)
	for _, u := range triUsers(len(skip) + 1) {
		if triOwner(ps, u).Region == owner && !slices.Contains(skip, u) {
			return u
		}
	}
	t.Fatalf("no user owned by %s; pins %s", owner, c.pinString())
	return ""
}

// testTriErasure erases user (who has written nothing yet) through via: each
// of the five likes it gets here leaves every region's count once, the job
// reports exactly those five, and later likes by the user are refused
// everywhere.
func testTriErasure(t *testing.T, c *triCluster, user string, via *triNode) {
	other := "bystander-" + user
	want := map[string]int64{}
	for i := 0; i < 5; i++ {
		item := fmt.Sprintf("erase-item-%d", i)
		n := c.nodes[i%len(c.nodes)]
		if r := c.set(n, user, item, "k-"+item, true); r.code != http.StatusOK {
			t.Fatalf("like %s: %v", item, r)
		}
		if r := c.set(n, other, item, "o-"+item, true); r.code != http.StatusOK {
			t.Fatalf("like %s by %s: %v", item, other, r)
		}
		want[item] = 2
	}
	c.waitCounts(t, want, 30*time.Second)

	r := c.do(http.MethodDelete, via.srv.URL+"/v1/users/"+user, c.token(user, false), "", nil)
	if r.code != http.StatusOK && r.code != http.StatusAccepted {
		t.Fatalf("erase through %s: %v", via.name, r)
	}
	c.poll(t, 30*time.Second, "erasure done at the owner, seen through ap", func() (bool, string) {
		r := c.do(http.MethodGet, c.byName["ap"].srv.URL+"/v1/users/"+user+"/erasure", c.token(user, false), "", nil)
		var job struct {
			State   string `json:"state"`
			Removed int    `json:"likesRemoved"`
		}
		_ = json.Unmarshal(r.body, &job)
		return r.code == http.StatusOK && job.State == "done" && job.Removed == 5, r.String()
	})
	for item := range want {
		want[item] = 1
	}
	c.waitCounts(t, want, 30*time.Second)
	for _, n := range c.nodes {
		if r := c.set(n, user, "erase-item-new", "after-"+n.name, true); r.code != http.StatusGone {
			t.Fatalf("like after erasure through %s: %v (want 410)", n.name, r)
		}
	}
}
