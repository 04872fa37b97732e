package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// regionsGroup is `likectl regions`: alone it is the live status (the
// command it always was); list, add and retire are the region registry's
// lifecycle (docs/runbooks/region-add-retire.md).
func regionsGroup() *command {
	g := regionsCommand()
	g.summary = "live regions' status | list | add NAME | retire NAME (the region registry)"
	g.usage = "regions [-o table|json]\nregions list [-o table|json]\nregions add NAME [-o table|json]\nregions retire NAME [--timeout 10m] [--quiet]"
	g.long += `

With no subcommand: the live status above. The registry commands:`
	g.subs = []*command{regionsListCommand(), regionsAddCommand(), regionsRetireCommand()}
	return g
}

// nameArg takes the one positional NAME and parses the flags after it (Go's
// flag package stops at the first argument).
func nameArg(cmd string, fs *flag.FlagSet, args []string) (string, error) {
	if len(args) == 0 {
		return "", usagef("%s: want a region NAME (see likectl %s -h)", cmd, cmd)
	}
	name := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return "", usagef("%s: %v", cmd, err)
	}
	if len(fs.Args()) > 0 {
		return "", usagef("%s: unexpected arguments %q", cmd, fs.Args())
	}
	if err := epoch.ValidRegion(name); err != nil {
		return "", usagef("%s: %v", cmd, err)
	}
	return name, nil
}

type registryRegionJSON struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Since      string `json:"since,omitempty"`
	Live       bool   `json:"live"`
	Draining   bool   `json:"draining"` // a graceful stop in progress (its lease key says so)
	PinsOwned  int    `json:"pinsOwned"`
	HomeRanges int    `json:"homeRanges"`
}

type registryJSON struct {
	// Registry is false on a cluster created before the registry (exit 1:
	// the states are unknown; the first `regions add` creates it).
	Registry bool                 `json:"registry"`
	Regions  []registryRegionJSON `json:"regions"`
}

func regionsListCommand() *command {
	return &command{
		name:    "list",
		summary: "every region the cluster knows: state (home, joining, active, draining, retired), live, pins",
		usage:   "regions list [-o table|json]",
		long: `JSON: {"registry": false on a cluster created before the registry (exit 1),
 "regions": [{"name", "state", "since" (RFC 3339), "live", "draining", "pinsOwned", "homeRanges"}]}`,
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			cf := &clusterFlags{}
			cf.register(fs, e)
			var out outputFlag
			out.register(fs)
			return func(ctx context.Context, args []string) error {
				if err := out.check(); err != nil {
					return err
				}
				if err := noArgs("regions list", args); err != nil {
					return err
				}
				d, cn, err := cf.open(ctx, false)
				if err != nil {
					return err
				}
				defer cn.close()
				return regionsList(ctx, d, out, e.stdout)
			}
		},
	}
}

