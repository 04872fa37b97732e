package sim

import (
	"context"
	"errors"
	"fmt"

	"github.com/likes-dev/likes/catchup"
	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/replication"
)

// The planned-move barrier runs as in production: each region's
// catchup.Barrier is stepped by the schedule (and while healing) through the
// simulated etcd (its pin view, the live regions, Settle) and network (the
// Heads call reaches the asked region's replication.Server and its
// catchup.Fencer only over live links). When a pin settles, the new owner must
// hold every edge version the old owner wrote under its epochs: the tail the
// planned move promised.

var errEtcdDown = errors.New("sim: etcd unreachable")

// simPins is region r's view of the pin table.
type simPins struct{ r *region }

func (p simPins) CatchingUp() []epoch.Pin {
	var out []epoch.Pin
	for _, pin := range p.r.view {
		if pin.Region == p.r.name && pin.CatchUp {
			out = append(out, pin)
		}
	}
	return out
}

func (p simPins) Seen(rng uint32, ep uint64) bool {
	return int(rng) < len(p.r.view) && p.r.view[rng].Epoch >= ep
}

// simDir is the pin directory as region r reaches it.
type simDir struct {
	s *sim
	r *region
}

// Regions lists the regions up and connected to etcd (a region cut off from
// etcd counts as dead at once: its lease would expire within the TTL, and the
// barrier may stop waiting for a dead region that is not the old owner).
func (d simDir) Regions(context.Context) ([]epoch.RegionInfo, error) {
	if !d.r.etcdUp {
		return nil, errEtcdDown
	}
	var out []epoch.RegionInfo
	for _, r := range d.s.regions {
		if !r.down() && r.etcdUp {
			out = append(out, epoch.RegionInfo{Name: r.name, GRPC: r.name})
		}
	}
	return out, nil
}

func (d simDir) Settle(_ context.Context, rng uint32, ep uint64) (epoch.Pin, error) {
	s := d.s
	if !d.r.etcdUp {
		return epoch.Pin{}, errEtcdDown
	}
	g := int(rng)
	cur := s.current(g)
	if cur.Epoch != ep {
		return cur, fmt.Errorf("%w: range %d is at epoch %d, not %d", epoch.ErrEpochChanged, rng, cur.Epoch, ep)
	}
	if !cur.CatchUp {
		return cur, nil
	}
	s.checkTail(g, cur)
	cur.CatchUp = false
	s.pins[g][len(s.pins[g])-1].pin = cur
	for _, r := range s.regions {
		if !r.down() && r.etcdUp {
			r.view[g] = cur
		}
	}
	s.stats.Settled++
	s.tracef("settle range %d epoch %d at %s", g, ep, cur.Region)
	return cur, nil
}

// simAsker carries a barrier's Heads call from region from.
type simAsker struct {
	s    *sim
	from int
}

func (a simAsker) Heads(ctx context.Context, peer replication.Peer, req replication.HeadsRequest) (replication.HeadsResponse, error) {
	s := a.s
	to := s.idx(peer.Region)
	if to < 0 || to == a.from || s.regions[to].down() || s.links[a.from][to].cut || s.links[to][a.from].cut {
		return replication.HeadsResponse{}, errUnavailable
	}
	return s.regions[to].srv.Heads(ctx, req)
}

// newBarrier makes region r's barrier and fencer for its current incarnation.
func (s *sim) newBarrier(r *region) (*catchup.Barrier, *catchup.Fencer) {
	b, err := catchup.NewBarrier(catchup.Config{
		Self: r.name, Partitions: s.k.Partitions, Pins: simPins{r}, Dir: simDir{s, r}, Cursors: r.st,
		Asker: simAsker{s, r.idx}, Clock: s.clk,
		Resolve: func(name string) (string, bool) {
			i := s.idx(name)
			return name, i >= 0 && !s.regions[i].down()
		},
	})
	s.must(err, "new barrier")
	svc := r.svc
	return b, &catchup.Fencer{Pins: simPins{r}, Log: catchup.SourceHeads(r.st),
		Writes: func() catchup.Quiescer { return svc }}
}

// catchUpStep steps the barrier of a random live region.
func (s *sim) catchUpStep() {
	r := s.regions[s.pick(len(s.regions))]
	if r.down() {
		return
	}
	r.barrier.Step(s.ctx)
}

// checkTail: when range g settles at epoch cur.Epoch, its new owner holds,
// for every edge of the range, a version at least as new as the one the old
// owner (cur.From) holds, if the old owner wrote that version itself.
func (s *sim) checkTail(g int, cur epoch.Pin) {
	from, to := s.regions[s.idx(cur.From)], s.regions[s.idx(cur.Region)]
	if from.down() {
		return // its store is closed; the barrier had its heads before it died
	}
	for _, item := range s.items {
		for _, u := range s.usersOf[g] {
			user := s.users[u]
			old, ok, err := from.st.Edge(s.ctx, item, user)
			s.must(err, "edge (tail check)")
			if !ok {
				continue
			}
			v := old.Register().Version
			if v.Epoch == 0 || int(v.Epoch) > len(s.pins[g]) || s.pins[g][v.Epoch-1].pin.Region != from.name {
				continue // not the old owner's own write
			}
			nu, ok, err := to.st.Edge(s.ctx, item, user)
			s.must(err, "edge (tail check)")
			if !ok || nu.Register().Version.Less(v) {
				s.failf("planned move of range %d to %s (epoch %d) settled without the old owner's tail: %s holds %s/%s at %v, %s at %v (found %v)",
					g, to.name, cur.Epoch, from.name, item, user, v, to.name, nu.Register().Version, ok)
			}
		}
	}
}
