package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/replication"
	"github.com/likes-dev/likes/store/pebblestore"
)

// SteadyOptions configures a long-running steady workload (RunSteady): a
// constant like/unlike load for many simulated days on the real stores,
// services, aggregators, replication Senders and Servers and retention
// Retainers, on one fake clock.
type SteadyOptions struct {
	Seed       uint64
	Regions    int // default 3
	Partitions int // default 4
	Items      int // default 40
	Users      int // default 120
	// Days of load, and requests per simulated hour over the cluster.
	Days            int
	RequestsPerHour int
	// Retention is every region's horizon; 0 runs without retention (the
	// reference the measurement compares with).
	Retention time.Duration
	// Down, when set, takes region Down.Region down from day Down.From for
	// Down.Days days (its peers keep taking load).
	Down *SteadyDown
	// Lose, when set, loses region Lose.Region's data folder at the start of
	// day Lose.From: it restarts on an empty one and rebuilds from its peers
	// (--bootstrap-from-peers); Lose.Days is unused.
	Lose *SteadyDown
	// Restore, when set, backs region Restore.Region up (a Pebble checkpoint)
	// at the end of day Restore.Backup, loses its folder at the start of day
	// Restore.Lose and restores the backup, which then rebuilds from its peers.
	Restore *SteadyRestore
	// FS returns a region's filesystem and folder (default: a fresh MemFS, "/db").
	FS func(region string) (vfs.FS, string)
	// CountsOnly skips the daily check that every region holds every edge as
	// the model says (the counts are still checked): for measurements.
	CountsOnly bool
	// Day, when set, is called at the end of every day, after a full
	// convergence check, with every live region's store.
	Day func(day int, stores map[string]*pebblestore.Store) error
}

// SteadyRestore is a backup and a restore of one region in a steady run.
type SteadyRestore struct {
	Region       int
	Backup, Lose int
}

// SteadyDown is an outage of one region in a steady run.
type SteadyDown struct {
	Region     int
	From, Days int
}

// SteadyReport is what a steady run saw.
type SteadyReport struct {
	// Keys[day][region][kind] are the key counts at the end of each day.
	Keys     []map[string]map[string]int
	Requests int
	Writes   int
	// Truncated counts log events deleted by retention, over regions.
	Truncated uint64
	// Snapshots counts peers that caught up from a snapshot (behind the
	// horizon, or rebuilding).
	Snapshots int
	// Rebuilds counts regions that lost their data folder; Refused the
	// requests refused meanwhile (503).
	Rebuilds, Refused int
}

type steadyRegion struct {
	name  string
	fs    vfs.FS
	dir   string
	st    *pebblestore.Store
	svc   *edge.Service
	aggs  []*pipeline.Aggregator
	srv   *replication.Server
	ret   *pebblestore.Retainer
	out   []*replication.Sender
	acked []time.Time // per peer: when it last acknowledged a push
}

type steady struct {
	o     SteadyOptions
	rng   *rand.Rand
	clk   *clock.Fake
	ctx   context.Context
	regs  []*steadyRegion
	model map[[2]int]crdt.State
	rep   SteadyReport
	n     int
}

type ownerAuthority struct {
	s   *steady
	idx int
}

func (a ownerAuthority) Authorize(_ context.Context, user string) (uint64, error) {
	if int(edge.RangeOf(user, 64))%len(a.s.regs) != a.idx {
		return 0, edge.ErrNotOwner
	}
	return 1, nil
}