func regionsList(ctx context.Context, d *etcdepoch.Directory, out outputFlag, stdout io.Writer) error {
	recs, err := d.Registry(ctx)
	res := registryJSON{Registry: err == nil, Regions: []registryRegionJSON{}}
	if err != nil && !errors.Is(err, etcdepoch.ErrNoRegistry) {
		return err
	}
	live, err := d.Regions(ctx)
	if err != nil {
		return err
	}
	homes, err := d.Homes(ctx)
	if err != nil {
		return err
	}
	pins, err := d.Pins(ctx)
	if err != nil {
		return err
	}
	byName := map[string]*registryRegionJSON{}
	add := func(name string) *registryRegionJSON {
		if r, ok := byName[name]; ok {
			return r
		}
		res.Regions = append(res.Regions, registryRegionJSON{Name: name})
		r := &res.Regions[len(res.Regions)-1]
		byName[name] = r
		return r
	}
	// Collect the names first: pointers into res.Regions stay valid only
	// once it stops growing.
	names := []string{}
	for _, r := range recs {
		names = append(names, r.Name)
	}
	for _, ri := range live {
		names = append(names, ri.Name)
	}
	names = append(names, homes...)
	res.Regions = make([]registryRegionJSON, 0, len(names))
	for _, n := range names {
		add(n)
	}
	for _, r := range recs {
		j := byName[r.Name]
		j.State, j.Since = string(r.State), r.Since.UTC().Format(time.RFC3339)
	}
	for _, ri := range live {
		j := byName[ri.Name]
		j.Live, j.Draining = true, ri.Draining
	}
	for _, p := range pins {
		if j, ok := byName[p.Region]; ok {
			j.PinsOwned++
		}
		if j, ok := byName[epoch.Home(p.Range, homes)]; ok {
			j.HomeRanges++
		}
	}
	if out.json() {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REGION\tSTATE\tSINCE\tLIVE\tPINS\tHOME OF")
		for _, r := range res.Regions {
			st := r.State
			if st == "" {
				st = "?"
			}
			lv := "no"
			if r.Live {
				lv = "yes"
				if r.Draining {
					lv = "yes (stopping)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d ranges\n", oneLine(r.Name), st, r.Since, lv, r.PinsOwned, r.HomeRanges)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if !res.Registry {
			fmt.Fprintln(stdout, "NO REGISTRY: this cluster was created before the region registry; the first `likectl regions add` (or a likesd start with --regions) creates it")
		}
	}
	if !res.Registry {
		return findingf("regions list: the cluster has no region registry yet")
	}
	return nil
}

func regionsAddCommand() *command {
	return &command{
		name:    "add",
		summary: "record a new region as joining (then start its likesd with --bootstrap-from-peers)",
		usage:   "regions add NAME [-o table|json]",
		long: `Records NAME in the registry as joining. Then start it:
  likesd run --region NAME --regions <every region, NAME included> --bootstrap-from-peers …
It rebuilds from a peer snapshot, marks itself active once rebuilt, and takes ranges
only by planned moves (likectl pins move / drain); the failover controller never picks
a joining region, and no range fails back to a region added later (it is home to none).
A retired name is refused (exit 2): names are never reused.
JSON: {"name", "state", "since"}.`,
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			cf := &clusterFlags{}
			cf.register(fs, e)
			var out outputFlag
			out.register(fs)
			return func(ctx context.Context, args []string) error {
				name, err := nameArg("regions add", fs, args)
				if err != nil {
					return err
				}
				if err := out.check(); err != nil {
					return err
				}
				d, cn, err := cf.open(ctx, false)
				if err != nil {
					return err
				}
				defer cn.close()
				rec, err := d.AddRegion(ctx, name, e.clock.Now())
				if err != nil {
					return fmt.Errorf("regions add: %w", err)
				}
				j := registryRegionJSON{Name: rec.Name, State: string(rec.State), Since: rec.Since.UTC().Format(time.RFC3339)}
				if out.json() {
					return writeJSON(e.stdout, struct {
						Name  string `json:"name"`
						State string `json:"state"`
						Since string `json:"since"`
					}{j.Name, j.State, j.Since})
				}
				fmt.Fprintf(e.stdout, "region %s is %s (since %s)\nnext: start it with likesd run --region %s --regions <all regions> --bootstrap-from-peers …; then give it ranges with likectl pins move or drain\n",
					name, rec.State, j.Since, name)
				return nil
			}
		},
	}
}

func regionsRetireCommand() *command {
	return &command{
		name:    "retire",
		summary: "drain a region's pins to the others (planned), wait, then mark it retired for good",
		usage:   "regions retire NAME [--timeout 10m] [--quiet]",
		long: `Marks NAME draining (no failover or failback to it from now), moves each of its ranges
(planned, with the catch-up barrier) to the range's home when that is a live home region,
else round-robin over the live home and active regions, waits until every moved range has
settled and, while NAME is live, until its aggregators and its replication to every peer
have caught up (its status, signed with --private-key or $LIKES_AUTH_SECRET), then marks it
retired. Its cells stay part of every count; peers stop shipping to it; a likesd started under
the name is refused; the name is never reused. Stop its likesd afterwards.
Progress lines go to stderr; --quiet turns them off. Re-running resumes a retirement.`,
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			cf := &clusterFlags{}
			cf.register(fs, e)
			var ac adminClient
			ac.signer.warn = e.stderr
			ac.register(fs)
			timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the moved ranges and the region's replication to catch up")
			quiet := fs.Bool("quiet", false, "no progress lines on stderr")
			return func(ctx context.Context, args []string) error {
				name, err := nameArg("regions retire", fs, args)
				if err != nil {
					return err
				}
				if *timeout <= 0 {
					return usagef("regions retire: --timeout must be positive")
				}
				d, cn, err := cf.open(ctx, true)
				if err != nil {
					return err
				}
				defer cn.close()
				r := retirer{d: d, ac: &ac, clk: e, pr: newProgress(e, *quiet, "regions retire "+name), out: e.stdout, poll: 200 * time.Millisecond}
				return r.retire(ctx, name, *timeout)
			}
		},
	}
}

