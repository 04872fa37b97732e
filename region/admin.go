package region

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/store/pebblestore"
)

var _ api.Admin = (*admin)(nil)

// admin implements the operator endpoints of a region.
// The mismatch gauge is the background reconciler's (reconciler.go): an
// operator's run, of one item or of all, answers its own report.
type admin struct {
	r      *Region
	healed prometheus.Counter
}

func newAdmin(r *Region) *admin {
	a := &admin{
		r: r,
		healed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "likes_reconcile_healed_total",
			Help: "Healing events appended by reconciliation.",
		}),
	}
	r.Registry.MustRegister(a.healed)
	return a
}

// Status is what GET /v1/admin/status answers.
type Status struct {
	Region           string            `json:"region"`
	Watermarks       map[string]string `json:"watermarks"`
	AsOf             string            `json:"asOf"`
	AggregatorLag    uint64            `json:"aggregatorLagEvents"`
	RelayLag         *uint64           `json:"relayLagEvents,omitempty"`
	Engines          string            `json:"engines"`
	Partitions       int               `json:"partitions"`
	Peers            any               `json:"replication,omitempty"`
	LastKeepaliveAgo string            `json:"lastKeepaliveAgo,omitempty"`
	PinsOwned        int               `json:"pinsOwned,omitempty"`
	// PinsCatchingUp are owned ranges of planned moves still waiting for the
	// other regions' logs (their writes answer 503 until then).
	PinsCatchingUp int `json:"pinsCatchingUp,omitempty"`
}

// Status implements api.Admin.
func (a *admin) Status(ctx context.Context) (any, error) {
	wms, err := a.r.Backend.Watermarks(ctx)
	if err != nil {
		return nil, err
	}
	lag, err := a.r.aggregatorLag(ctx)
	if err != nil {
		return nil, err
	}
	st := Status{Region: a.r.cfg.Name, Watermarks: map[string]string{}, AggregatorLag: lag, Partitions: a.r.Backend.Partitions()}
	for reg, t := range wms {
		st.Watermarks[reg] = time.UnixMilli(t).UTC().Format(time.RFC3339Nano)
	}
	st.AsOf = time.UnixMilli(wms.AsOf(a.r.regions)).UTC().Format(time.RFC3339Nano)
	st.Engines = a.r.cfg.Engines.String()
	if a.r.cfg.Engines.Log == LogKafka {
		lag, err := a.relayLag(ctx)
		if err != nil {
			return nil, err
		}
		st.RelayLag = &lag
	}
	if c := a.r.cluster; c != nil {
		st.Peers = c.shipperStats()
		st.LastKeepaliveAgo = a.r.cfg.Clock.Now().Sub(c.keepalive.LastKeepalive()).Round(time.Millisecond).String()
		for _, p := range c.authority.Pins() {
			if p.Region == a.r.cfg.Name {
				st.PinsOwned++
			}
		}
		st.PinsCatchingUp = len(c.authority.CatchingUp())
	}
	return st, nil
}

// Recount is one item's reconciliation (the same on every store).
type Recount = pebblestore.Recount

// ReconcileReport is what POST /v1/admin/reconcile answers.
type ReconcileReport struct {
	Region     string    `json:"region"`
	Items      int       `json:"itemsChecked"`
	Mismatched []Recount `json:"mismatched"`
	Healed     int       `json:"healed"`
	Truncated  bool      `json:"truncated,omitempty"`
}

// maxReconcileItems bounds one reconciliation request.
const maxReconcileItems = 1_000_000