// RunSteady runs a steady workload and checks, at the end of every day, that
// every region converges to counts equal to the number of LIKED edges.
func RunSteady(o SteadyOptions) (SteadyReport, error) {
	if o.Regions == 0 {
		o.Regions = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.Items == 0 {
		o.Items = 40
	}
	if o.Users == 0 {
		o.Users = 120
	}
	if o.RequestsPerHour <= 0 || o.Days <= 0 {
		return SteadyReport{}, errors.New("sim: steady run needs Days and RequestsPerHour")
	}
	s := &steady{
		o: o, rng: rand.New(rand.NewPCG(o.Seed, 7)), ctx: context.Background(),
		clk:   clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		model: map[[2]int]crdt.State{},
	}
	defer s.close()
	for i := 0; i < o.Regions; i++ {
		r := &steadyRegion{name: fmt.Sprintf("r%d", i)}
		if o.FS != nil {
			r.fs, r.dir = o.FS(r.name)
		} else {
			r.fs, r.dir = vfs.NewMem(), "/db"
		}
		s.regs = append(s.regs, r)
	}
	for i := range s.regs {
		if err := s.open(i); err != nil {
			return s.rep, err
		}
	}
	step := time.Hour / time.Duration(o.RequestsPerHour)
	for day := 1; day <= o.Days; day++ {
		if d := o.Down; d != nil && day == d.From {
			s.closeRegion(d.Region)
		}
		if d := o.Restore; d != nil && day == d.Lose {
			if err := s.restore(d.Region); err != nil {
				return s.rep, err
			}
		}
		if d := o.Lose; d != nil && day == d.From {
			if err := s.lose(d.Region); err != nil {
				return s.rep, err
			}
		}
		if d := o.Down; d != nil && day == d.From+d.Days {
			if err := s.open(d.Region); err != nil {
				return s.rep, err
			}
		}
		for h := 0; h < 24; h++ {
			for q := 0; q < o.RequestsPerHour; q++ {
				s.clk.Advance(step)
				if err := s.request(); err != nil {
					return s.rep, fmt.Errorf("day %d: %w", day, err)
				}
			}
			if err := s.round(); err != nil {
				return s.rep, fmt.Errorf("day %d hour %d: %w", day, h, err)
			}
		}
		if err := s.converge(); err != nil {
			return s.rep, fmt.Errorf("day %d: %w", day, err)
		}
		if d := o.Restore; d != nil && day == d.Backup {
			if err := s.regs[d.Region].st.Checkpoint("/backup"); err != nil {
				return s.rep, err
			}
		}
		keys := map[string]map[string]int{}
		stores := map[string]*pebblestore.Store{}
		for _, r := range s.regs {
			if r.st == nil {
				continue
			}
			kc, err := r.st.KeyCounts()
			if err != nil {
				return s.rep, err
			}
			keys[r.name] = kc
			stores[r.name] = r.st
		}
		s.rep.Keys = append(s.rep.Keys, keys)
		if o.Day != nil {
			if err := o.Day(day, stores); err != nil {
				return s.rep, fmt.Errorf("day %d: %w", day, err)
			}
		}
	}
	return s.rep, nil
}

func (s *steady) open(i int) error {
	r := s.regs[i]
	st, err := pebblestore.Open(pebblestore.Options{Dir: r.dir, FS: r.fs, Region: r.name, Partitions: s.o.Partitions,
		Clock: s.clk, CacheBytes: 1 << 20})
	if err != nil {
		return err
	}
	r.st = st
	r.svc, err = edge.NewService(edge.ServiceConfig{Store: st, Authority: ownerAuthority{s: s, idx: i},
		Overlay: newOverlay(), Clock: s.clk})
	if err != nil {
		return err
	}
	r.aggs = nil
	for p := 0; p < s.o.Partitions; p++ {
		a, err := pipeline.NewAggregator(pipeline.Config{Region: r.name, Log: st, Cells: st, Clock: s.clk}, uint32(p))
		if err != nil {
			return err
		}
		r.aggs = append(r.aggs, a)
	}
	r.srv, err = replication.NewServer(replication.ServerConfig{Region: r.name, Partitions: s.o.Partitions, Sink: st})
	if err != nil {
		return err
	}
	r.out = make([]*replication.Sender, len(s.regs))
	r.acked = make([]time.Time, len(s.regs))
	for j := range s.regs {
		if j != i {
			r.out[j] = replication.NewSender(r.name, 256, 256)
		}
	}
	if s.o.Retention > 0 {
		r.ret, err = pebblestore.NewManualRetainer(pebblestore.RetainerConfig{
			Store: st, Clock: s.clk, Retention: s.o.Retention, Scan: 1 << 16,
			Peers: func() []pebblestore.PeerCursor { return s.holding(r) },
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// lose replaces region i's data folder by an empty one and starts its
// rebuild from every peer.
func (s *steady) lose(i int) error {
	s.closeRegion(i)
	r := s.regs[i]
	r.fs = vfs.NewMem()
	if err := s.open(i); err != nil {
		return err
	}
	var peers []string
	for j, p := range s.regs {
		if j != i {
			peers = append(peers, p.name)
		}
	}
	s.rep.Rebuilds++
	return r.st.MarkRebuild(peers)
}

// restore replaces region i's folder by its backup (/backup on the old
// filesystem), folds its log and starts its rebuild from every peer.
func (s *steady) restore(i int) error {
	s.closeRegion(i)
	r := s.regs[i]
	old := r.fs
	r.fs = vfs.NewMem()
	if err := r.fs.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	names, err := old.List("/backup")
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := vfs.CopyAcrossFS(old, old.PathJoin("/backup", n), r.fs, r.fs.PathJoin(r.dir, n)); err != nil {
			return err
		}
	}
	if err := s.open(i); err != nil {
		return err
	}
	if err := s.aggregate(r); err != nil {
		return err
	}
	var peers []string
	for j, p := range s.regs {
		if j != i {
			peers = append(peers, p.name)
		}
	}
	s.rep.Rebuilds++
	return r.st.MarkRebuild(peers)
}

// holding is the region's peers that hold truncation back: those that
// acknowledged within the horizon (as region.PeerCursors does from the
// shipper's stats).
func (s *steady) holding(r *steadyRegion) []pebblestore.PeerCursor {
	var out []pebblestore.PeerCursor
	for j, snd := range r.out {
		if snd == nil || !snd.Handshaken() || s.clk.Now().Sub(r.acked[j]) > s.o.Retention {
			continue
		}
		out = append(out, pebblestore.PeerCursor{Region: s.regs[j].name, Cursor: snd.State().Acked})
	}
	return out
}

func (s *steady) closeRegion(i int) {
	r := s.regs[i]
	if r.st != nil {
		_ = r.st.Close()
	}
	r.st, r.svc, r.aggs, r.srv, r.out = nil, nil, nil, nil, nil
}

func (s *steady) close() {
	for i := range s.regs {
		s.closeRegion(i)
	}
}

// request toggles one random edge at its owner, with a fresh idempotency key.
func (s *steady) request() error {
	i, u := s.rng.IntN(s.o.Items), s.rng.IntN(s.o.Users)
	user, item := fmt.Sprintf("u%03d", u), fmt.Sprintf("i%03d", i)
	owner := s.regs[int(edge.RangeOf(user, 64))%len(s.regs)]
	if owner.st == nil {
		return nil // down: the client gets a 503 and gives up
	}
	target := crdt.Liked
	if s.model[[2]int{i, u}] == crdt.Liked {
		target = crdt.Unliked
	}
	s.n++
	s.rep.Requests++
	if _, err := owner.svc.Set(s.ctx, user, item, target, fmt.Sprintf("k%d", s.n)); err != nil {
		if errors.Is(err, edge.ErrStorageUnavailable) && len(owner.st.Rebuilding()) > 0 {
			s.rep.Refused++
			return nil // rebuilding: 503, the client retries later
		}
		return fmt.Errorf("set %s/%s: %w", item, user, err)
	}
	s.model[[2]int{i, u}] = target
	s.rep.Writes++
	return nil
}

// round steps every aggregator to its head, ships every link and runs a
// retention round per region.
func (s *steady) round() error {
	for _, r := range s.regs {
		if r.st == nil {
			continue
		}
		if err := s.aggregate(r); err != nil {
			return err
		}
	}
	for _, a := range s.regs {
		for j, b := range s.regs {
			if a == b || a.st == nil || b.st == nil {
				continue
			}
			if _, err := s.ship(a, j); err != nil {
				return err
			}
		}
	}
	for _, r := range s.regs {
		if r.st == nil || r.ret == nil {
			continue
		}
		st, err := r.ret.Step(s.ctx)
		if err != nil {
			return fmt.Errorf("retention %s: %w", r.name, err)
		}
		s.rep.Truncated += st.LogDeleted
	}
	return nil
}

func (s *steady) aggregate(r *steadyRegion) error {
	for p, a := range r.aggs {
		for i := 0; ; i++ {
			if i > 1e6 {
				return fmt.Errorf("aggregator %s/%d never caught up", r.name, p)
			}
			_, caught, err := a.Step(s.ctx)
			if err != nil && errors.Is(err, pipeline.ErrTruncated) && i < 4 {
				continue // a rebuild raised the floor under its position: it reloads
			}
			if err != nil {
				return fmt.Errorf("aggregator %s/%d: %w", r.name, p, err)
			}
			if caught {
				break
			}
		}
	}
	return nil
}

// ship pushes a's log and cells to peer j until nothing is new; it reports
// whether anything was pushed.
func (s *steady) ship(a *steadyRegion, j int) (bool, error) {
	b := s.regs[j]
	snd := a.out[j]
	any := false
	for i := 0; i < 1e6; i++ {
		if snd.Behind() {
			if _, err := snd.Snapshot(s.ctx, a.st, b.srv.Snapshot); err != nil {
				return any, fmt.Errorf("snapshot %s→%s: %w", a.name, b.name, err)
			}
			s.rep.Snapshots++
			a.acked[j] = s.clk.Now()
			any = true
			continue
		}
		bt, send, _, err := snd.Next(s.ctx, a.st)
		if err != nil && errors.Is(err, replication.ErrPeerAhead) && len(a.st.Rebuilding()) > 0 {
			return any, nil // a's log is not raised past b's cursor until b's rebuild snapshot
		}
		if err != nil && snd.Behind() {
			// b was away longer than a's horizon: a snapshot, then the log.
			if _, err := snd.Snapshot(s.ctx, a.st, b.srv.Snapshot); err != nil {
				return any, fmt.Errorf("snapshot %s→%s: %w", a.name, b.name, err)
			}
			s.rep.Snapshots++
			a.acked[j] = s.clk.Now()
			any = true
			continue
		}
		if err != nil {
			return any, fmt.Errorf("ship %s→%s: %w", a.name, b.name, err)
		}
		if !send {
			return any, nil
		}
		cur, err := b.srv.Push(s.ctx, bt)
		if err != nil && replication.IsRebuildWanted(err) {
			snd.RebuildWanted(b.name)
			continue
		}
		if err != nil {
			return any, fmt.Errorf("push %s→%s: %w", a.name, b.name, err)
		}
		snd.Acked(bt, cur)
		a.acked[j] = s.clk.Now()
		any = true
	}
	return any, fmt.Errorf("ship %s→%s never caught up", a.name, b.name)
}

// converge lets watermarks pass, ships until nothing changes, and checks that
// every live region counts every item exactly.
func (s *steady) converge() error {
	s.clk.Advance(2 * time.Second)
	for round := 0; ; round++ {
		if round > 100 {
			return errors.New("no convergence after 100 rounds")
		}
		progress := false
		for _, r := range s.regs {
			if r.st != nil {
				if err := s.aggregate(r); err != nil {
					return err
				}
			}
		}
		for _, a := range s.regs {
			for j, b := range s.regs {
				if a == b || a.st == nil || b.st == nil {
					continue
				}
				p, err := s.ship(a, j)
				if err != nil {
					return err
				}
				progress = progress || p
			}
		}
		if !progress {
			break
		}
	}
	want := make([]int64, s.o.Items)
	for k, st := range s.model {
		if st == crdt.Liked {
			want[k[0]]++
		}
	}
	for _, r := range s.regs {
		if r.st == nil {
			continue
		}
		for k, want := range s.model {
			if s.o.CountsOnly {
				break
			}
			item, user := fmt.Sprintf("i%03d", k[0]), fmt.Sprintf("u%03d", k[1])
			e, _, err := r.st.Edge(s.ctx, item, user)
			if err != nil {
				return err
			}
			if e.State != want {
				return fmt.Errorf("%s holds edge %s/%s %v, want %v", r.name, item, user, e.State, want)
			}
		}
		for i := range want {
			item := fmt.Sprintf("i%03d", i)
			n, err := r.st.Count(s.ctx, item)
			if err != nil {
				return err
			}
			if n != want[i] {
				return fmt.Errorf("%s counts %s = %d, want %d LIKED edges", r.name, item, n, want[i])
			}
		}
	}
	return nil
}
