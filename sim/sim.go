package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/catchup"
	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/pebblestore"
)

// Options configures one run.
type Options struct {
	// Seed determines everything: the fault mix, the schedule and every choice.
	Seed uint64
	// Steps is the number of scheduled actions before healing (default 400).
	Steps int
	// Trace, when set, receives one line per action (replay with a trace).
	Trace io.Writer
	// Test names the test that replays this configuration (default TestSim),
	// for the replay command a failure prints.
	Test string
	// Fixed, when set, overrides the fault mix the seed would draw (for tests
	// that need a particular kind of schedule).
	Fixed func(*Knobs)
}

// Stats counts what a run exercised.
type Stats struct {
	Steps          int
	Requests       int // client requests issued (first tries and retries)
	Accepted       int // requests a region accepted (write, no-op or replay)
	Writes         int // new edge versions
	Replays        int
	Conflicts      int // ErrKeyConflict answers (all expected)
	StaleRetries   int // deep-dive-1 retries of an old like after an unlike
	Overtaken      int // retries whose record had not reached the owner yet
	Forwarded      int
	LostReplies    int
	Refused        int // not owner, fail closed, unavailable
	AggSteps       int
	Pushes         int // pushes delivered to a live receiver
	Dropped        int
	Duplicated     int
	Reordered      int
	Partitions     int
	EtcdCuts       int
	PlannedMoves   int
	Settled        int // planned moves whose barrier settled the pin
	UnplannedMoves int
	Chains         int // unplanned A→B→C moves (three distinct regions, writes in each epoch)
	Crashes        int
	Syncs          int
	Corrections    int // correction events in all logs at the end
	HonestyChecks  int
	AntiEntropy    int // digest rounds
	HealRounds     int
	Retractions    int // admin unlikes issued
	Erasures       int // account erasure requests issued (first tries and retries)
	ErasuresAcked  int // erasure requests answered 200/202
	ErasedUsers    int // users whose erasure started somewhere
	EraseTicks     int // background eraser ticks
	EraseWrites    int // edge versions written by erasures
	ErasedRefusals int // writes refused because the user is erased
	LateEdges      int // edges of erased users that reached a job's region after it started (ErasureJob.Late, at the end)
}

// Failure is a broken invariant (or an unexpected error) of one seed.
type Failure struct {
	Seed uint64
	Step int
	Msg  string
	Test string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("sim seed %d, step %d: %s\nreplay: LIKES_SIM_SEED=%d go test ./sim -run '^%s$' -v",
		f.Seed, f.Step, f.Msg, f.Seed, f.Test)
}

// Knobs is the fault mix of a run (drawn from the seed).
type Knobs struct {
	Regions, Ranges, Partitions, Items, Users int

	// Action weights.
	WWrite, WStep, WSend, WDeliver, WClock, WPartition, WEtcd  int
	WPlanned, WUnplanned, WCrash, WRestart, WSync, WCheck, WAE int
	WRetract, WErase, WEraseTick                               int
	WCatchUp                                                   int // step a region's planned-move barrier

	PDrop, PDup, PReorder float64 // per delivery
	PLostReply            float64 // per accepted forwarded or local request
	PStaleIngress         float64 // the client goes to the previous owner
	PRandomIngress        float64 // the client goes to a random region
	MaxEvents, MaxCells   int     // batch limits
	AggMaxEvents          int     // aggregator window limit
	// RestartAdvance is how far the clock moves while a crashed region
	// restarts (0: the restart is instantaneous on the fake clock).
	RestartAdvance time.Duration
	// PUnplannedCrash and PUnplannedIsolate: what happens to the old owner in
	// an unplanned failover besides losing etcd.
	PUnplannedCrash, PUnplannedIsolate float64
	// EraseInline and EraseRate are the eraser's inline limit and per-tick
	// budget (small, so jobs outlive Start and meet faults); MaxErased bounds
	// how many users a run erases.
	EraseInline, EraseRate, MaxErased int
}

