package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/likes-dev/likes/chaos/proxy"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// Nemesis kinds.
const (
	// NemPartition cuts a region's peer links both ways (blackhole).
	NemPartition = "partition"
	// NemOneWay cuts one directed peer link (region → target).
	NemOneWay = "one-way"
	// NemEtcdSplit cuts a region from etcd: its lease expires, it must fail
	// closed, and its ranges fail over.
	NemEtcdSplit = "etcd-split"
	// NemKill kill -9s a region (aggregators mid-window included) and restarts
	// it on the same data folder.
	NemKill = "kill"
	// NemPause SIGSTOPs a region, then SIGCONTs it.
	NemPause = "pause"
	// NemMovePins moves pins during writes (planned moves through the
	// directory: some ranges, or a whole drain).
	NemMovePins = "move-pins"
	// NemFailover cuts a region's peer links, lets it take writes that cannot
	// replicate, then cuts its etcd link until its ranges fail over.
	NemFailover = "failover-unreplicated"
	// NemMovePartitioned drains a region (planned moves) while its peer links
	// are cut, so its last writes have not replicated when the new owner's
	// epoch starts: DESIGN section 5 says planned moves are clean (a barrier).
	NemMovePartitioned = "move-partitioned"
	// NemDelay delays a region's peer links.
	NemDelay = "delay"
	// NemReset resets a region's peer links and refuses new connections.
	NemReset = "reset"
	// NemDiskFull makes a region's store refuse writes as a full disk would
	// (the test-only disk-full knob of `likesd run`), then clears it: writes
	// there get 503 storage_unavailable, then resume with no restart.
	NemDiskFull = "disk-full"
	// NemRestart stops a region gracefully (SIGTERM: it hands its ranges off
	// as planned moves and flushes its shipper), starts it again on the same
	// data folder, and waits until its home ranges are back (failback). A
	// graceful stop must never cause an unplanned failover.
	NemRestart = "restart"
	// NemRollingRestart restarts every region in turn, as NemRestart does.
	NemRollingRestart = "rolling-restart"
	// NemKillNode kill -9s one node of a region served by several (its log
	// partitions' aggregators and relay mid-window, maybe the elected
	// shipper) and restarts it: the other nodes take its share once its
	// registration expires, then give it back. The region never stops.
	NemKillNode = "kill-node"
	// NemPauseNode SIGSTOPs one node of a region served by several, maybe
	// past the lease TTL (the others take its share and its elections), then
	// SIGCONTs it: a zombie that wakes up running partitions and roles that
	// are no longer its, which every fence must absorb.
	NemPauseNode = "pause-node"
)

// AllNemeses lists every kind that needs nothing but regions, in a fixed order.
var AllNemeses = []string{NemPartition, NemOneWay, NemEtcdSplit, NemKill, NemPause, NemMovePins, NemFailover,
	NemMovePartitioned, NemDelay, NemReset, NemDiskFull, NemRestart, NemRollingRestart}

// NodeNemeses act on one node of a region served by several (Options.Nodes);
// a run with such a region draws from them too.
var NodeNemeses = []string{NemKillNode, NemPauseNode}

// Episode is one planned fault.
type Episode struct {
	At       time.Duration `json:"at"` // offset from the start of the schedule
	Kind     string        `json:"kind"`
	Region   string        `json:"region"`
	Target   string        `json:"target,omitempty"` // one-way: the other end; move-pins: destination
	Duration time.Duration `json:"duration"`
	Delay    time.Duration `json:"delay,omitempty"` // delay: per-chunk latency
	Drain    bool          `json:"drain,omitempty"` // move-pins: drain the region instead of a few ranges
}