// Reconcile implements api.Admin. Healing needs a quiescent region: its own
// aggregators caught up, every outbound stream caught up, and every inbound
// stream at the heads its sender answers (inboundQuiescent), checked before
// and after the recount.
func (a *admin) Reconcile(ctx context.Context, item string, heal bool) (any, error) {
	if heal {
		if err := a.quiescent(ctx); err != nil {
			return nil, err
		}
	}
	rep := ReconcileReport{Region: a.r.cfg.Name, Mismatched: []Recount{}}
	check := func(it string) error {
		rc, err := a.r.recount(ctx, it)
		if err != nil {
			return err
		}
		rep.Items++
		if rc.Mismatch != 0 {
			rep.Mismatched = append(rep.Mismatched, rc)
		}
		return nil
	}
	if item != "" {
		if err := check(item); err != nil {
			return nil, err
		}
	} else {
		after := ""
		for rep.Items < maxReconcileItems {
			items, err := a.r.Backend.Items(ctx, after, 1000)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				if err := check(it); err != nil {
					return nil, err
				}
			}
			if len(items) < 1000 {
				break
			}
			after = items[len(items)-1]
		}
		rep.Truncated = rep.Items >= maxReconcileItems
	}
	sort.Slice(rep.Mismatched, func(i, j int) bool { return rep.Mismatched[i].Item < rep.Mismatched[j].Item })
	if heal && len(rep.Mismatched) > 0 {
		if err := a.quiescent(ctx); err != nil {
			return nil, err
		}
		for i, rc := range rep.Mismatched {
			if err := a.r.Backend.Heal(ctx, rc.Item, rc.Mismatch); err != nil {
				return nil, err
			}
			rep.Mismatched[i].Healed = true
			rep.Healed++
			a.healed.Inc()
		}
	}
	return rep, nil
}

// relayLag is how many events of the store's log the Kafka relay has not
// published yet (all of them while the relay is stopped).
func (a *admin) relayLag(ctx context.Context) (uint64, error) {
	a.r.pmu.Lock()
	rl := a.r.Relay
	a.r.pmu.Unlock()
	pub := map[uint32]uint64{}
	if rl != nil {
		for _, s := range rl.Stats() {
			pub[s.Partition] = s.SourcePos
		}
	}
	var lag uint64
	for p := range a.r.Backend.Partitions() {
		_, head, err := a.r.Backend.Read(ctx, uint32(p), math.MaxUint64, 0)
		if err != nil {
			return 0, err
		}
		if head.Pos > pub[uint32(p)] {
			lag += head.Pos - pub[uint32(p)]
		}
	}
	return lag, nil
}

func (a *admin) quiescent(ctx context.Context) error {
	if lag, err := a.r.aggregatorLag(ctx); err != nil {
		return err
	} else if lag > 0 {
		return fmt.Errorf("%w: aggregators are %d events behind; heal only on a converged region", ErrNotQuiescent, lag)
	}
	if a.r.cfg.Engines.Log == LogKafka {
		lag, err := a.relayLag(ctx)
		if err != nil {
			return err
		}
		if lag > 0 {
			return fmt.Errorf("%w: the Kafka relay is %d events behind; heal only on a converged region", ErrNotQuiescent, lag)
		}
	}
	if c := a.r.cluster; c != nil {
		var errs []error
		for _, p := range c.shipperStats() {
			if p.Active && p.LagEvents > 0 {
				errs = append(errs, fmt.Errorf("replication to %s is %d events behind", p.Region, p.LagEvents))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%w: %w", ErrNotQuiescent, err)
		}
	}
	return a.inboundQuiescent(ctx, inboundWait)
}

// LogPage is what GET /v1/admin/log answers.
type LogPage struct {
	Region     string       `json:"region"`
	Partitions int          `json:"partitions"`
	Head       uint64       `json:"head"`
	Events     []edge.Event `json:"events"`
}

// Log implements api.Admin.
func (a *admin) Log(ctx context.Context, partition uint32, after uint64, limit int) (any, error) {
	evs, head, err := a.r.Backend.Read(ctx, partition, after, limit)
	if err != nil {
		return nil, err
	}
	if evs == nil {
		evs = []edge.Event{}
	}
	return LogPage{Region: a.r.cfg.Name, Partitions: a.r.Backend.Partitions(), Head: head.Pos, Events: evs}, nil
}