func drawKnobs(r *rand.Rand) Knobs {
	w := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	k := Knobs{
		Regions: 3, Ranges: 8, Partitions: 4, Items: 4, Users: 16,
		WWrite: w(25, 50), WStep: w(5, 20), WSend: w(8, 20), WDeliver: w(10, 30), WClock: w(3, 16),
		WPartition: w(1, 4), WEtcd: w(1, 3), WPlanned: w(0, 3), WUnplanned: w(0, 4),
		WCrash: w(0, 6), WRestart: w(1, 4), WSync: w(0, 3), WCheck: w(0, 2), WAE: w(0, 2),
		PDrop:          float64(r.IntN(4)) * 0.05,
		PDup:           float64(r.IntN(3)) * 0.05,
		PReorder:       float64(r.IntN(3)) * 0.15,
		PLostReply:     float64(r.IntN(3)) * 0.05,
		PStaleIngress:  0.1,
		PRandomIngress: 0.15,
		MaxEvents:      1 + r.IntN(12),
		MaxCells:       1 + r.IntN(12),
		AggMaxEvents:   1 + r.IntN(10),
	}
	if r.IntN(3) == 0 {
		k.RestartAdvance = time.Duration(r.IntN(2000)) * time.Millisecond
	}
	k.PUnplannedCrash = float64(r.IntN(3)) * 0.15
	k.PUnplannedIsolate = 0.3 + float64(r.IntN(3))*0.2
	// Retractions and erasures (drawn last, so the other knobs of a seed stay
	// as they were before these existed).
	k.WRetract = r.IntN(4)
	k.WErase = r.IntN(4)
	if k.WErase > 0 {
		k.WEraseTick = 1 + r.IntN(5)
	}
	k.EraseInline = 1 + r.IntN(4)
	k.EraseRate = 1 + r.IntN(4)
	k.MaxErased = 1 + r.IntN(4)
	k.WCatchUp = 1 + r.IntN(6)
	return k
}

// Timing of the simulated etcd (epoch package defaults).
const (
	leaseTTL = epoch.DefaultTTL
	margin   = epoch.DefaultMargin
	maxSkew  = epoch.DefaultMaxSkew
	idemTTL  = 48 * time.Hour
)

var (
	errUnavailable = errors.New("sim: owner unreachable (503)")
	errLostReply   = errors.New("sim: reply lost (outcome unknown)")
)

// Run runs one seed and returns what it exercised, or a *Failure.
func Run(opts Options) (st Stats, err error) {
	if opts.Steps == 0 {
		opts.Steps = 400
	}
	if opts.Test == "" {
		opts.Test = "TestSim"
	}
	s := newSim(opts)
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(*Failure)
			if !ok {
				f = &Failure{Seed: opts.Seed, Step: s.step, Msg: fmt.Sprintf("panic: %v\n%s", p, debug.Stack())}
			}
			f.Test = opts.Test
			err = f
		}
		s.closeAll()
		st = s.stats
	}()
	s.start()
	for s.step = 1; s.step <= opts.Steps; s.step++ {
		s.act()
	}
	s.step = opts.Steps + 1
	// Healing ships with production-sized batches; the schedule used small
	// ones to exercise partial batches.
	s.k.MaxEvents, s.k.MaxCells = max(s.k.MaxEvents, 256), max(s.k.MaxCells, 256)
	for _, r := range s.regions {
		for _, snd := range r.out {
			if snd != nil {
				snd.SetLimits(s.k.MaxEvents, s.k.MaxCells)
			}
		}
	}
	s.heal()
	s.checkFinal()
	return s.stats, nil
}

// pinRec is one epoch of a range (epoch = index+1 in sim.pins[g]).
type pinRec struct {
	pin     epoch.Pin
	planned bool
	from    string
	writes  int // writes and no-ops accepted under this epoch
}

type sim struct {
	opts  Options
	k     Knobs
	rng   *rand.Rand
	clk   *clock.Fake
	ctx   context.Context
	step  int
	stats Stats

	names   []string
	regions []*region
	items   []string
	users   []string
	usersOf [][]int   // users by range
	links   [][]*link // [from][to]
	nextMsg uint64

	pins     [][]pinRec // per range: every epoch so far
	maxEpoch []uint64   // per range: highest epoch a write was accepted under
	lastMove []int      // per range: step of the last move (0: never)

	edges    [][]edgeModel // [item][user]
	erasure  []eraseModel  // [user]
	keys     map[keyID]*keyModel
	requests []*request
	// lastApply is the decision of the most recent Store.Apply (set by recStore).
	lastApply *applied
}

type region struct {
	idx  int
	name string
	fs   *vfs.MemFS
	st   *pebblestore.Store // nil while down
	svc  *edge.Service
	aggs []*pipeline.Aggregator
	srv  *replication.Server
	// barrier is the region's planned-move barrier (stepped by the schedule).
	barrier *catchup.Barrier
	er      *edge.Eraser // stepped by hand (EraserConfig.Manual)
	ov      *overlay
	inc     int // incarnation: grows on every crash

	etcdUp bool
	view   []epoch.Pin
	proof  time.Time // last keepalive / table confirmation (zero: none)

	out []*replication.Sender // the shipping protocol per peer (nil for self)
	// written[item][user] is the newest version this region wrote (durability).
	written [][]crdt.Register
	// eraseErr is the last error of the eraser while healing.
	eraseErr error
}

func (r *region) down() bool { return r.st == nil }

