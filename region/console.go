package region

import (
	"context"
	"errors"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/internal/console"
)

// errClosed is what the console reads of a closed region.
var errClosed = errors.New("region: closed")

// viewing runs fn unless the region is closed, and keeps Close waiting until
// it returns (the console polls from its own goroutine, which may race the
// process's shutdown).
func (r *Region) viewing(fn func() error) error {
	r.consoleMu.RLock()
	defer r.consoleMu.RUnlock()
	if r.consoleClosed {
		return errClosed
	}
	return fn()
}

// ConsoleView describes this region for the operator console
// (internal/console): lease health, watermarks, staleness, aggregator,
// relay and replication lag, the pins it owns. Live and Draining are the
// caller's to fill in from etcd (ConsolePins); a region without a cluster is
// live. Errors are reported in the view, never returned.
func (r *Region) ConsoleView(ctx context.Context) console.RegionView {
	v := console.RegionView{Name: r.cfg.Name, Detailed: true, Live: true, LeaseOK: true, LeaseAgeMs: -1, Engines: r.cfg.Engines.String()}
	err := r.viewing(func() error {
		now := r.cfg.Clock.Now()
		wms, err := r.Backend.Watermarks(ctx)
		if err != nil {
			return err
		}
		v.Watermarks = make(map[string]time.Time, len(wms))
		for reg, t := range wms {
			v.Watermarks[reg] = time.UnixMilli(t).UTC()
		}
		v.AsOf = time.UnixMilli(wms.AsOf(r.regions)).UTC()
		v.StalenessMs = now.Sub(v.AsOf).Milliseconds()
		if v.AggregatorLag, err = r.aggregatorLag(ctx); err != nil {
			return err
		}
		if r.cfg.Engines.Log == LogKafka {
			lag, err := (&admin{r: r}).relayLag(ctx)
			if err != nil {
				return err
			}
			v.RelayLag = &lag
		}
		c := r.cluster
		if c == nil {
			return nil
		}
		v.LeaseAgeMs = now.Sub(c.keepalive.LastKeepalive()).Milliseconds()
		if err := c.authority.LeaseProof(); err != nil {
			v.LeaseOK, v.LeaseError = false, err.Error()
		}
		for _, p := range c.authority.Pins() {
			if p.Region == r.cfg.Name {
				v.PinsOwned++
			}
		}
		v.CatchingUp = len(c.authority.CatchingUp())
		for _, p := range c.shipperStats() {
			lagMs := int64(-1)
			if p.Watermark > 0 {
				lagMs = now.Sub(time.UnixMilli(p.Watermark)).Milliseconds()
			}
			v.Peers = append(v.Peers, console.PeerView{Region: p.Region, Active: p.Active, Handshaken: p.Handshaken,
				LagEvents: p.LagEvents, LagMs: lagMs, Pushes: p.Pushes})
		}
		return nil
	})
	if err != nil {
		v.Error = err.Error()
	}
	return v
}

// ConsolePins is the pin table as this region sees it (its Authority, fed
// by the etcd watch) with each range's home, and the regions whose lease
// exists in etcd. A region without a cluster has no pins (nil, nil, nil).
func (r *Region) ConsolePins(ctx context.Context) (pins []console.PinView, live map[string]epoch.RegionInfo, err error) {
	err = r.viewing(func() error {
		c := r.cluster
		if c == nil {
			return nil
		}
		var homes []string
		if c.liveDir != nil {
			var err error
			if homes, err = c.liveDir.Homes(ctx); err != nil {
				return err
			}
			regs, err := c.liveDir.Regions(ctx)
			if err != nil {
				return err
			}
			live = make(map[string]epoch.RegionInfo, len(regs))
			for _, ri := range regs {
				live[ri.Name] = ri
			}
		}
		for _, p := range c.authority.Pins() {
			pins = append(pins, console.PinView{Range: p.Range, Region: p.Region, Epoch: p.Epoch, Home: epoch.Home(p.Range, homes),
				CatchingUp: p.CatchUp, NotBefore: p.NotBefore, From: p.From})
		}
		return nil
	})
	return pins, live, err
}
