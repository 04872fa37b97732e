package region

import (
	"context"
	"errors"
	"fmt"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/likes-dev/likes/auth"
)

// ReadyCheck is one named condition GET /readyz requires. Checks are
// composable: each part of a region that can make it unfit to serve (the
// lease, the store's health, …) adds its own with AddReadyCheck.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// AddReadyCheck adds a named readiness condition; /readyz answers 503 while
// any check fails. Safe to call at any time.
func (r *Region) AddReadyCheck(name string, check func(ctx context.Context) error) {
	r.readyMu.Lock()
	defer r.readyMu.Unlock()
	r.readyChecks = append(r.readyChecks, ReadyCheck{Name: name, Check: check})
}

// Ready runs every readiness check: nil when all pass, else their failures
// joined ("name: reason"). A check's change of state is logged, so losing the
// lease is visible without polling /readyz.
func (r *Region) Ready(ctx context.Context) error {
	r.readyMu.Lock()
	checks := append([]ReadyCheck(nil), r.readyChecks...)
	r.readyMu.Unlock()
	var errs []error
	for _, c := range checks {
		err := c.Check(ctx)
		r.readyMu.Lock()
		if r.readyFailing == nil {
			r.readyFailing = map[string]bool{}
		}
		was := r.readyFailing[c.Name]
		r.readyFailing[c.Name] = err != nil
		r.readyMu.Unlock()
		switch {
		case err != nil && !was:
			r.log.Warn("region not ready", "check", c.Name, "err", err)
		case err == nil && was:
			r.log.Info("region ready again", "check", c.Name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// errAggregatorsStopped is the readiness failure of a region whose counting
// pipeline is not running (counts it serves would stop moving).
var errAggregatorsStopped = errors.New("aggregators: the counting pipeline is not running")

// errDraining is the readiness failure of a region that is stopping.
var errDraining = errors.New("draining: the region is stopping")

// Drain marks the region as stopping: /readyz answers 503 from now on, so a
// load balancer sends new requests elsewhere while the ones in flight finish;
// in a cluster the gRPC health service answers NOT_SERVING and the region's
// registration in etcd says draining, so no range fails back to it and no
// other region's hand-off picks it. Idempotent.
func (r *Region) Drain() {
	if r.draining.Swap(true) {
		return
	}
	if r.cluster == nil {
		return
	}
	if r.cluster.health != nil {
		r.cluster.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if r.cluster.keepalive != nil && r.cluster.lastNode() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := r.cluster.keepalive.SetDraining(ctx); err != nil {
			r.log.Warn("could not mark the region draining in etcd", "err", err)
		}
	}
}

// addClusterReadiness adds the lease check of a region in a cluster: ready
// only while it can prove its lease and a current pin table in etcd (the
// freshness every write needs). Losing etcd or its authorization makes the
// region unready as it makes its writes fail closed.
func (r *Region) addClusterReadiness() {
	if r.cluster == nil || r.cluster.authority == nil {
		return
	}
	a := r.cluster.authority
	r.AddReadyCheck("lease", func(context.Context) error { return a.LeaseProof() })
}

// newVerifier builds the token verifier from cfg.Secret and cfg.Auth.
func newVerifier(cfg Config) (*auth.Verifier, error) {
	ac := cfg.Auth
	if len(ac.Secret) == 0 {
		ac.Secret = cfg.Secret
	}
	ac.Now = cfg.Clock.Now
	v, err := auth.New(ac)
	if err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	return v, nil
}