// MarshalJSON writes durations as strings ("6.4s").
func (e Episode) MarshalJSON() ([]byte, error) {
	type plain Episode
	return json.Marshal(struct {
		plain
		At       string `json:"at"`
		Duration string `json:"duration"`
		Delay    string `json:"delay,omitempty"`
	}{plain(e), e.At.String(), e.Duration.String(), durString(e.Delay)})
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func (e Episode) String() string {
	s := fmt.Sprintf("+%v %s %s", e.At.Round(100*time.Millisecond), e.Kind, e.Region)
	if e.Target != "" {
		s += "→" + e.Target
	}
	if e.Duration > 0 {
		s += " for " + e.Duration.Round(100*time.Millisecond).String()
	}
	if e.Delay > 0 {
		s += " (" + e.Delay.String() + ")"
	}
	if e.Drain {
		s += " (drain)"
	}
	return s
}

// PlanSchedule derives a schedule from the seed: after a warm-up, episodes
// one at a time with gaps, first every kind in a seeded order, then seeded
// random kinds, until span is used up. ttl scales the durations that must
// outlive a lease. nodes is how many nodes serve each region (default 1):
// node nemeses pick among the regions of several.
func PlanSchedule(seed uint64, span time.Duration, regions []string, nodes map[string]int, kinds []string, ttl time.Duration) []Episode {
	rng := rand.New(rand.NewPCG(seed, 0xC4A05))
	if len(kinds) == 0 {
		kinds = AllNemeses
	}
	var multi []string // the regions of several nodes
	for _, r := range regions {
		if nodes[r] > 1 {
			multi = append(multi, r)
		}
	}
	if len(multi) == 0 { // node nemeses have nothing to act on
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return slices.Contains(NodeNemeses, k) })
		if len(kinds) == 0 {
			return nil
		}
	}
	order := append([]string(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	at := 4 * time.Second // warm-up
	var out []Episode
	dur := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	for i := 0; ; i++ {
		kind := order[i%len(order)]
		if i >= len(order) {
			kind = kinds[rng.IntN(len(kinds))]
		}
		e := Episode{At: at, Kind: kind, Region: regions[rng.IntN(len(regions))]}
		switch kind {
		case NemPartition:
			e.Duration = dur(3*time.Second, 7*time.Second)
		case NemOneWay:
			others := without(regions, e.Region)
			e.Target = others[rng.IntN(len(others))]
			e.Duration = dur(3*time.Second, 6*time.Second)
		case NemEtcdSplit:
			e.Duration = 3*ttl + dur(time.Second, 3*time.Second)
		case NemKill:
			e.Duration = dur(500*time.Millisecond, 2*ttl+2*time.Second) // downtime
		case NemPause:
			e.Duration = dur(500*time.Millisecond, 2*ttl+2*time.Second)
		case NemMovePins:
			others := without(regions, e.Region)
			e.Target = others[rng.IntN(len(others))]
			e.Drain = rng.IntN(3) == 0
			e.Duration = ttl + time.Second // watch the move take effect
		case NemFailover:
			e.Duration = dur(time.Second, 2*time.Second) // unreplicated writes before the etcd cut
		case NemMovePartitioned:
			others := without(regions, e.Region)
			e.Target = others[rng.IntN(len(others))]
			e.Duration = dur(2*time.Second, 3*time.Second) // unreplicated writes before the drain
		case NemDelay:
			e.Duration = dur(3*time.Second, 6*time.Second)
			e.Delay = dur(50*time.Millisecond, 300*time.Millisecond)
		case NemReset:
			e.Duration = dur(2*time.Second, 4*time.Second)
		case NemDiskFull:
			e.Duration = dur(2*time.Second, 4*time.Second)
		case NemRestart, NemRollingRestart:
			e.Duration = dur(300*time.Millisecond, 1500*time.Millisecond) // downtime of each stop
		case NemKillNode, NemPauseNode:
			e.Region = multi[rng.IntN(len(multi))]
			e.Target = fmt.Sprintf("%s-%d", e.Region, 1+rng.IntN(nodes[e.Region]))
			e.Duration = dur(500*time.Millisecond, 2*ttl+2*time.Second)
		}
		// Estimated length (failover waits for the lease to expire).
		length := e.Duration
		switch kind {
		case NemFailover:
			length += 4*ttl + 3*time.Second
		case NemMovePartitioned:
			length += ttl + 5*time.Second
		case NemRestart:
			length += restartLength
		case NemRollingRestart:
			length += time.Duration(len(regions)) * (e.Duration + restartLength)
		}
		if at+length > span && len(out) > 0 {
			break
		}
		out = append(out, e)
		at += length + dur(time.Second, 2500*time.Millisecond)
		if at >= span {
			break
		}
	}
	return out
}

func without(list []string, x string) []string {
	var out []string
	for _, s := range list {
		if s != x {
			out = append(out, s)
		}
	}
	return out
}

// PlannedMove is a pin version the runner itself wrote.
type PlannedMove struct {
	Range uint32
	Epoch uint64
}

// Nemesis executes a schedule against a cluster.
type Nemesis struct {
	c    *Cluster
	hist *History
	logf func(string, ...any)

	mu      sync.Mutex
	events  []NemesisEvent
	planned map[PlannedMove]bool
	current string
}

// NewNemesis returns a nemesis for c.
func NewNemesis(c *Cluster, hist *History, logf func(string, ...any)) *Nemesis {
	return &Nemesis{c: c, hist: hist, logf: logf, planned: map[PlannedMove]bool{}}
}

// Events returns what was executed.
func (n *Nemesis) Events() []NemesisEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NemesisEvent(nil), n.events...)
}

