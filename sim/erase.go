package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/store/pebblestore"
)

// eraseModel is what the simulation knows about one user's account erasure.
type eraseModel struct {
	requests int      // erasure requests issued (first tries and retries)
	acked    string   // the region whose answer (200/202) the client received ("" none)
	started  bool     // some region stored a running job of its own for the user
	origins  []string // regions that started (or took over) a job of their own
	writes   int      // erasure writes that tombstoned an edge (ActWrite)
	lost     int      // forwarded erasure writes whose answer was lost
}

// recJobs is the region's erasure job store as its Eraser sees it: it notes
// every job a region starts (or takes over) as its own.
type recJobs struct {
	*pebblestore.Store
	s *sim
	r *region
}

func (j *recJobs) PutErasure(ctx context.Context, job edge.ErasureJob) error {
	err := j.Store.PutErasure(ctx, job)
	if err == nil && job.State == edge.ErasureRunning && !job.Remote {
		em := &j.s.erasure[j.s.userIdx(job.User)]
		if !em.started || !slices.Contains(em.origins, j.r.name) {
			j.s.tracef("erasure of %s: job started at %s", job.User, j.r.name)
		}
		em.started = true
		if !slices.Contains(em.origins, j.r.name) {
			em.origins = append(em.origins, j.r.name)
		}
	}
	return err
}

// pickEraseUser chooses whose account to erase: a retry of an earlier
// erasure, or a new user (preferring the most recently moved range, so that
// erasures meet failovers), at most MaxErased users per run.
func (s *sim) pickEraseUser() int {
	var asked []int
	for u, em := range s.erasure {
		if em.requests > 0 {
			asked = append(asked, u)
		}
	}
	if len(asked) > 0 && (len(asked) >= s.k.MaxErased || s.rng.IntN(3) == 0) {
		return asked[s.pick(len(asked))]
	}
	for try := 0; try < 4; try++ {
		if u := s.pickUser(); s.erasure[u].requests == 0 {
			return u
		}
	}
	if len(asked) > 0 {
		return asked[s.pick(len(asked))]
	}
	return s.pick(len(s.users))
}

// eraseRequest is a client's account erasure request: it lands on some
// region (as a like would); a region that is not the owner of the user's
// range per its view relays it to the owner it names (503 when that owner is
// unreachable, outcome unknown when the relay's answer is lost).
func (s *sim) eraseRequest() {
	u := s.pickEraseUser()
	em := &s.erasure[u]
	em.requests++
	s.stats.Erasures++
	user := s.users[u]
	in := s.ingress(u)
	if in.down() {
		s.stats.Refused++
		s.tracef("erase %s → %s: region down", user, in.name)
		return
	}
	via := in.name
	j, err := in.er.Start(s.ctx, user)
	answered := in
	var owned edge.Owned
	if errors.Is(err, edge.ErrNotOwner) && errors.As(err, &owned) {
		o := s.idx(owned.OwnerRegion())
		switch {
		case o < 0 || o == in.idx:
			s.failf("erase %s at %s: not owner, naming owner %q", user, in.name, owned.OwnerRegion())
		case s.links[in.idx][o].cut || s.regions[o].down():
			err = errUnavailable
		default:
			answered = s.regions[o]
			via += "→" + answered.name
			j, err = answered.er.Start(s.ctx, user)
			if (err == nil || j.User != "") && s.links[o][in.idx].cut {
				s.stats.LostReplies++
				j, err = edge.ErasureJob{}, errLostReply
			}
		}
	}
	s.tracef("erase %s via %s: job=%+v err=%v", user, via, j, err)
	// The API answers 200/202 with the job whenever one was stored, even when
	// its inline step failed (the background loop retries it).
	if j.User != "" || err == nil {
		if j.User != user {
			s.failf("erase %s: answered with job %+v", user, j)
		}
		if !em.started {
			s.failf("erase %s: %s acknowledged a job no region stored", user, answered.name)
		}
		if em.acked == "" {
			em.acked = answered.name
		}
		s.stats.ErasuresAcked++
	}
	if err != nil && !s.refusal(err) {
		s.failf("erase %s: unexpected error %v", user, err)
	}
}

// refusal reports whether err is an expected refusal of a write path call:
// not the owner, fail closed, the owner unreachable, or a lost reply.
func (s *sim) refusal(err error) bool {
	return errors.Is(err, edge.ErrNotOwner) || errors.Is(err, edge.ErrFailClosed) ||
		errors.Is(err, errUnavailable) || errors.Is(err, errLostReply)
}

