package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/region"
)

// metricSum is the sum of a metric family's samples in reg (0 if absent).
func metricSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestGracefulStopHandsOffAndRangesComeHome: a graceful stop of us (Drain,
// Handoff, Close) moves every range of us to the next region as a planned
// move and waits for the new owners to settle, so closing us fails nothing
// over; writes of us's users keep working at the new owners while us is down;
// when us runs again its home ranges come back to it, as planned moves, within
// the failback time, and every count is exact with no branch correction
// anywhere.
func TestGracefulStopHandsOffAndRangesComeHome(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions and etcd")
	}
	c := startTriWith(t, triOpts{region: func(_ string, cfg *region.Config) {
		cfg.Cluster.FailbackAfter = time.Second
		cfg.Cluster.FailbackRate = 50
	}})
	us := c.byName["us"]
	users := triUsers(1)
	want := map[string]int64{}
	like := func(phase string, via func(i int) *triNode) {
		t.Helper()
		item := "handoff-" + phase
		for i, u := range users {
			res, err := c.setRetry(via(i), u, item, phase+"-"+u, true, 20*time.Second)
			if err != nil {
				t.Fatalf("%s: like by %s: %v", phase, u, err)
			}
			if res.ans.Liked != true {
				t.Fatalf("%s: like by %s answered %+v", phase, u, res.ans)
			}
		}
		want[item] = int64(len(users))
	}
	like("before", func(i int) *triNode { return c.nodes[i%3] })

	before := c.mustPins(t)
	owned := 0
	for _, p := range before {
		if p.Region == "us" {
			owned++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := us.r.Handoff(ctx)
	if err != nil {
		t.Fatalf("hand-off: %v (%+v)\n%s", err, rep, c.pinString())
	}
	t.Logf("hand-off: %+v", rep)
	if rep.Moved != owned || rep.Settled != owned || rep.Kept != 0 || len(rep.Behind) != 0 || len(rep.Flushed) != 2 {
		t.Fatalf("hand-off report %+v; want %d moved and settled, both peers flushed", rep, owned)
	}
	after := c.mustPins(t)
	for i, p := range after {
		b := before[i]
		switch {
		case b.Region != "us" && p != b:
			t.Fatalf("range %d of %s moved: %+v → %+v", i, b.Region, b, p)
		case b.Region == "us" && (p.Region == "us" || p.Epoch != b.Epoch+1 || p.CatchUp || p.From != "us"):
			t.Fatalf("range %d after the hand-off: %+v (before %+v); want settled at the next region, epoch +1", i, p, b)
		}
	}
	us.stop(t)
	// Well past the lease TTL: nothing fails over (us owns nothing).
	deadline := time.Now().Add(2*c.ecfg.TTL + c.ecfg.MaxSkew)
	for time.Now().Before(deadline) {
		if now := c.mustPins(t); fmt.Sprint(now) != fmt.Sprint(after) {
			t.Fatalf("pins changed after us stopped:\n%v\nwant\n%v", now, after)
		}
		pause(100 * time.Millisecond)
	}
	like("down", func(i int) *triNode { return c.nodes[1+i%2] })

	us.cfg.Cluster.Seeds = []string{c.byName["eu"].r.GossipAddr()}
	back := time.Now()
	us.start(t, nil)
	c.poll(t, 60*time.Second, "every range back at its home", func() (bool, string) {
		ps, err := c.pins()
		if err != nil {
			return false, err.Error()
		}
		away := 0
		for _, p := range ps {
			if p.Region != epoch.Home(p.Range, triNames) || p.CatchUp {
				away++
			}
		}
		return away == 0, fmt.Sprintf("%d ranges away: %s", away, c.pinString())
	})
	t.Logf("ranges home %v after us restarted", time.Since(back).Round(time.Millisecond))
	for i, p := range c.mustPins(t) {
		if b := before[i]; b.Region == "us" && (p.Epoch != b.Epoch+2 || p.From == "") {
			t.Fatalf("range %d came home as %+v (before %+v); want two planned moves", i, p, b)
		}
	}
	like("after", func(i int) *triNode { return c.nodes[i%3] })
	c.waitCounts(t, want, 30*time.Second)
	for _, n := range c.nodes {
		if got := metricSum(t, n.r.Registry, "likes_branch_corrections_total"); got != 0 {
			t.Errorf("%s appended %v branch corrections", n.name, got)
		}
	}
}

func pause(d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	<-tm.C
}