// retirer runs one retirement.
type retirer struct {
	d    *etcdepoch.Directory
	ac   *adminClient
	clk  *env
	pr   *progress
	out  io.Writer
	poll time.Duration
}

func (r *retirer) retire(ctx context.Context, name string, timeout time.Duration) error {
	d := r.d
	rec, err := d.RegionRecord(ctx, name)
	if errors.Is(err, etcdepoch.ErrNoRegistry) {
		if err := d.EnsureRegistry(ctx, nil); err != nil {
			return err
		}
		rec, err = d.RegionRecord(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("regions retire: %w", err)
	}
	if rec.State == epoch.StateRetired {
		fmt.Fprintf(r.out, "region %s is already retired (since %s)\n", name, rec.Since.UTC().Format(time.RFC3339))
		return nil
	}
	recs, err := d.Registry(ctx)
	if err != nil {
		return err
	}
	others := 0
	for _, o := range recs {
		if o.Name != name && o.State.Target() {
			others++
		}
	}
	if others == 0 {
		return fmt.Errorf("regions retire: %s is the last home or active region: nothing could take its ranges", name)
	}
	if _, err := d.SetRegionState(ctx, name, epoch.StateDraining, r.clk.clock.Now()); err != nil {
		return fmt.Errorf("regions retire: %w", err)
	}
	deadline := r.clk.clock.Now().Add(timeout)
	moved, err := r.drain(ctx, name, deadline)
	if err != nil {
		return err
	}
	if err := r.waitSettled(ctx, name, deadline); err != nil {
		return err
	}
	if err := r.waitShipped(ctx, name, deadline); err != nil {
		return err
	}
	if _, err := d.SetRegionState(ctx, name, epoch.StateRetired, r.clk.clock.Now()); err != nil {
		return fmt.Errorf("regions retire: %w", err)
	}
	fmt.Fprintf(r.out, "region %s retired: %d ranges moved away; its cells stay in every count; stop its likesd now (a restart under this name is refused)\n", name, moved)
	return nil
}

// targets are the live home and active regions other than name, not
// stopping, by name.
func (r *retirer) targets(ctx context.Context, name string) (map[string]bool, []string, error) {
	states, err := r.d.RegistryStates(ctx)
	if err != nil {
		return nil, nil, err
	}
	live, err := r.d.Regions(ctx)
	if err != nil {
		return nil, nil, err
	}
	ok := map[string]bool{}
	var list []string
	for _, ri := range live {
		if ri.Name != name && !ri.Draining && states[ri.Name].Target() {
			ok[ri.Name] = true
			list = append(list, ri.Name)
		}
	}
	return ok, list, nil
}

// drain moves every range on name away (planned), retrying until none is
// left or the deadline passes.
func (r *retirer) drain(ctx context.Context, name string, deadline time.Time) (int, error) {
	d := r.d
	homes, err := d.Homes(ctx)
	if err != nil {
		return 0, err
	}
	moved, turn := 0, 0
	for {
		pins, err := d.Pins(ctx)
		if err != nil {
			return moved, err
		}
		var left []epoch.Pin
		for _, p := range pins {
			if p.Region == name {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			r.pr.step(moved, moved, true, "ranges moved")
			return moved, nil
		}
		ok, list, err := r.targets(ctx, name)
		if err != nil {
			return moved, err
		}
		if len(list) == 0 {
			if r.clk.clock.Now().After(deadline) {
				return moved, fmt.Errorf("regions retire: no live home or active region to take %d ranges of %s", len(left), name)
			}
			r.sleep(ctx)
			continue
		}
		for _, p := range left {
			to := epoch.Home(p.Range, homes)
			if !ok[to] {
				to = list[turn%len(list)]
				turn++
			}
			np, err := d.Move(ctx, p.Range, p.Epoch, to, d.Config().NotBefore(time.Now()), etcdepoch.Planned())
			if errors.Is(err, epoch.ErrEpochChanged) {
				continue // re-read on the next pass
			}
			if err != nil {
				return moved, fmt.Errorf("regions retire: move range %d: %w (moved %d before it)", p.Range, err, moved)
			}
			moved++
			r.pr.step(moved, moved+len(left)-1, false, fmt.Sprintf("ranges moved (last: range %d → %s, epoch %d)", np.Range, np.Region, np.Epoch))
		}
	}
}

// waitSettled waits until no pin is still catching up on a move away from
// name: the new owners have read name's log to its end.
func (r *retirer) waitSettled(ctx context.Context, name string, deadline time.Time) error {
	for {
		pins, err := r.d.Pins(ctx)
		if err != nil {
			return err
		}
		waiting := 0
		for _, p := range pins {
			if p.Region == name || (p.CatchUp && p.From == name) {
				waiting++
			}
		}
		if waiting == 0 {
			r.pr.step(0, 0, true, "moved ranges settled")
			return nil
		}
		r.pr.step(waiting, -1, false, "moved ranges still catching up on its log")
		if r.clk.clock.Now().After(deadline) {
			return fmt.Errorf("regions retire: %d ranges moved from %s are still catching up after the timeout; re-run to resume", waiting, name)
		}
		r.sleep(ctx)
	}
}

// waitShipped waits, while name is live, until its aggregators and its
// replication to every active peer are caught up, so its last cells reach
// every region before peers stop listening to it.
func (r *retirer) waitShipped(ctx context.Context, name string, deadline time.Time) error {
	for {
		live, err := r.d.Regions(ctx)
		if err != nil {
			return err
		}
		addr := ""
		for _, ri := range live {
			if ri.Name == name {
				addr = ri.HTTP
			}
		}
		if addr == "" {
			// Not live (or no API): what it shipped is what peers have; its
			// cells there stay part of every count.
			return nil
		}
		var st struct {
			AggregatorLag uint64 `json:"aggregatorLagEvents"`
			Peers         []struct {
				Region        string
				Active        bool
				LagEvents     uint64
				CellsCaughtUp bool
			} `json:"replication"`
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = adminGet(cctx, r.ac, http.MethodGet, addr+"/v1/admin/status", nil, &st)
		cancel()
		why := ""
		if err != nil {
			why = "status unavailable: " + err.Error()
		} else if st.AggregatorLag > 0 {
			why = fmt.Sprintf("aggregators %d events behind", st.AggregatorLag)
		} else {
			var behind []string
			for _, p := range st.Peers {
				if p.Active && (p.LagEvents > 0 || !p.CellsCaughtUp) {
					behind = append(behind, fmt.Sprintf("%s (%d events)", p.Region, p.LagEvents))
				}
			}
			if len(behind) == 0 {
				r.pr.step(0, 0, true, "its log and cells reached every peer")
				return nil
			}
			why = "replication behind to " + strings.Join(behind, ", ")
		}
		r.pr.step(0, -1, false, why)
		if r.clk.clock.Now().After(deadline) {
			return fmt.Errorf("regions retire: %s: %s after the timeout; re-run to resume (it stays draining)", name, why)
		}
		r.sleep(ctx)
	}
}

func (r *retirer) sleep(ctx context.Context) {
	t := r.clk.clock.NewTicker(r.poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// checkMoveTarget refuses a planned move or drain to a region the registry
// says is leaving (draining, retired) or was never added.
func checkMoveTarget(ctx context.Context, d *etcdepoch.Directory, to string) error {
	states, err := d.RegistryStates(ctx)
	if err != nil || states == nil {
		return err // a cluster without a registry: any region, as before
	}
	if st, ok := states[to]; !ok {
		return fmt.Errorf("%w: %q (likectl regions add %s first)", etcdepoch.ErrRegionNotAdded, to, to)
	} else if !st.Planned() {
		return fmt.Errorf("region %s is %s: it takes no ranges", to, st)
	}
	return nil
}
