package region

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/likes-dev/likes/replication"
)

// ErrNotQuiescent is wrapped by a heal's refusal: some stream into or out of
// this region has not caught up, so its edges and cells disagree for a
// reason that is not an error, and healing would write a wrong count.
var ErrNotQuiescent = errors.New("region: not quiescent")

// inboundWait bounds how long a heal waits for the inbound streams to reach
// the heads the peers answered (a window, a push and the clock skew, normally).
const inboundWait = 5 * time.Second

// inboundCall bounds one Heads call to a peer.
const inboundCall = 2 * time.Second

// inboundQuiescent proves every inbound replication stream caught up: it asks
// each other region (configured, live in etcd, or gossiped) for its own-log
// heads, then waits, up to wait, until this region's cursor from it has
// reached them and its watermark as recorded here has passed the time they
// were read (plus the maximum clock skew: the peer's cells here cover
// everything below those heads). A peer it cannot ask, or one still behind
// at the deadline, refuses the heal: its edges may be only partly here.
func (a *admin) inboundQuiescent(ctx context.Context, wait time.Duration) error {
	c := a.r.cluster
	if c == nil || c.transport == nil || c.store == nil {
		return nil // no replication: nothing flows in
	}
	self := a.r.cfg.Name
	names := map[string]string{} // region → fallback gRPC address (its lease registration)
	for _, n := range a.r.cfg.Cluster.Regions {
		names[n] = ""
	}
	if c.liveDir != nil {
		rctx, cancel := context.WithTimeout(ctx, inboundCall)
		live, err := c.liveDir.Regions(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: cannot list the live regions: %w", ErrNotQuiescent, err)
		}
		for _, ri := range live {
			names[ri.Name] = ri.GRPC
		}
	}
	for _, p := range c.shipperStats() {
		if p.Active {
			if _, ok := names[p.Region]; !ok {
				names[p.Region] = ""
			}
		}
	}
	delete(names, self)
	order := make([]string, 0, len(names))
	for n := range names {
		order = append(order, n)
	}
	sort.Strings(order)

	clk := a.r.cfg.Clock
	ecfg, err := a.r.cfg.Cluster.Epoch.WithDefaults()
	if err != nil {
		return err
	}
	skew := ecfg.MaxSkew
	parts := c.store.Partitions()
	type target struct {
		heads []uint64
		after int64 // watermark (ms) the peer's cells here must reach
	}
	targets := map[string]target{}
	for _, n := range order {
		addr, ok := c.resolve(n)
		if !ok {
			addr = names[n]
		}
		if addr == "" {
			return fmt.Errorf("%w: inbound replication from %s cannot be checked: no address (is it down? heal once it is back, or once its tail has replicated)", ErrNotQuiescent, n)
		}
		hctx, cancel := context.WithTimeout(ctx, inboundCall)
		resp, err := c.transport.Heads(hctx, replication.Peer{Region: n, GRPCAddr: addr},
			replication.HeadsRequest{From: self, Partitions: parts})
		cancel()
		if err != nil {
			return fmt.Errorf("%w: inbound replication from %s cannot be checked: asking its log heads: %w", ErrNotQuiescent, n, err)
		}
		targets[n] = target{heads: resp.Log, after: clk.Now().Add(skew).UnixMilli()}
	}
	deadline := clk.Now().Add(wait)
	tick := clk.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		wms, err := a.r.Backend.Watermarks(ctx)
		if err != nil {
			return err
		}
		var behind []error
		for _, n := range order {
			t := targets[n]
			cur, err := c.store.Cursor(ctx, n)
			if err != nil {
				return fmt.Errorf("cursor from %s: %w", n, err)
			}
			if lag := lagBehind(cur.Log, t.heads); lag > 0 {
				behind = append(behind, fmt.Errorf("inbound replication from %s is %d events behind its log heads", n, lag))
			} else if wm := wms[n]; wm < t.after {
				behind = append(behind, fmt.Errorf("inbound replication from %s: its cells here are complete through %s, not yet through its heads (%s)",
					n, time.UnixMilli(wm).UTC().Format(time.RFC3339Nano), time.UnixMilli(t.after).UTC().Format(time.RFC3339Nano)))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if !clk.Now().Before(deadline) {
			return fmt.Errorf("%w: %w (waited %v)", ErrNotQuiescent, errors.Join(behind...), wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNotQuiescent, errors.Join(append(behind, ctx.Err())...))
		case <-tick.C():
		}
	}
}

// lagBehind is Σ over partitions of heads[p] − cursor[p] where positive.
func lagBehind(cursor []uint64, heads []uint64) uint64 {
	var lag uint64
	for p, h := range heads {
		var c uint64
		if p < len(cursor) {
			c = cursor[p]
		}
		if h > c {
			lag += h - c
		}
	}
	return lag
}