// eraseTick is one tick of a region's background eraser loop.
func (s *sim) eraseTick() {
	r := s.upRegion()
	if r == nil {
		return
	}
	s.stats.EraseTicks++
	err := r.er.RunOnce(s.ctx)
	s.tracef("eraser %s tick: err=%v", r.name, err)
	if err != nil && !s.refusal(err) {
		s.failf("eraser %s: unexpected error %v", r.name, err)
	}
}

// jobsOf lists a region's erasure jobs (for progress detection while healing).
func (s *sim) jobsOf(r *region) string {
	js, err := r.st.Erasures(s.ctx)
	s.must(err, "erasures")
	return fmt.Sprint(js)
}

// runErasers runs one tick of every region's eraser; it reports whether any
// job changed and remembers the last error per region.
func (s *sim) runErasers() bool {
	if !s.anyErasure() {
		return false
	}
	progress := false
	for _, r := range s.regions {
		before := s.jobsOf(r)
		err := r.er.RunOnce(s.ctx)
		r.eraseErr = err
		if s.jobsOf(r) != before {
			progress = true
		}
	}
	return progress
}

func (s *sim) anyErasure() bool {
	for _, em := range s.erasure {
		if em.started {
			return true
		}
	}
	return false
}

// checkErasures runs after healing: for every user whose erasure started
// anywhere (every acknowledged one did), every existing edge is ERASED at
// every region (checkFinal holds the registers identical everywhere), every
// region holds the user's erasure mark and no job is still running, and the
// jobs' reports are sane: no job removed more likes than it erased edges, and
// together the user's jobs report at most the tombstoning writes that happened
// and at least every edge of the user that exists (less the forwarded
// erasures whose answers were lost: the eraser cannot tell those were its own).
func (s *sim) checkErasures() {
	for u, user := range s.users {
		em := s.erasure[u]
		if !em.started {
			continue
		}
		s.stats.ErasedUsers++
		exist := 0
		for _, item := range s.items {
			e, _, err := s.regions[0].st.Edge(s.ctx, item, user)
			s.must(err, "edge")
			if e.Version == (crdt.Version{}) {
				continue
			}
			exist++
			if e.State != crdt.Erased {
				s.failf("erasure: edge %s/%s of erased user %s (acknowledged by %q, jobs at %v) is %v/%v after healing, not ERASED%s",
					item, user, user, em.acked, em.origins, e.Version, e.State, s.eventReport(item, user))
			}
		}
		erased := 0
		for _, r := range s.regions {
			j, ok, err := r.st.Erasure(s.ctx, user)
			s.must(err, "erasure job")
			switch {
			case !ok:
				s.failf("erasure: %s holds no erasure mark of %s after healing (jobs at %v)", r.name, user, em.origins)
			case j.State != edge.ErasureDone:
				s.failf("erasure: %s's job of %s is still %s after healing (%+v, last eraser error: %v)", r.name, user, j.State, j, r.eraseErr)
			case j.Remote:
				continue
			case j.Unliked < 0 || j.Unliked > j.Edges:
				s.failf("erasure: %s's job of %s reports likesRemoved=%d of edgesErased=%d", r.name, user, j.Unliked, j.Edges)
			}
			erased += j.Edges
			s.stats.LateEdges += j.Late
		}
		if erased < exist-em.lost || erased > em.writes {
			s.failf("erasure: the jobs of %s (at %v) report %d edges erased in all; %d edges of the user exist, %d erasure writes tombstoned one, %d forwarded erasures lost their answer",
				user, em.origins, erased, exist, em.writes, em.lost)
		}
	}
}

// eventReport lists every logged event of one edge, in every region's log.
func (s *sim) eventReport(item, user string) string {
	logs := s.readLogs()
	out := ""
	for ri := range logs {
		for p, evs := range logs[ri] {
			for _, ev := range evs {
				if ev.User == user && (ev.Item == item || ev.Item == "") {
					out += fmt.Sprintf("\n    %s/%d@%d t=%d %s %s v=%v %v delta=%+d", s.names[ri], p, ev.Pos, ev.EventTime,
						ev.Kind, ev.Item, ev.Version, ev.State, ev.Delta)
				}
			}
		}
	}
	return out
}