func newSim(opts Options) *sim {
	rng := rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15))
	k := drawKnobs(rng)
	if opts.Fixed != nil {
		opts.Fixed(&k)
	}
	s := &sim{
		opts: opts, k: k, rng: rng,
		clk:  clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		ctx:  context.Background(),
		keys: map[keyID]*keyModel{},
	}
	for i := 0; i < k.Regions; i++ {
		s.names = append(s.names, fmt.Sprintf("r%d", i))
	}
	for i := 0; i < k.Items; i++ {
		s.items = append(s.items, fmt.Sprintf("i%d", i))
	}
	s.usersOf = make([][]int, k.Ranges)
	for i := 0; i < k.Users; i++ {
		s.users = append(s.users, fmt.Sprintf("u%02d", i))
		g := edge.RangeOf(s.users[i], k.Ranges)
		s.usersOf[g] = append(s.usersOf[g], i)
	}
	s.links = make([][]*link, k.Regions)
	for a := range s.links {
		s.links[a] = make([]*link, k.Regions)
		for b := range s.links[a] {
			if a != b {
				s.links[a][b] = &link{}
			}
		}
	}
	s.edges = make([][]edgeModel, k.Items)
	for i := range s.edges {
		s.edges[i] = make([]edgeModel, k.Users)
	}
	s.erasure = make([]eraseModel, k.Users)
	s.pins = make([][]pinRec, k.Ranges)
	s.maxEpoch = make([]uint64, k.Ranges)
	s.lastMove = make([]int, k.Ranges)
	for g := 0; g < k.Ranges; g++ {
		p := epoch.Pin{Range: uint32(g), Region: s.names[g%k.Regions], Epoch: 1}
		s.pins[g] = []pinRec{{pin: p}}
	}
	return s
}

func (s *sim) tracef(format string, args ...any) {
	if s.opts.Trace == nil {
		return
	}
	fmt.Fprintf(s.opts.Trace, "%4d t=%6d ", s.step, s.clk.Now().UnixMilli()%1_000_000)
	fmt.Fprintf(s.opts.Trace, format, args...)
	fmt.Fprintln(s.opts.Trace)
}

func (s *sim) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.tracef("FAIL: %s", msg)
	panic(&Failure{Seed: s.opts.Seed, Step: s.step, Msg: msg})
}

func (s *sim) must(err error, what string) {
	if err != nil {
		s.failf("%s: unexpected error: %v", what, err)
	}
}

func (s *sim) start() {
	for i, name := range s.names {
		r := &region{idx: i, name: name, fs: vfs.NewCrashableMem(), etcdUp: true}
		r.out = make([]*replication.Sender, len(s.names))
		r.written = make([][]crdt.Register, len(s.items))
		for j := range r.written {
			r.written[j] = make([]crdt.Register, len(s.users))
		}
		s.regions = append(s.regions, r)
		s.open(r)
	}
}

func (s *sim) current(g int) epoch.Pin { return s.pins[g][len(s.pins[g])-1].pin }

func (s *sim) globalPins() []epoch.Pin {
	out := make([]epoch.Pin, len(s.pins))
	for g := range s.pins {
		out[g] = s.current(g)
	}
	return out
}

// open (re)starts a region on its filesystem: store, service, aggregators,
// replication server; a fresh process re-registers with etcd if it can reach it.
func (s *sim) open(r *region) {
	st, err := pebblestore.Open(pebblestore.Options{
		Dir: "/db", FS: r.fs, Region: r.name, Partitions: s.k.Partitions, Clock: s.clk,
		CacheBytes: 1 << 20,
	})
	s.must(err, "open store "+r.name)
	r.st = st
	r.ov = newOverlay()
	rs := &recStore{Store: st, s: s, r: r}
	r.svc, err = edge.NewService(edge.ServiceConfig{
		Store: rs, Authority: &authority{s: s, r: r}, Overlay: r.ov, Clock: s.clk,
		Forwarder: forwarder{s: s, from: r.idx}, IdemTTL: idemTTL,
	})
	s.must(err, "new service")
	r.er, err = edge.NewEraser(s.ctx, edge.EraserConfig{
		Service: r.svc, Store: rs, Jobs: &recJobs{Store: st, s: s, r: r}, Clock: s.clk,
		Rate: s.k.EraseRate, Inline: s.k.EraseInline, Manual: true,
	})
	s.must(err, "new eraser")
	r.aggs = make([]*pipeline.Aggregator, s.k.Partitions)
	for p := range r.aggs {
		r.aggs[p], err = pipeline.NewAggregator(pipeline.Config{
			Region: r.name, Log: st, Cells: st, Clock: s.clk, MaxEvents: s.k.AggMaxEvents,
			Window: time.Second,
		}, uint32(p))
		s.must(err, "new aggregator")
	}
	var fencer *catchup.Fencer
	r.barrier, fencer = s.newBarrier(r)
	r.srv, err = replication.NewServer(replication.ServerConfig{Region: r.name, Partitions: s.k.Partitions, Sink: st,
		Fencer: fencer})
	s.must(err, "new server")
	for i := range r.out {
		if i != r.idx {
			r.out[i] = replication.NewSender(r.name, s.k.MaxEvents, s.k.MaxCells)
		}
	}
	r.view = make([]epoch.Pin, s.k.Ranges)
	r.proof = time.Time{}
	if r.etcdUp {
		r.view = s.globalPins()
		r.proof = s.clk.Now()
	}
}