// Planned returns the pin versions written by planned moves.
func (n *Nemesis) Planned() map[PlannedMove]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[PlannedMove]bool{}
	for k, v := range n.planned {
		out[k] = v
	}
	return out
}

// Current names the running episode ("" between episodes).
func (n *Nemesis) Current() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.current
}

// sleep is a pacing wait of the schedule.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Run executes the schedule from start; it returns when the schedule is done
// or ctx ends (the caller heals everything afterwards either way).
func (n *Nemesis) Run(ctx context.Context, start time.Time, sched []Episode) error {
	for _, e := range sched {
		if err := sleep(ctx, time.Until(start.Add(e.At))); err != nil {
			return err
		}
		n.mu.Lock()
		n.current = e.String()
		n.mu.Unlock()
		ev := NemesisEvent{Kind: e.Kind, Region: e.Region, Start: time.Now()}
		n.logf("nemesis: %s", e)
		detail, err := n.run(ctx, e)
		ev.End, ev.Detail = time.Now(), detail
		if err != nil {
			ev.Err = err.Error()
			n.logf("nemesis: %s: %v", e.Kind, err)
		}
		n.mu.Lock()
		n.events = append(n.events, ev)
		n.current = ""
		n.mu.Unlock()
		n.hist.Write("nemesis", ev)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (n *Nemesis) setLinks(links []Link, m proxy.Mode) {
	for _, l := range links {
		_ = n.c.SetLink(l, m)
	}
}

var (
	cut  = proxy.Mode{Kind: proxy.Blackhole}
	pass = proxy.Mode{Kind: proxy.Pass}
)

func (n *Nemesis) run(ctx context.Context, e Episode) (string, error) {
	c := n.c
	r := e.Region
	switch e.Kind {
	case NemPartition:
		links := c.PeerLinks(r)
		n.setLinks(links, cut)
		err := sleep(ctx, e.Duration)
		n.setLinks(links, pass)
		return fmt.Sprintf("cut %d peer links of %s both ways", len(links), r), err
	case NemOneWay:
		l := Link{r, e.Target}
		_ = c.SetLink(l, cut)
		err := sleep(ctx, e.Duration)
		_ = c.SetLink(l, pass)
		return "cut " + l.String(), err
	case NemEtcdSplit:
		l := Link{r, EtcdNode}
		before, _ := c.OwnedRanges(ctx)
		_ = c.SetLink(l, cut)
		err := sleep(ctx, e.Duration)
		after, _ := c.OwnedRanges(ctx)
		_ = c.SetLink(l, pass)
		return fmt.Sprintf("cut %s; %s owned %d ranges before, %d after", l, r, before[r], after[r]), err
	case NemKill:
		if err := c.Kill(r); err != nil {
			return "", err
		}
		err := sleep(ctx, e.Duration)
		if rerr := c.Restart(ctx, r); rerr != nil {
			return "killed; restart failed", errors.Join(err, rerr)
		}
		return fmt.Sprintf("kill -9 %s, restarted after %v", r, e.Duration.Round(time.Millisecond)), err
	case NemPause:
		if err := c.Pause(r); err != nil {
			return "", err
		}
		err := sleep(ctx, e.Duration)
		if rerr := c.Resume(r); rerr != nil {
			return "paused; resume failed", errors.Join(err, rerr)
		}
		return fmt.Sprintf("SIGSTOP %s for %v", r, e.Duration.Round(time.Millisecond)), err
	case NemMovePins:
		detail, err := n.movePins(ctx, e)
		if err != nil {
			return detail, err
		}
		return detail, sleep(ctx, e.Duration)
	case NemFailover:
		return n.failover(ctx, e)
	case NemMovePartitioned:
		return n.movePartitioned(ctx, e)
	case NemDelay:
		links := c.PeerLinks(r)
		n.setLinks(links, proxy.Mode{Kind: proxy.Pass, Delay: e.Delay})
		err := sleep(ctx, e.Duration)
		n.setLinks(links, pass)
		return fmt.Sprintf("delayed %d peer links of %s by %v", len(links), r, e.Delay), err
	case NemReset:
		links := c.PeerLinks(r)
		n.setLinks(links, proxy.Mode{Kind: proxy.Reset})
		err := sleep(ctx, e.Duration)
		n.setLinks(links, pass)
		return fmt.Sprintf("reset %d peer links of %s", len(links), r), err
	case NemRestart:
		return n.restart(ctx, r, e.Duration)
	case NemRollingRestart:
		var details []string
		for _, name := range c.Regions() {
			d, err := n.restart(ctx, name, e.Duration)
			details = append(details, d)
			if err != nil {
				return strings.Join(details, "; "), err
			}
		}
		return strings.Join(details, "; "), nil
	case NemKillNode:
		if err := c.KillNode(e.Target); err != nil {
			return "", err
		}
		err := sleep(ctx, e.Duration)
		if rerr := c.RestartNode(ctx, e.Target); rerr != nil {
			return "killed; restart failed", errors.Join(err, rerr)
		}
		return fmt.Sprintf("kill -9 node %s, restarted after %v", e.Target, e.Duration.Round(time.Millisecond)), err
	case NemPauseNode:
		_, node := c.Node(e.Target)
		if node == nil {
			return "", fmt.Errorf("no node %q", e.Target)
		}
		if err := node.proc.signal(syscall.SIGSTOP); err != nil {
			return "", err
		}
		err := sleep(ctx, e.Duration)
		if rerr := node.proc.signal(syscall.SIGCONT); rerr != nil {
			return "paused; resume failed", errors.Join(err, rerr)
		}
		return fmt.Sprintf("SIGSTOP node %s for %v", e.Target, e.Duration.Round(time.Millisecond)), err
	case NemDiskFull:
		if err := c.SetDiskFull(r, true); err != nil {
			return "", err
		}
		err := sleep(ctx, e.Duration)
		if cerr := c.SetDiskFull(r, false); cerr != nil {
			return "disk full; clearing failed", errors.Join(err, cerr)
		}
		return fmt.Sprintf("%s's store refused writes as on a full disk for %v", r, e.Duration.Round(time.Millisecond)), err
	}
	return "", fmt.Errorf("unknown nemesis %q", e.Kind)
}

// movePins moves a few of the region's ranges (or all: a drain) to the target
// while clients write.
func (n *Nemesis) movePins(ctx context.Context, e Episode) (string, error) {
	dir, cfg := n.c.Directory(), n.c.EpochConfig()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if e.Drain {
		moved, err := dir.Drain(cctx, e.Region, e.Target, cfg.NotBefore(time.Now()), etcdepoch.Planned())
		n.mu.Lock()
		for _, p := range moved {
			n.planned[PlannedMove{p.Range, p.Epoch}] = true
		}
		n.mu.Unlock()
		return fmt.Sprintf("drained %d ranges %s→%s", len(moved), e.Region, e.Target), err
	}
	pins, err := dir.Pins(cctx)
	if err != nil {
		return "", err
	}
	// Move up to 8 ranges from the region owning the most to the target,
	// which keeps ownership spread across failovers.
	per := map[string]int{}
	for _, p := range pins {
		per[p.Region]++
	}
	from := e.Region
	for reg, k := range per {
		if reg != e.Target && (k > per[from] || (k == per[from] && reg < from)) {
			from = reg
		}
	}
	if from == e.Target {
		return "nothing to move", nil
	}
	var moved []string
	for _, p := range pins {
		if p.Region != from || len(moved) >= 8 {
			continue
		}
		np, err := dir.Move(cctx, p.Range, p.Epoch, e.Target, cfg.NotBefore(time.Now()), etcdepoch.Planned())
		if err != nil {
			continue // a concurrent failover won; fine
		}
		n.mu.Lock()
		n.planned[PlannedMove{np.Range, np.Epoch}] = true
		n.mu.Unlock()
		moved = append(moved, fmt.Sprint(np.Range))
	}
	sort.Strings(moved)
	return fmt.Sprintf("moved ranges %s %s→%s", strings.Join(moved, ","), from, e.Target), nil
}

// failover cuts the region's peer links, lets it take writes it cannot
// replicate for e.Duration, then cuts its etcd link and waits until its ranges
// are moved away and the new epochs have started, then heals.
func (n *Nemesis) failover(ctx context.Context, e Episode) (string, error) {
	c, r := n.c, e.Region
	peers := c.PeerLinks(r)
	n.setLinks(peers, cut)
	defer n.setLinks(peers, pass)
	if err := sleep(ctx, e.Duration); err != nil {
		return "", err
	}
	before, _ := c.OwnedRanges(ctx)
	el := Link{r, EtcdNode}
	_ = c.SetLink(el, cut)
	defer func() { _ = c.SetLink(el, pass) }()
	ttl := c.EpochConfig().TTL
	err := poll(ctx, 6*ttl+10*time.Second, 200*time.Millisecond, func() error {
		owned, err := c.OwnedRanges(ctx)
		if err != nil {
			return err
		}
		if owned[r] > 0 {
			return fmt.Errorf("%s still owns %d ranges", r, owned[r])
		}
		return nil
	})
	if err != nil {
		return fmt.Sprintf("%s owned %d ranges; failover did not complete", r, before[r]), err
	}
	// Let the new owners start (notBefore) and take writes for a moment.
	err = sleep(ctx, c.EpochConfig().TTL+c.EpochConfig().MaxSkew+time.Second)
	return fmt.Sprintf("%s cut from peers for %v, then from etcd; its %d ranges failed over", r, e.Duration.Round(time.Millisecond), before[r]), err
}

// movePartitioned cuts the region's peer links, lets it take writes that
// cannot replicate, drains it to the target (planned moves), lets the target
// start its epochs and take writes, then heals.
func (n *Nemesis) movePartitioned(ctx context.Context, e Episode) (string, error) {
	c := n.c
	peers := c.PeerLinks(e.Region)
	// Reset, not blackhole: forwards to the region fail fast, so clients
	// retry and reach it directly, and it takes writes it cannot ship.
	n.setLinks(peers, proxy.Mode{Kind: proxy.Reset})
	defer n.setLinks(peers, pass)
	if err := sleep(ctx, e.Duration); err != nil {
		return "", err
	}
	detail, err := n.movePins(ctx, Episode{Region: e.Region, Target: e.Target, Drain: true})
	if err != nil {
		return detail, err
	}
	cfg := c.EpochConfig()
	err = sleep(ctx, cfg.TTL+cfg.MaxSkew+4*time.Second)
	return fmt.Sprintf("%s cut from peers for %v, then %s", e.Region, e.Duration.Round(time.Millisecond), detail), err
}

// affects reports the region a nemesis event degrades (for failover windows).
func (e NemesisEvent) affects(region string) bool {
	if e.Kind == NemRollingRestart {
		return true // every region in turn
	}
	if e.Region == region {
		return e.Kind != NemMovePins && e.Kind != NemDelay && e.Kind != NemMovePartitioned
	}
	return false
}

// restartLength estimates a restart episode beyond its downtime: the
// hand-off, the start, and the failback of the home ranges.
const restartLength = 6 * time.Second

// restart stops region r gracefully, keeps it down for downtime, starts it
// again and waits until every range whose home is r is pinned to it and
// settled (failback), bounded.
func (n *Nemesis) restart(ctx context.Context, r string, downtime time.Duration) (string, error) {
	c := n.c
	took, err := c.Stop(r, 45*time.Second)
	if err != nil {
		return "", err
	}
	if err := sleep(ctx, downtime); err != nil {
		return "", err
	}
	if err := c.Restart(ctx, r); err != nil {
		return fmt.Sprintf("stopped %s in %v; restart failed", r, took.Round(time.Millisecond)), err
	}
	back := time.Now()
	homes := c.Regions()
	var away int
	err = poll(ctx, 60*time.Second, 100*time.Millisecond, func() error {
		pins, err := c.Directory().Pins(ctx)
		if err != nil {
			return err
		}
		away = 0
		for _, p := range pins {
			if epoch.Home(p.Range, homes) == r && (p.Region != r || p.CatchUp) {
				away++
			}
		}
		if away > 0 {
			return fmt.Errorf("%d of %s's home ranges not back", away, r)
		}
		return nil
	})
	detail := fmt.Sprintf("SIGTERM %s: stopped in %v, down %v, home ranges back %v after the restart",
		r, took.Round(time.Millisecond), downtime.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	return detail, err
}
