package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// A graceful stop is a planned event (issue 11). Handoff, called after Drain
// and before the HTTP server shuts down, moves every range this region owns to
// the next live, non-draining region in the preference order as a planned move
// (CatchUp: the new owner applies this region's whole log through the
// catch-up barrier before it writes, so no write is overtaken and no branch
// correction arises), waits until every new owner has settled, and then until
// the shipper has delivered the region's log and cells to every reachable
// peer. Only then does Close revoke the lease: the controller finds nothing of
// the region's to fail over. The ranges come back by failback
// (Cluster.FailbackAfter) once the region runs again.
//
// Why hand off rather than keep the lease through a short restart: a lease
// kept past the process's end makes every write to its ranges fail for the
// whole restart and, when the region never returns, ends in an unplanned
// failover after the TTL, with its window. A hand-off costs each range one
// short catch-up (writes answer 503 with Retry-After meanwhile) and leaves
// nothing behind when the region never returns.
//
// Safety when the stop is cut short (the timeout, a second signal): a range
// already moved waits, closed, for its new owner's barrier, which needs this
// region's Heads answer; it settles when the region runs again, or an operator
// settles it by hand (likectl pins settle). A range not moved yet fails over,
// unplanned, when the lease is revoked, as before.

// HandoffReport is what a hand-off did.
type HandoffReport struct {
	Moved   int           // ranges moved to other regions
	Settled int           // of those, settled by their new owners before the end
	Kept    int           // ranges kept (no live region to take them)
	Flushed []string      // peers that acknowledged the region's whole log and cells
	Behind  []string      // reachable peers still behind at the end
	Took    time.Duration // from the start to the end of the hand-off
}

// errHandoff prefixes hand-off failures.
var errHandoff = errors.New("region: hand-off")

// Handoff hands this region's ranges off and flushes its shipper (see above),
// within ctx's deadline. A region without peers has nothing to do.
func (r *Region) Handoff(ctx context.Context) (HandoffReport, error) {
	start := time.Now()
	var rep HandoffReport
	c := r.cluster
	if c == nil || c.liveDir == nil || c.grpcSrv == nil {
		return rep, nil
	}
	r.Drain()
	if !c.lastNode() {
		// Other nodes of the region serve on: its ranges stay, and its
		// shipper runs (or is elected) there.
		r.log.Info("graceful stop: other nodes of the region serve on; nothing to hand off", "nodes", c.nodes.Live())
		rep.Took = time.Since(start)
		return rep, nil
	}
	self := r.cfg.Name
	live, err := c.liveDir.Regions(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: list live regions: %w", errHandoff, err)
	}
	// Only home and active regions take a hand-off (not a joining one, nor
	// one being retired), as for a failover.
	states, err := c.liveDir.RegistryStates(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: read the region registry: %w", errHandoff, err)
	}
	if states != nil {
		live = slices.DeleteFunc(live, func(ri epoch.RegionInfo) bool { return !states[ri.Name].Target() })
	}
	target := handoffTarget(self, c.pref, live)
	pins, err := c.liveDir.Pins(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: read pins: %w", errHandoff, err)
	}
	var moved []epoch.Pin
	for _, p := range pins {
		if p.Region != self {
			continue
		}
		if target == "" {
			rep.Kept++
			continue
		}
		np, err := c.liveDir.Move(ctx, p.Range, p.Epoch, target, c.ecfg.NotBefore(r.cfg.Clock.Now()), etcdepoch.Planned())
		if errors.Is(err, epoch.ErrEpochChanged) {
			continue // moved meanwhile by someone else
		}
		if err != nil {
			return rep, fmt.Errorf("%w: move range %d to %s: %w", errHandoff, p.Range, target, err)
		}
		moved = append(moved, np)
	}
	rep.Moved = len(moved)
	if rep.Kept > 0 {
		r.log.Warn("graceful stop: no live region to hand ranges to; they fail over when the lease ends", "ranges", rep.Kept)
	} else if rep.Moved > 0 {
		r.log.Info("graceful stop: ranges handed off as planned moves; waiting for the new owners to catch up", "ranges", rep.Moved, "to", target)
	}
	// This region keeps answering Heads and shipping while the new owners
	// catch up on its log.
	err = pollUntil(ctx, 100*time.Millisecond, func() (bool, error) {
		rep.Settled = 0
		all, err := c.liveDir.Pins(ctx)
		if err != nil {
			return false, nil // etcd may blink; the deadline decides
		}
		cur := map[uint32]epoch.Pin{}
		for _, p := range all {
			cur[p.Range] = p
		}
		for _, m := range moved {
			if p := cur[m.Range]; p.Epoch != m.Epoch || !p.CatchUp {
				rep.Settled++
			}
		}
		return rep.Settled == len(moved), nil
	})
	if err != nil {
		rep.Took = time.Since(start)
		return rep, fmt.Errorf("%w: %d of %d moved ranges settled: %w", errHandoff, rep.Settled, rep.Moved, err)
	}
	err = r.flush(ctx, &rep)
	rep.Took = time.Since(start)
	return rep, err
}

// flush waits until the aggregators have folded the whole log and every
// active peer has acknowledged every event and cell change.
func (r *Region) flush(ctx context.Context, rep *HandoffReport) error {
	return pollUntil(ctx, 50*time.Millisecond, func() (bool, error) {
		rep.Flushed, rep.Behind = nil, nil
		lag, err := r.aggregatorLag(ctx)
		if err != nil || lag > 0 {
			return false, nil
		}
		for _, p := range r.cluster.shipperStats() {
			if !p.Active {
				continue
			}
			if p.Handshaken && p.LagEvents == 0 && p.CellsCaughtUp {
				rep.Flushed = append(rep.Flushed, p.Region)
			} else {
				rep.Behind = append(rep.Behind, p.Region)
			}
		}
		return len(rep.Behind) == 0, nil
	})
}

// handoffTarget is the first live, non-draining region after self in the
// preference order (wrapping), or else any such region by name; "" if none.
func handoffTarget(self string, pref []string, live []epoch.RegionInfo) string {
	ok := map[string]bool{}
	var names []string
	for _, ri := range live {
		if ri.Name != self && !ri.Draining {
			ok[ri.Name] = true
			names = append(names, ri.Name)
		}
	}
	at := slices.Index(pref, self)
	for i := 1; i <= len(pref); i++ {
		if r := pref[(at+i+len(pref))%len(pref)]; ok[r] {
			return r
		}
	}
	slices.Sort(names)
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

// pollUntil calls cond every interval until it reports done or fails, or ctx
// ends (then ctx's error).
func pollUntil(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := cond()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