func (s *sim) closeAll() {
	for _, r := range s.regions {
		if r.er != nil {
			_ = r.er.Close()
		}
		if r.st != nil {
			_ = r.st.Close()
			r.st = nil
		}
	}
}

// act runs one scheduled action.
func (s *sim) act() {
	s.stats.Steps++
	k := &s.k
	ws := []int{k.WWrite, k.WStep, k.WSend, k.WDeliver, k.WClock, k.WPartition, k.WEtcd,
		k.WPlanned, k.WUnplanned, k.WCrash, k.WRestart, k.WSync, k.WCheck, k.WAE,
		k.WRetract, k.WErase, k.WEraseTick, k.WCatchUp}
	total := 0
	for _, w := range ws {
		total += w
	}
	x := s.rng.IntN(total)
	i := 0
	for ; x >= ws[i]; i++ {
		x -= ws[i]
	}
	switch i {
	case 0:
		s.clientRequest()
	case 1:
		s.aggStep()
	case 2:
		s.sendRandom()
	case 3:
		s.deliverRandom()
	case 4:
		s.advanceClock()
	case 5:
		s.togglePartition()
	case 6:
		s.toggleEtcd()
	case 7:
		s.plannedMove()
	case 8:
		s.unplannedMove()
	case 9:
		s.crashRandom()
	case 10:
		s.restartRandom()
	case 11:
		s.syncRandom()
	case 12:
		s.checkHonestyAll()
	case 13:
		s.antiEntropy()
	case 14:
		s.retract()
	case 15:
		s.eraseRequest()
	case 16:
		s.eraseTick()
	case 17:
		s.catchUpStep()
	}
}

func (s *sim) pick(n int) int { return s.rng.IntN(n) }

func (s *sim) upRegion() *region {
	var up []*region
	for _, r := range s.regions {
		if !r.down() {
			up = append(up, r)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[s.pick(len(up))]
}

// refreshEtcd gives every live, etcd-connected region the current pin table
// and a fresh proof (keepalives and table confirmations succeed).
func (s *sim) refreshEtcd() {
	for _, r := range s.regions {
		if !r.down() && r.etcdUp {
			r.view = s.globalPins()
			r.proof = s.clk.Now()
		}
	}
}

func (s *sim) advanceClock() {
	var d time.Duration
	switch x := s.rng.IntN(100); {
	case x < 50:
		d = time.Duration(1+s.rng.IntN(300)) * time.Millisecond
	case x < 85:
		d = time.Duration(300+s.rng.IntN(1700)) * time.Millisecond
	default:
		d = time.Duration(2000+s.rng.IntN(4000)) * time.Millisecond
	}
	s.clk.Advance(d)
	s.refreshEtcd()
	s.tracef("clock +%v", d)
}

func (s *sim) aggStep() {
	r := s.upRegion()
	if r == nil {
		return
	}
	p := s.pick(len(r.aggs))
	n, caught, err := r.aggs[p].Step(s.ctx)
	s.must(err, fmt.Sprintf("aggregator %s/%d step", r.name, p))
	s.stats.AggSteps++
	s.tracef("agg %s/%d: %d events, caughtUp=%v", r.name, p, n, caught)
}

func (s *sim) togglePartition() {
	a, b := s.pick(len(s.regions)), s.pick(len(s.regions))
	if s.rng.IntN(2) == 0 {
		for x := range s.links { // heal a cut more often than cutting anew
			for y, l := range s.links[x] {
				if l != nil && l.cut {
					a, b = x, y
				}
			}
		}
	}
	if a == b {
		return
	}
	l := s.links[a][b]
	l.cut = !l.cut
	if l.cut {
		s.stats.Partitions++
	}
	if s.rng.IntN(2) == 0 { // symmetric
		s.links[b][a].cut = l.cut
	}
	s.tracef("link %s→%s cut=%v", s.names[a], s.names[b], l.cut)
}

func (s *sim) toggleEtcd() {
	r := s.regions[s.pick(len(s.regions))]
	for _, c := range s.regions {
		if !c.etcdUp && s.rng.IntN(2) == 0 {
			r = c // heal a cut more often than cutting anew
			break
		}
	}
	r.etcdUp = !r.etcdUp
	if r.etcdUp {
		if !r.down() {
			r.view = s.globalPins()
			r.proof = s.clk.Now()
		}
	} else {
		s.stats.EtcdCuts++
	}
	s.tracef("etcd %s up=%v", r.name, r.etcdUp)
}

func (s *sim) syncRandom() {
	r := s.upRegion()
	if r == nil {
		return
	}
	// The OS (or a later unrelated write) makes everything written so far durable.
	s.must(r.st.DB().LogData(nil, pebble.Sync), "sync")
	s.stats.Syncs++
	s.tracef("sync %s", r.name)
}

// chooseRange prefers recently moved ranges, so chains of moves are common.
func (s *sim) chooseRange() int {
	if s.rng.IntN(2) == 0 {
		best, bestStep := -1, 0
		for g, st := range s.lastMove {
			if st > bestStep {
				best, bestStep = g, st
			}
		}
		if best >= 0 {
			return best
		}
	}
	return s.pick(s.k.Ranges)
}

func (s *sim) movePin(g int, to string, notBefore time.Time, planned bool) epoch.Pin {
	cur := s.current(g)
	p := epoch.Pin{Range: uint32(g), Region: to, Epoch: cur.Epoch + 1, NotBefore: notBefore,
		CatchUp: planned, From: cur.Region}
	s.pins[g] = append(s.pins[g], pinRec{pin: p, planned: planned, from: cur.Region})
	s.lastMove[g] = s.step
	// Regions connected to etcd see the watch event at once.
	for _, r := range s.regions {
		if !r.down() && r.etcdUp {
			r.view[g] = p
		}
	}
	return p
}

func (s *sim) idx(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

// plannedMove drains a range to another region: the pin moves with CatchUp
// set, so neither region writes the range until the new owner's barrier
// (catchUpStep) has applied every live region's log and the old owner's, and
// settles it.
func (s *sim) plannedMove() {
	g := s.chooseRange()
	cur := s.current(g)
	from := s.regions[s.idx(cur.Region)]
	to := s.regions[(from.idx+1+s.pick(len(s.regions)-1))%len(s.regions)]
	if from.down() || to.down() || !from.etcdUp || !to.etcdUp || s.links[from.idx][to.idx].cut || s.links[to.idx][from.idx].cut {
		return // an operator drain needs both regions and the link
	}
	// A drain may not start the new epoch before the current one could start:
	// an unplanned failover just before leaves a cut-off zombie of an older
	// epoch writing until its proof ages out.
	nb := s.clk.Now()
	if cur.NotBefore.After(nb) {
		nb = cur.NotBefore
	}
	s.movePin(g, to.name, nb, true)
	s.stats.PlannedMoves++
	s.tracef("planned move range %d %s→%s epoch %d", g, from.name, to.name, s.current(g).Epoch)
}

// unplannedMove fails a range over to another region while the old owner is
// cut off from etcd (and maybe isolated or crashed): the new owner starts at
// notBefore without the old owner's unreplicated tail.
func (s *sim) unplannedMove() {
	g := s.chooseRange()
	if s.rng.IntN(5) < 3 {
		// Continue a chain: a range whose current epoch came from an
		// unplanned failover and has taken writes.
		var cands []int
		for r, ps := range s.pins {
			if last := ps[len(ps)-1]; len(ps) > 1 && !last.planned && last.writes > 0 {
				cands = append(cands, r)
			}
		}
		if len(cands) > 0 {
			g = cands[s.pick(len(cands))]
		}
	}
	cur := s.current(g)
	if s.clk.Now().Before(cur.NotBefore) && s.rng.IntN(5) != 0 {
		return // mostly let an epoch start before failing it over again
	}
	from := s.regions[s.idx(cur.Region)]
	to := s.regions[(from.idx+1+s.pick(len(s.regions)-1))%len(s.regions)]
	if to.down() || !to.etcdUp {
		return // the controller moves ranges to live regions only
	}
	// The old owner is cut off from etcd (its proof ages out), or only from
	// its peers (it sees the move and stops at once), or dies.
	mode := "etcd"
	switch x := s.rng.Float64(); {
	case x < s.k.PUnplannedCrash:
		mode = "crash"
	case x < s.k.PUnplannedCrash+0.3:
		mode = "peers"
	}
	if mode == "etcd" {
		from.etcdUp = false
		s.stats.EtcdCuts++
	}
	if mode == "peers" || s.rng.Float64() < s.k.PUnplannedIsolate {
		for b := range s.regions {
			if b != from.idx && (mode == "peers" || s.rng.IntN(4) != 0) {
				s.links[from.idx][b].cut = true
				s.stats.Partitions++
			}
		}
	}
	p := s.movePin(g, to.name, s.clk.Now().Add(leaseTTL+maxSkew), false)
	s.stats.UnplannedMoves++
	s.tracef("unplanned move range %d %s→%s epoch %d notBefore +%v (old owner: %s)", g, from.name, to.name, p.Epoch, leaseTTL+maxSkew, mode)
	if mode == "crash" && !from.down() {
		s.crash(from)
	}
}

func (s *sim) crashRandom() {
	r := s.upRegion()
	if r == nil {
		return
	}
	s.crash(r)
	if s.rng.IntN(2) == 0 {
		s.restart(r) // a supervisor restarts the process at once
	}
}

// crash kills a region: its filesystem keeps exactly what was synced. With
// probability 1/2 the WAL was synced just before (nothing unsynced is lost).
func (s *sim) crash(r *region) { s.crashSynced(r, s.rng.IntN(2) == 0) }

func (s *sim) crashSynced(r *region, synced bool) {
	if synced {
		s.must(r.st.DB().LogData(nil, pebble.Sync), "sync before crash")
	}
	clone := r.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = r.er.Close()
	_ = r.st.Close()
	r.st, r.svc, r.er, r.aggs, r.srv, r.ov = nil, nil, nil, nil, nil, nil
	r.fs = clone
	r.inc++
	s.stats.Crashes++
	s.tracef("crash %s (wal synced first: %v)", r.name, synced)
}

func (s *sim) restartRandom() {
	var down []*region
	for _, r := range s.regions {
		if r.down() {
			down = append(down, r)
		}
	}
	if len(down) == 0 {
		return
	}
	s.restart(down[s.pick(len(down))])
}

func (s *sim) restart(r *region) {
	if s.k.RestartAdvance > 0 {
		s.clk.Advance(s.k.RestartAdvance)
		s.refreshEtcd()
	}
	s.open(r)
	s.tracef("restart %s", r.name)
	// Acknowledged writes are synced: none may be lost.
	for i := range s.items {
		for u := range s.users {
			w := r.written[i][u]
			if w == (crdt.Register{}) {
				continue
			}
			e, _, err := r.st.Edge(s.ctx, s.items[i], s.users[u])
			s.must(err, "read edge")
			if e.Register().Less(w) {
				s.failf("durability: %s lost write %v/%v of (%s,%s) in a crash: has %v/%v",
					r.name, w.Version, w.State, s.items[i], s.users[u], e.Version, e.State)
			}
		}
	}
}

// heal ends every fault, delivers everything in flight and ships and steps
// until nothing changes.
func (s *sim) heal() {
	s.tracef("heal")
	for _, r := range s.regions {
		if r.down() {
			s.restart(r)
		}
		r.etcdUp = true
	}
	for a := range s.links {
		for b := range s.links[a] {
			if l := s.links[a][b]; l != nil {
				l.cut = false
			}
		}
	}
	s.refreshEtcd()
	// Every current epoch starts (the erasers' writes need their owners).
	var nb time.Time
	for g := range s.pins {
		if p := s.current(g); p.NotBefore.After(nb) {
			nb = p.NotBefore
		}
	}
	if now := s.clk.Now(); nb.After(now) {
		s.clk.Advance(nb.Sub(now) + time.Millisecond)
		s.refreshEtcd()
	}
	for {
		any := false
		for a := range s.links {
			for b := range s.links[a] {
				if l := s.links[a][b]; l != nil && len(l.q) > 0 {
					m := l.q[0]
					l.q = l.q[1:]
					s.handle(m)
					any = true
				}
			}
		}
		if !any {
			break
		}
	}
	s.quiesce()
	// Let watermarks pass every event, then propagate them.
	s.clk.Advance(2 * time.Second)
	s.refreshEtcd()
	s.quiesce()
	for g := range s.pins {
		if p := s.current(g); p.CatchUp {
			s.failf("range %d: the planned move to %s (epoch %d) never settled after healing", g, p.Region, p.Epoch)
		}
	}
}

// quiesce steps every aggregator to its head and ships every link directly
// until a round changes nothing.
func (s *sim) quiesce() {
	for round := 0; round < 500; round++ {
		s.stats.HealRounds++
		progress := false
		for _, r := range s.regions {
			for p, a := range r.aggs {
				for i := 0; ; i++ {
					if i > 100000 {
						s.failf("aggregator %s/%d never caught up", r.name, p)
					}
					before := a.Stats().Windows
					n, caught, err := a.Step(s.ctx)
					s.must(err, "aggregator step (heal)")
					if n > 0 || a.Stats().Windows != before {
						progress = true
					}
					if caught {
						break
					}
				}
			}
		}
		for _, r := range s.regions {
			if !r.down() && r.barrier.Step(s.ctx) {
				progress = true
			}
		}
		if s.runErasers() {
			progress = true
		}
		for _, a := range s.regions {
			for _, b := range s.regions {
				if a != b && s.shipDirect(a, b) {
					progress = true
				}
			}
		}
		if !progress {
			return
		}
	}
	s.failf("no quiescence after 500 heal rounds")
}

// clientRequest issues one like/unlike (new, retried, stale-retried, or
// reusing a key for another request) or a retraction.
func (s *sim) clientRequest() {
	s.stats.Requests++
	var req *request
	x := s.rng.IntN(100)
	switch {
	case x < 15 && len(s.requests) > 0:
		req = s.retryCandidate()
	case x < 25 && len(s.requests) > 0:
		if req = s.staleRetryCandidate(); req != nil {
			s.stats.StaleRetries++
		}
	case x < 33 && len(s.requests) > 0:
		req = s.conflictRequest()
	}
	if req == nil {
		i, u := s.pick(len(s.items)), s.pickUser()
		target := crdt.Liked
		if s.edges[i][u].last == crdt.Liked {
			target = crdt.Unliked
		}
		if s.rng.IntN(4) == 0 {
			target = crdt.State(s.rng.IntN(2))
		}
		req = &request{id: len(s.requests), item: i, user: u, target: target,
			key: fmt.Sprintf("k%d", len(s.requests))}
		s.requests = append(s.requests, req)
	}
	s.send(req)
}

// pickUser prefers users of the most recently moved range, so that writes
// meet failovers (tails, first touches, corrections).
func (s *sim) pickUser() int {
	if s.rng.IntN(2) == 0 {
		best, bestStep := -1, 0
		for g, st := range s.lastMove {
			if st > bestStep {
				best, bestStep = g, st
			}
		}
		if best >= 0 && len(s.usersOf[best]) > 0 {
			us := s.usersOf[best]
			return us[s.pick(len(us))]
		}
	}
	return s.pick(len(s.users))
}

// retryCandidate is an earlier request, preferring ones whose outcome the
// client does not know.
func (s *sim) retryCandidate() *request {
	for try := 0; try < 4; try++ {
		r := s.requests[s.pick(len(s.requests))]
		if !r.acked || try == 3 {
			return r
		}
	}
	return nil
}

// staleRetryCandidate is deep-dive 1: an earlier like of an edge that is now
// unliked, retried with its old key.
func (s *sim) staleRetryCandidate() *request {
	var cands []*request
	for _, r := range s.requests {
		if r.target == crdt.Liked && !r.conflict && s.edges[r.item][r.user].last == crdt.Unliked {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[s.pick(len(cands))]
}

// conflictRequest reuses an earlier request's key for another request of the
// same user (another item or the opposite target).
func (s *sim) conflictRequest() *request {
	old := s.requests[s.pick(len(s.requests))]
	nr := &request{id: len(s.requests), item: old.item, user: old.user, target: 1 - old.target, key: old.key, conflict: true}
	if s.rng.IntN(2) == 0 {
		nr.item = (old.item + 1 + s.pick(len(s.items)-1)) % len(s.items)
		nr.target = old.target
	}
	s.requests = append(s.requests, nr)
	return nr
}

// ingress is where the client's request lands: normally the owner (geo-DNS),
// sometimes the previous owner (stale DNS) or any region.
func (s *sim) ingress(user int) *region {
	g := int(edge.RangeOf(s.users[user], s.k.Ranges))
	name := s.current(g).Region
	stale := s.k.PStaleIngress
	if s.clk.Now().Before(s.current(g).NotBefore) {
		stale = 0.6 // a failover in progress: clients still reach the old owner
	}
	switch x := s.rng.Float64(); {
	case x < stale && len(s.pins[g]) > 1:
		name = s.pins[g][len(s.pins[g])-2].pin.Region
	case x < stale+s.k.PRandomIngress:
		name = s.names[s.pick(len(s.names))]
	}
	return s.regions[s.idx(name)]
}

func (s *sim) send(req *request) {
	in := s.ingress(req.user)
	if in.down() {
		s.stats.Refused++
		s.tracef("req %d → %s: region down", req.id, in.name)
		return
	}
	s.lastApply = nil
	item, user := s.items[req.item], s.users[req.user]
	ans, err := in.svc.Set(s.ctx, user, item, req.target, req.key)
	ap := s.lastApply
	s.tracef("req %d %s %s/%s %v key=%s via %s: ans=%+v err=%v apply=%s", req.id, opName(req.target), item, user,
		req.target, req.key, in.name, ans, err, ap)
	if err == nil && s.rng.Float64() < s.k.PLostReply {
		s.stats.LostReplies++
		err = errLostReply
	}
	switch {
	case err == nil:
		req.acked = true
		if ap == nil {
			s.failf("req %d answered without any store apply", req.id)
		}
		if ap.d.Action != edge.ActReplay && ans.Liked != (req.target == crdt.Liked) {
			s.failf("req %d: fresh answer liked=%v for target %v", req.id, ans.Liked, req.target)
		}
		if ap.d.Action != edge.ActReplay {
			liked, lerr := in.svc.Liked(s.ctx, user, item)
			s.must(lerr, "liked")
			if liked != (req.target == crdt.Liked) {
				s.failf("read-your-writes: %s shows liked=%v right after req %d set %v", in.name, liked, req.id, req.target)
			}
		}
	case errors.Is(err, edge.ErrKeyConflict):
		// The recording store checked that the key was known with another request.
		s.stats.Conflicts++
	case errors.Is(err, edge.ErrNotOwner), errors.Is(err, edge.ErrFailClosed), errors.Is(err, errUnavailable):
		s.stats.Refused++
	case errors.Is(err, edge.ErrErased):
		// The recording store checked that the user's erasure had started.
	case errors.Is(err, errLostReply):
	default:
		s.failf("req %d: unexpected error %v", req.id, err)
	}
}

// retract is the abuse system's unlike of an edge (mostly a liked one, often
// of a user of the most recently moved range) at whichever region the admin
// call reaches; it forwards like a user's write, and the model takes it as one
// more accepted write whose target is UNLIKED.
func (s *sim) retract() {
	i, u := s.pick(len(s.items)), s.pickUser()
	if s.rng.IntN(3) != 0 {
		moved := -1
		if s.rng.IntN(2) == 0 {
			for g, st := range s.lastMove {
				if st > 0 && (moved < 0 || st > s.lastMove[moved]) {
					moved = g
				}
			}
		}
		var liked [][2]int
		for ii := range s.edges {
			for uu := range s.edges[ii] {
				if s.edges[ii][uu].last == crdt.Liked &&
					(moved < 0 || int(edge.RangeOf(s.users[uu], s.k.Ranges)) == moved) {
					liked = append(liked, [2]int{ii, uu})
				}
			}
		}
		if len(liked) > 0 {
			iu := liked[s.pick(len(liked))]
			i, u = iu[0], iu[1]
		}
	}
	s.stats.Retractions++
	in := s.ingress(u)
	if in.down() {
		return
	}
	s.lastApply = nil
	_, err := in.svc.Retract(s.ctx, s.items[i], s.users[u])
	s.tracef("retract %s/%s via %s: err=%v apply=%s", s.items[i], s.users[u], in.name, err, s.lastApply)
	switch {
	case err == nil, s.refusal(err), errors.Is(err, edge.ErrErased):
	default:
		s.failf("retract: unexpected error %v", err)
	}
}

func opName(t crdt.State) string {
	if t == crdt.Liked {
		return "like"
	}
	return "unlike"
}

// authority is a region's edge.Authority: epoch.Decide over the region's view
// of the pin table and its proof time.
type authority struct {
	s *sim
	r *region
}

func (a *authority) Authorize(_ context.Context, user string) (uint64, error) {
	g := edge.RangeOf(user, a.s.k.Ranges)
	return epoch.Decide(a.r.view[g], a.r.name, a.s.clk.Now(), a.r.proof, leaseTTL, margin)
}

// forwarder carries a write to the owner's ApplyLocal over the simulated
// network (synchronously), which may be cut or lose the reply.
type forwarder struct {
	s    *sim
	from int
}

func (f forwarder) Forward(ctx context.Context, owner string, req edge.Request) (edge.ForwardResult, error) {
	s := f.s
	to := s.idx(owner)
	if to < 0 || to == f.from || s.links[f.from][to].cut || s.regions[to].down() {
		return edge.ForwardResult{}, errUnavailable
	}
	s.stats.Forwarded++
	res, err := s.regions[to].svc.ApplyLocal(ctx, req)
	if err == nil && s.links[to][f.from].cut {
		s.stats.LostReplies++
		if req.Kind == edge.KindErasure {
			s.erasure[s.userIdx(req.User)].lost++
		}
		return edge.ForwardResult{}, errLostReply
	}
	return res, err
}

// overlay is the in-memory session overlay (lost on a crash).
type overlay struct{ m map[string]edge.OverlayEntry }

func newOverlay() *overlay { return &overlay{m: map[string]edge.OverlayEntry{}} }

func (o *overlay) Put(_ context.Context, user, item string, e edge.OverlayEntry) error {
	k := user + "\x00" + item
	if old, ok := o.m[k]; ok && e.Version.Less(old.Version) {
		return nil
	}
	o.m[k] = e
	return nil
}

func (o *overlay) Get(_ context.Context, user, item string) (edge.OverlayEntry, bool, error) {
	e, ok := o.m[user+"\x00"+item]
	return e, ok, nil
}

func (a *applied) String() string {
	if a == nil {
		return "-"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%s e%d act=%d", a.req.User, a.region, a.req.Epoch, a.d.Action)
	if a.d.Action == edge.ActWrite {
		fmt.Fprintf(&b, " v=%v %v", a.d.Edge.Version, a.d.Edge.State)
	}
	return b.String()
}
