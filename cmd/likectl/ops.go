package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/clustermeta"
)

const defaultEtcd = "http://127.0.0.1:2379"

// conn is an open etcd client and the cluster's metadata.
type conn struct {
	cli  *clientv3.Client
	meta clustermeta.Meta
	// legacy: the cluster has a range count but no metadata (created by an
	// older likesd; its next start records it): TTL and skew are unknown.
	legacy    bool
	endpoints string
}

func (c *conn) close() { _ = c.cli.Close() }

// openCluster dials etcd and reads the cluster metadata, failing within
// --dial-timeout with a clear message when etcd is not there.
func openCluster(ctx context.Context, ef etcdFlags) (*conn, error) {
	cli, err := etcdepoch.NewClientWith(ef.config())
	if err != nil {
		if errors.Is(err, etcdepoch.ErrClientConfig) {
			return nil, fmt.Errorf("%w: etcd %s: %w", errUsage, ef.endpoints, err)
		}
		return nil, fmt.Errorf("etcd %s: %w", ef.endpoints, err)
	}
	c := &conn{cli: cli, endpoints: ef.endpoints}
	pctx, cancel := context.WithTimeout(ctx, ef.dialTimeout)
	defer cancel()
	m, err := etcdepoch.ReadMeta(pctx, cli, "")
	switch {
	case err == nil:
		c.meta = m
		return c, nil
	case errors.Is(err, clustermeta.ErrInvalid), errors.Is(err, clustermeta.ErrNewerLayout):
		c.close()
		return nil, err
	case errors.Is(err, etcdepoch.ErrNoMeta):
		rk := epoch.Config{Prefix: epoch.DefaultPrefix}.RangesKey()
		resp, gerr := cli.Get(pctx, rk)
		if gerr != nil {
			c.close()
			return nil, fmt.Errorf("cannot reach etcd at %s: %w", ef.endpoints, gerr)
		}
		if len(resp.Kvs) == 0 {
			c.close()
			return nil, fmt.Errorf("no likes cluster in etcd at %s (%s is absent): likesd creates it on its first start", ef.endpoints, etcdepoch.MetaKey(epoch.Config{Prefix: epoch.DefaultPrefix}))
		}
		n, perr := strconv.Atoi(string(resp.Kvs[0].Value))
		if perr != nil || n < 1 || n > clustermeta.MaxRanges {
			c.close()
			return nil, fmt.Errorf("etcd %s: %s holds %q, not a range count in [1, %d]", ef.endpoints, rk, resp.Kvs[0].Value, clustermeta.MaxRanges)
		}
		c.meta, c.legacy = clustermeta.Meta{Layout: clustermeta.Layout, Ranges: n}, true
		return c, nil
	default:
		c.close()
		return nil, fmt.Errorf("cannot reach etcd at %s (is likesd dev running?): %w", ef.endpoints, err)
	}
}

// clusterFlags are the etcd flags of the pins commands and their deprecated
// overrides of the cluster's parameters.
type clusterFlags struct {
	etcd       etcdFlags
	ranges     int
	ttl, skew  time.Duration
	fs         *flag.FlagSet
	warnWriter io.Writer
}

func (c *clusterFlags) register(fs *flag.FlagSet, e *env) {
	c.etcd.register(fs)
	c.fs, c.warnWriter = fs, e.stderr
	fs.IntVar(&c.ranges, "ranges", 0, "deprecated: the cluster's range count is read from its metadata in etcd; refused if it disagrees")
	fs.DurationVar(&c.ttl, "lease-ttl", 0, "deprecated: read from the cluster metadata; refused if it disagrees (needed only for a cluster without metadata)")
	fs.DurationVar(&c.skew, "max-skew", 0, "deprecated: read from the cluster metadata; refused if it disagrees (needed only for a cluster without metadata)")
}

// config returns the cluster's epoch configuration: its metadata, checked
// against the deprecated flags given. timing says the command computes
// notBefore (a cluster without metadata then needs --lease-ttl and
// --max-skew).
func (c *clusterFlags) config(cn *conn, timing bool) (epoch.Config, error) {
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	m := cn.meta
	var given []string
	for _, n := range []string{"ranges", "lease-ttl", "max-skew"} {
		if set[n] {
			given = append(given, "--"+n)
		}
	}
	if set["ranges"] && c.ranges != m.Ranges {
		return epoch.Config{}, usagef("--ranges %d disagrees with the cluster's %d ranges (read from etcd); the flag is deprecated: drop it", c.ranges, m.Ranges)
	}
	if cn.legacy {
		if timing && (!set["lease-ttl"] || !set["max-skew"]) {
			return epoch.Config{}, fmt.Errorf("the cluster in etcd at %s has no metadata (created by an older likesd; restarting any region with this build records it): "+
				"until then pass the cluster's --lease-ttl and --max-skew", cn.endpoints)
		}
		m.LeaseTTL, m.MaxSkew = c.ttl, c.skew
		if !timing {
			m.LeaseTTL, m.MaxSkew = epoch.DefaultTTL, epoch.DefaultMaxSkew
		}
	} else {
		if set["lease-ttl"] && c.ttl != m.LeaseTTL {
			return epoch.Config{}, usagef("--lease-ttl %v disagrees with the cluster's lease TTL %v (read from etcd); the flag is deprecated: drop it", c.ttl, m.LeaseTTL)
		}
		if set["max-skew"] && c.skew != m.MaxSkew {
			return epoch.Config{}, usagef("--max-skew %v disagrees with the cluster's max skew %v (read from etcd); the flag is deprecated: drop it", c.skew, m.MaxSkew)
		}
		if len(given) > 0 {
			fmt.Fprintf(c.warnWriter, "likectl: warning: %s deprecated: the cluster's parameters are read from etcd\n", strings.Join(given, ", "))
		}
	}
	// A max skew of 0 reads as epoch's default (500ms), as it does for likesd:
	// a later notBefore, never an earlier one.
	cfg, err := epoch.Config{Ranges: m.Ranges, TTL: m.LeaseTTL, MaxSkew: m.MaxSkew, Margin: m.LeaseTTL / 2}.WithDefaults()
	if err != nil {
		return epoch.Config{}, usagef("%v", err)
	}
	return cfg, nil
}

// open dials etcd and returns the directory over the cluster's parameters.
func (c *clusterFlags) open(ctx context.Context, timing bool) (*etcdepoch.Directory, *conn, error) {
	cn, err := openCluster(ctx, c.etcd)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := c.config(cn, timing)
	if err != nil {
		cn.close()
		return nil, nil, err
	}
	d, err := etcdepoch.NewDirectory(cn.cli, cfg)
	if err != nil {
		cn.close()
		return nil, nil, err
	}
	return d, cn, nil
}

const pinsLong = `Moves are planned: the new owner catches up on every live region's log before
writing (--unplanned skips that, as a failover does). notBefore = now + the
cluster's lease TTL + max skew, both read from the cluster metadata in etcd.`

func pinsCommand() *command {
	leaf := func(name, summary, usage, long string, body func(fs *flag.FlagSet, e *env, cf *clusterFlags) runFunc) *command {
		return &command{name: name, summary: summary, usage: usage, long: long,
			setup: func(fs *flag.FlagSet, e *env) runFunc {
				cf := &clusterFlags{}
				cf.register(fs, e)
				return body(fs, e, cf)
			}}
	}
	return &command{
		name:    "pins",
		summary: "list | move --range N --to REGION | drain --from R --to R | settle --range N | rebalance",
		long:    pinsLong,
		subs: []*command{
			leaf("list", "every range: home, owner region, epoch, notBefore, catching up", "pins list [-o table|json]",
				`JSON: {"cluster": {layout, ranges, leaseTTLMs, maxSkewMs, createdAt, homes, legacy},
  "pins": [{"range", "home", "region", "epoch", "notBefore" (RFC 3339, omitted when zero),
            "catchUp", "from"}],
  "owned": {region: ranges}, "away", "catchingUp", "missing": [ranges without a pin],
  "truncated": true when ranges have no pin (exit 1)}`,
				func(fs *flag.FlagSet, e *env, cf *clusterFlags) runFunc {
					var out outputFlag
					out.register(fs)
					return func(ctx context.Context, args []string) error {
						if err := out.check(); err != nil {
							return err
						}
						if err := noArgs("pins list", args); err != nil {
							return err
						}
						d, cn, err := cf.open(ctx, false)
						if err != nil {
							return err
						}
						defer cn.close()
						return pinsList(ctx, d, cn, out, e.stdout)
					}
				}),
			leaf("move", "move one range (epoch + 1), planned unless --unplanned", "pins move --range N --to REGION [--unplanned]", "",
				func(fs *flag.FlagSet, e *env, cf *clusterFlags) runFunc {
					rng := fs.Int("range", -1, "range to move (required)")
					to := fs.String("to", "", "target region (required)")
					unplanned := fs.Bool("unplanned", false, "move without the catch-up barrier, as a failover does: the new owner writes at notBefore even if the old owner's tail has not replicated")
					return func(ctx context.Context, args []string) error {
						if err := noArgs("pins move", args); err != nil {
							return err
						}
						if *rng < 0 || *to == "" {
							return usagef("pins move: need --range N and --to REGION")
						}
						d, cn, err := cf.open(ctx, true)
						if err != nil {
							return err
						}
						defer cn.close()
						return pinsMove(ctx, d, uint32(*rng), *to, *unplanned, e.stdout)
					}
				}),
			leaf("drain", "move every range of a region to another (planned unless --unplanned)", "pins drain --from REGION --to OTHER [--unplanned] [--quiet]",
				"Progress lines go to stderr (one per second or per 100 ranges); --quiet turns them off.",
				func(fs *flag.FlagSet, e *env, cf *clusterFlags) runFunc {
					from := fs.String("from", "", "region to drain (required)")
					to := fs.String("to", "", "target region (required)")
					unplanned := fs.Bool("unplanned", false, "move without the catch-up barrier, as a failover does")
					quiet := fs.Bool("quiet", false, "no progress lines on stderr")
					return func(ctx context.Context, args []string) error {
						if err := noArgs("pins drain", args); err != nil {
							return err
						}
						if *from == "" || *to == "" || *from == *to {
							return usagef("pins drain: need --from REGION --to OTHER_REGION")
						}
						d, cn, err := cf.open(ctx, true)
						if err != nil {
							return err
						}
						defer cn.close()
						return pinsDrain(ctx, d, *from, *to, *unplanned, newProgress(e, *quiet, "pins drain"), e.stdout)
					}
				}),
			leaf("settle", "stop a planned move's wait for catch-up (the new owner writes now: an unplanned move)", "pins settle --range N", "",
				func(fs *flag.FlagSet, e *env, cf *clusterFlags) runFunc {
					rng := fs.Int("range", -1, "range to settle (required)")
					return func(ctx context.Context, args []string) error {
						if err := noArgs("pins settle", args); err != nil {
							return err
						}
						if *rng < 0 {
							return usagef("pins settle: need --range N")
						}
						d, cn, err := cf.open(ctx, false)
						if err != nil {
							return err
						}
						defer cn.close()
						return pinsSettle(ctx, d, uint32(*rng), e.stdout)
					}
				}),
			leaf("rebalance", "move ranges away from their home back now (planned), as failback does", "pins rebalance [--quiet]",
				"A home that is not live or is draining is skipped. Progress lines go to stderr; --quiet turns them off.",
				func(fs *flag.FlagSet, e *env, cf *clusterFlags) runFunc {
					quiet := fs.Bool("quiet", false, "no progress lines on stderr")
					return func(ctx context.Context, args []string) error {
						if err := noArgs("pins rebalance", args); err != nil {
							return err
						}
						d, cn, err := cf.open(ctx, true)
						if err != nil {
							return err
						}
						defer cn.close()
						return rebalance(ctx, d, newProgress(e, *quiet, "pins rebalance"), e.stdout)
					}
				}),
		},
	}
}

// clusterJSON is the cluster metadata as likectl prints it.
type clusterJSON struct {
	Layout     int      `json:"layout"`
	Ranges     int      `json:"ranges"`
	LeaseTTLMs int64    `json:"leaseTTLMs,omitempty"`
	MaxSkewMs  *int64   `json:"maxSkewMs,omitempty"`
	CreatedAt  string   `json:"createdAt,omitempty"`
	Homes      []string `json:"homes,omitempty"`
	// Legacy: the cluster has no metadata (an older likesd created it); only
	// its range count is known.
	Legacy bool `json:"legacy"`
}

func clusterOf(cn *conn, homes []string) clusterJSON {
	c := clusterJSON{Layout: cn.meta.Layout, Ranges: cn.meta.Ranges, Legacy: cn.legacy, Homes: homes}
	if !cn.legacy {
		c.LeaseTTLMs = cn.meta.LeaseTTL.Milliseconds()
		skew := cn.meta.MaxSkew.Milliseconds()
		c.MaxSkewMs = &skew
		if !cn.meta.CreatedAt.IsZero() {
			c.CreatedAt = cn.meta.CreatedAt.Format(time.RFC3339Nano)
		}
	}
	return c
}

type pinJSON struct {
	Range     uint32 `json:"range"`
	Home      string `json:"home"`
	Region    string `json:"region"`
	Epoch     uint64 `json:"epoch"`
	NotBefore string `json:"notBefore,omitempty"`
	CatchUp   bool   `json:"catchUp"`
	From      string `json:"from,omitempty"`
}

type pinsListJSON struct {
	Cluster    clusterJSON    `json:"cluster"`
	Pins       []pinJSON      `json:"pins"`
	Owned      map[string]int `json:"owned"`
	Away       int            `json:"away"`
	CatchingUp int            `json:"catchingUp"`
	Missing    []uint32       `json:"missing,omitempty"`
	Truncated  bool           `json:"truncated"`
}

func pinsList(ctx context.Context, d *etcdepoch.Directory, cn *conn, out outputFlag, stdout io.Writer) error {
	ps, err := d.Pins(ctx)
	if err != nil {
		return err
	}
	homes, err := d.Homes(ctx)
	if err != nil {
		return err
	}
	res := pinsListJSON{Cluster: clusterOf(cn, homes), Pins: []pinJSON{}, Owned: map[string]int{}}
	have := map[uint32]bool{}
	for _, p := range ps {
		have[p.Range] = true
		pj := pinJSON{Range: p.Range, Region: p.Region, Epoch: p.Epoch, CatchUp: p.CatchUp, From: p.From, Home: epoch.Home(p.Range, homes)}
		if !p.NotBefore.IsZero() {
			pj.NotBefore = p.NotBefore.UTC().Format(time.RFC3339Nano)
		}
		if p.CatchUp {
			res.CatchingUp++
		}
		if pj.Home != "" && pj.Home != p.Region {
			res.Away++
		}
		res.Owned[p.Region]++
		res.Pins = append(res.Pins, pj)
	}
	for r := range uint32(cn.meta.Ranges) {
		if !have[r] {
			res.Missing = append(res.Missing, r)
		}
	}
	res.Truncated = len(res.Missing) > 0
	if out.json() {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RANGE\tHOME\tREGION\tEPOCH\tNOT BEFORE\tSTATE")
		for _, p := range res.Pins {
			state := "writable"
			if p.CatchUp {
				state = "catching up (planned move from " + oneLine(p.From) + ")"
			}
			home, nb := p.Home, p.NotBefore
			if home == "" {
				home = "?"
			}
			if nb == "" {
				nb = time.Time{}.Format(time.RFC3339Nano)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", p.Range, oneLine(home), oneLine(p.Region), p.Epoch, nb, state)
		}
		_ = tw.Flush()
		var regions []string
		for r := range res.Owned {
			regions = append(regions, r)
		}
		sort.Strings(regions)
		for _, r := range regions {
			fmt.Fprintf(stdout, "%s owns %d ranges\n", oneLine(r), res.Owned[r])
		}
		if res.CatchingUp > 0 {
			fmt.Fprintf(stdout, "%d ranges refuse writes until their new owner has caught up on every live region's log\n", res.CatchingUp)
		}
		if res.Away > 0 {
			fmt.Fprintf(stdout, "%d ranges are away from their home (they move back by failback, or now with likectl pins rebalance)\n", res.Away)
		}
		if res.Truncated {
			fmt.Fprintf(stdout, "INCOMPLETE: %d of %d ranges have no pin (a cluster being created, or damaged keys)\n", len(res.Missing), cn.meta.Ranges)
		}
	}
	if res.Truncated {
		return findingf("pins list: %d of %d ranges have no pin", len(res.Missing), cn.meta.Ranges)
	}
	return nil
}

func pinsMove(ctx context.Context, d *etcdepoch.Directory, rng uint32, to string, unplanned bool, stdout io.Writer) error {
	cfg := d.Config()
	if int(rng) >= cfg.Ranges {
		return usagef("pins move: --range %d not in [0, %d)", rng, cfg.Ranges)
	}
	if err := checkMoveTarget(ctx, d, to); err != nil {
		return fmt.Errorf("pins move: %w", err)
	}
	cur, err := d.Pin(ctx, rng)
	if err != nil {
		return err
	}
	if cur.Region == to {
		fmt.Fprintf(stdout, "range %d is already pinned to %s (epoch %d)\n", rng, to, cur.Epoch)
		return nil
	}
	p, err := d.Move(ctx, rng, cur.Epoch, to, cfg.NotBefore(time.Now()), moveOpts(unplanned)...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "range %d: %s epoch %d → %s epoch %d, writable from %s%s\n", rng, cur.Region, cur.Epoch, p.Region, p.Epoch,
		p.NotBefore.UTC().Format(time.RFC3339Nano), catchUpNote(p.CatchUp))
	return nil
}

func pinsSettle(ctx context.Context, d *etcdepoch.Directory, rng uint32, stdout io.Writer) error {
	if int(rng) >= d.Config().Ranges {
		return usagef("pins settle: --range %d not in [0, %d)", rng, d.Config().Ranges)
	}
	cur, err := d.Pin(ctx, rng)
	if err != nil {
		return err
	}
	if !cur.CatchUp {
		fmt.Fprintf(stdout, "range %d (region %s, epoch %d) is not catching up\n", rng, cur.Region, cur.Epoch)
		return nil
	}
	if _, err := d.Settle(ctx, rng, cur.Epoch); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "range %d: %s writes epoch %d now, without waiting for the other regions' logs (an unplanned move: late writes of the old owner merge through corrections)\n", rng, cur.Region, cur.Epoch)
	return nil
}

func pinsDrain(ctx context.Context, d *etcdepoch.Directory, from, to string, unplanned bool, pr *progress, stdout io.Writer) error {
	if err := checkMoveTarget(ctx, d, to); err != nil {
		return fmt.Errorf("pins drain: %w", err)
	}
	ps, err := d.Pins(ctx)
	if err != nil {
		return err
	}
	total := 0
	for _, p := range ps {
		if p.Region == from {
			total++
		}
	}
	n := 0
	opts := append(moveOpts(unplanned), etcdepoch.OnMoved(func(p epoch.Pin) {
		n++
		pr.step(n, total, false, fmt.Sprintf("ranges moved (last: range %d, epoch %d)", p.Range, p.Epoch))
	}))
	moved, err := d.Drain(ctx, from, to, d.Config().NotBefore(time.Now()), opts...)
	pr.step(len(moved), total, true, "ranges moved")
	if err != nil {
		return fmt.Errorf("pins drain: %w (moved %d ranges before it)", err, len(moved))
	}
	fmt.Fprintf(stdout, "moved %d ranges from %s to %s (epochs bumped; %s writes them after notBefore%s)\n", len(moved), from, to, to, catchUpNote(!unplanned))
	return nil
}

func moveOpts(unplanned bool) []etcdepoch.MoveOption {
	if unplanned {
		return nil
	}
	return []etcdepoch.MoveOption{etcdepoch.Planned()}
}

func catchUpNote(planned bool) string {
	if !planned {
		return ""
	}
	return " and once it has caught up on every live region's log"
}

// rebalance moves every range that is away from its home back to it, as
// planned moves, when the home is live and not draining (what failback does
// after --failback-after, on demand).
func rebalance(ctx context.Context, d *etcdepoch.Directory, pr *progress, stdout io.Writer) error {
	cfg := d.Config()
	homes, err := d.Homes(ctx)
	if err != nil {
		return err
	}
	if len(homes) == 0 {
		return errors.New("pins rebalance: the cluster records no home regions (created by an older likesd)")
	}
	live, err := d.Regions(ctx)
	if err != nil {
		return err
	}
	states, err := d.RegistryStates(ctx)
	if err != nil {
		return err
	}
	ok := map[string]bool{}
	for _, ri := range live {
		// A home being retired (or retired) takes nothing back.
		ok[ri.Name] = !ri.Draining && (states == nil || states[ri.Name] == epoch.StateHome)
	}
	ps, err := d.Pins(ctx)
	if err != nil {
		return err
	}
	away := 0
	for _, p := range ps {
		if epoch.Home(p.Range, homes) != p.Region {
			away++
		}
	}
	moved, skipped := 0, 0
	for _, p := range ps {
		home := epoch.Home(p.Range, homes)
		if home == p.Region {
			continue
		}
		if !ok[home] || p.CatchUp {
			skipped++
			continue
		}
		np, err := d.Move(ctx, p.Range, p.Epoch, home, cfg.NotBefore(time.Now()), etcdepoch.Planned())
		if errors.Is(err, epoch.ErrEpochChanged) {
			skipped++
			continue
		}
		if err != nil {
			return fmt.Errorf("pins rebalance: range %d: %w (moved %d before it)", p.Range, err, moved)
		}
		moved++
		pr.step(moved+skipped, away, false, "away ranges handled")
		fmt.Fprintf(stdout, "range %d: %s epoch %d → home %s epoch %d (planned)\n", p.Range, p.Region, p.Epoch, np.Region, np.Epoch)
	}
	if away > 0 {
		pr.step(moved+skipped, away, true, "away ranges handled")
	}
	fmt.Fprintf(stdout, "moved %d ranges home; %d away ranges left (home not live, draining, or a move in progress)\n", moved, skipped)
	return nil
}

func clusterCommand() *command {
	return &command{
		name:    "cluster",
		summary: "the cluster's parameters from its etcd metadata (ranges, lease TTL, max skew, layout, homes)",
		usage:   "cluster [-o table|json]",
		long: `The parameters are written once, when the cluster is created (likesd's first start),
and never change. JSON: {"layout", "ranges", "leaseTTLMs", "maxSkewMs", "createdAt",
"homes": [regions], "legacy": true for a cluster without metadata (exit 1: only its range
count is known; restarting any region with this build records the rest)}.`,
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			var ef etcdFlags
			ef.register(fs)
			var out outputFlag
			out.register(fs)
			return func(ctx context.Context, args []string) error {
				if err := out.check(); err != nil {
					return err
				}
				if err := noArgs("cluster", args); err != nil {
					return err
				}
				cn, err := openCluster(ctx, ef)
				if err != nil {
					return err
				}
				defer cn.close()
				d, err := etcdepoch.NewDirectory(cn.cli, epoch.Config{Ranges: cn.meta.Ranges})
				if err != nil {
					return err
				}
				homes, err := d.Homes(ctx)
				if err != nil {
					return err
				}
				c := clusterOf(cn, homes)
				if out.json() {
					err = writeJSON(e.stdout, c)
				} else {
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintf(tw, "LAYOUT\t%d\n", c.Layout)
					fmt.Fprintf(tw, "RANGES\t%d\n", c.Ranges)
					if cn.legacy {
						fmt.Fprintf(tw, "LEASE TTL\tunknown (no metadata)\nMAX SKEW\tunknown (no metadata)\n")
					} else {
						fmt.Fprintf(tw, "LEASE TTL\t%v\nMAX SKEW\t%v\n", cn.meta.LeaseTTL, cn.meta.MaxSkew)
						fmt.Fprintf(tw, "CREATED\t%s\n", c.CreatedAt)
					}
					fmt.Fprintf(tw, "HOMES\t%s\n", strings.Join(homes, ","))
					err = tw.Flush()
				}
				if err != nil {
					return err
				}
				if cn.legacy {
					return findingf("cluster: no metadata in etcd (created by an older likesd): only the range count is known")
				}
				return nil
			}
		},
	}
}

func adminGet(ctx context.Context, ac *adminClient, method, url string, body any, out any) error {
	tok, err := ac.sign("likectl", true, time.Minute)
	if err != nil {
		return err
	}
	hc, err := ac.client()
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return usagef("%s: %v", url, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: bad answer: %w", method, url, err)
	}
	return nil
}

type peerJSON struct {
	Region    string `json:"region"`
	LagEvents uint64 `json:"lagEvents"`
	LastError string `json:"lastError,omitempty"`
	Active    bool   `json:"active"`
}

type regionJSON struct {
	Name           string     `json:"name"`
	HTTP           string     `json:"http,omitempty"`
	GRPC           string     `json:"grpc,omitempty"`
	Draining       bool       `json:"draining"`
	Lease          string     `json:"lease"` // "alive": it holds a lease (only such regions are listed)
	KeepaliveAgo   string     `json:"lastKeepaliveAgo,omitempty"`
	PinsOwned      int        `json:"pinsOwned"`
	PinsCatchingUp int        `json:"pinsCatchingUp"`
	AsOf           string     `json:"asOf,omitempty"`
	AggregatorLag  uint64     `json:"aggregatorLagEvents"`
	Replication    []peerJSON `json:"replication"`
	// Error is why the region's status could not be read (its other status
	// fields are then zero).
	Error string `json:"error,omitempty"`
}

type regionsJSON struct {
	Regions []regionJSON `json:"regions"`
	// Truncated: some region's status could not be read (exit 1).
	Truncated bool `json:"truncated"`
}

func regionsCommand() *command {
	return &command{
		name:    "regions",
		summary: "live regions: lease health, watermarks, aggregator and replication lag",
		usage:   "regions [-o table|json]",
		long: `JSON: {"regions": [{"name", "http", "grpc", "draining", "lease", "lastKeepaliveAgo",
  "pinsOwned", "pinsCatchingUp", "asOf", "aggregatorLagEvents",
  "replication": [{"region", "lagEvents", "lastError", "active"}], "error"}],
 "truncated": true when some region's status could not be read (exit 1)}`,
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			var ef etcdFlags
			ef.register(fs)
			var ac adminClient
			ac.signer.warn = e.stderr
			ac.register(fs)
			var out outputFlag
			out.register(fs)
			return func(ctx context.Context, args []string) error {
				if err := out.check(); err != nil {
					return err
				}
				if err := noArgs("regions", args); err != nil {
					return err
				}
				cn, err := openCluster(ctx, ef)
				if err != nil {
					return err
				}
				defer cn.close()
				d, err := etcdepoch.NewDirectory(cn.cli, epoch.Config{Ranges: cn.meta.Ranges})
				if err != nil {
					return err
				}
				return regions(ctx, d, &ac, out, e.stdout)
			}
		},
	}
}

func regions(ctx context.Context, d *etcdepoch.Directory, ac *adminClient, out outputFlag, stdout io.Writer) error {
	live, err := d.Regions(ctx)
	if err != nil {
		return err
	}
	res := regionsJSON{Regions: []regionJSON{}}
	for _, r := range live {
		rj := regionJSON{Name: r.Name, HTTP: r.HTTP, GRPC: r.GRPC, Draining: r.Draining, Lease: "alive", Replication: []peerJSON{}}
		var st struct {
			AsOf          string     `json:"asOf"`
			AggregatorLag uint64     `json:"aggregatorLagEvents"`
			KeepaliveAgo  string     `json:"lastKeepaliveAgo"`
			PinsOwned     int        `json:"pinsOwned"`
			CatchingUp    int        `json:"pinsCatchingUp"`
			Peers         []peerJSON `json:"replication"`
		}
		if r.HTTP == "" {
			err = errors.New("the region registered no HTTP address")
		} else {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err = adminGet(cctx, ac, http.MethodGet, r.HTTP+"/v1/admin/status", nil, &st)
			cancel()
		}
		if err != nil {
			rj.Error = "status unavailable: " + err.Error()
			res.Truncated = true
		} else {
			rj.AsOf, rj.AggregatorLag, rj.KeepaliveAgo, rj.PinsOwned, rj.PinsCatchingUp = st.AsOf, st.AggregatorLag, st.KeepaliveAgo, st.PinsOwned, st.CatchingUp
			for _, p := range st.Peers {
				if p.Active {
					rj.Replication = append(rj.Replication, p)
				}
			}
		}
		res.Regions = append(res.Regions, rj)
	}
	if out.json() {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else if len(res.Regions) == 0 {
		fmt.Fprintln(stdout, "no live regions (no region holds a lease)")
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REGION\tHTTP\tLEASE\tKEEPALIVE AGO\tPINS\tASOF\tAGG LAG\tREPLICATION (peer: lag events, last error)")
		for _, r := range res.Regions {
			if r.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\talive\t?\t?\t?\t?\t%s\n", oneLine(r.Name), oneLine(r.HTTP), oneLine(r.Error))
				continue
			}
			var peers []string
			for _, p := range r.Replication {
				s := fmt.Sprintf("%s: %d", oneLine(p.Region), p.LagEvents)
				if p.LastError != "" {
					s += " (" + oneLine(p.LastError) + ")"
				}
				peers = append(peers, s)
			}
			pins := fmt.Sprint(r.PinsOwned)
			if r.PinsCatchingUp > 0 {
				pins += fmt.Sprintf(" (%d catching up)", r.PinsCatchingUp)
			}
			fmt.Fprintf(tw, "%s\t%s\talive\t%s\t%s\t%s\t%d\t%s\n", oneLine(r.Name), oneLine(r.HTTP), oneLine(r.KeepaliveAgo), pins, oneLine(r.AsOf), r.AggregatorLag, strings.Join(peers, "; "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if res.Truncated {
			fmt.Fprintln(stdout, "PARTIAL: the status of some regions could not be read")
		}
	}
	if res.Truncated {
		return findingf("regions: the status of some regions could not be read; the result is partial")
	}
	return nil
}

type mismatchJSON struct {
	Item     string `json:"itemId"`
	Liked    int64  `json:"likedEdges"`
	Cells    int64  `json:"cellSum"`
	Mismatch int64  `json:"mismatch"`
	Healed   bool   `json:"healed"`
}

type reconcileJSON struct {
	Region     string         `json:"region"`
	Items      int            `json:"itemsChecked"`
	Mismatched []mismatchJSON `json:"mismatched"`
	Healed     int            `json:"healed"`
	// Truncated: the region stopped at its bound of items per request; the
	// items after it were not checked (exit 1).
	Truncated bool `json:"truncated"`
}

func reconcileCommand() *command {
	return &command{
		name:    "reconcile",
		summary: "recount items from edges, report mismatches, --heal through the fenced path",
		usage:   "reconcile [--url http://127.0.0.1:8080] [--item ID] [--heal] [-o table|json] [--quiet]",
		long: `Exit 1 when mismatches remain unhealed or the region stopped at its bound of items
(truncated). The recount runs in the region; while it runs a progress line goes to
stderr every second (--quiet turns them off).
JSON: {"region", "itemsChecked", "mismatched": [{"itemId", "likedEdges", "cellSum",
"mismatch", "healed"}], "healed", "truncated"}`,
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			url := fs.String("url", "http://127.0.0.1:8080", "the region's HTTP address")
			item := fs.String("item", "", "one item (default: every item)")
			heal := fs.Bool("heal", false, "append healing events for mismatches (the region must be quiescent)")
			quiet := fs.Bool("quiet", false, "no progress lines on stderr")
			var ac adminClient
			ac.signer.warn = e.stderr
			ac.register(fs)
			var out outputFlag
			out.register(fs)
			return func(ctx context.Context, args []string) error {
				if err := out.check(); err != nil {
					return err
				}
				if err := noArgs("reconcile", args); err != nil {
					return err
				}
				return reconcile(ctx, &ac, strings.TrimRight(*url, "/"), *item, *heal, out, newProgress(e, *quiet, "reconcile"), e.stdout)
			}
		},
	}
}

func reconcile(ctx context.Context, ac *adminClient, url, item string, heal bool, out outputFlag, pr *progress, stdout io.Writer) error {
	rep := reconcileJSON{Mismatched: []mismatchJSON{}}
	body := map[string]any{"heal": heal}
	if item != "" {
		body["itemId"] = item
	}
	stop := pr.ticking()
	err := adminGet(ctx, ac, http.MethodPost, url+"/v1/admin/reconcile", body, &rep)
	stop()
	if err != nil {
		return err
	}
	if rep.Mismatched == nil {
		rep.Mismatched = []mismatchJSON{}
	}
	unhealed := 0
	for _, m := range rep.Mismatched {
		if !m.Healed {
			unhealed++
		}
	}
	if out.json() {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "region %s: %d items checked, %d mismatched, %d healed\n", oneLine(rep.Region), rep.Items, len(rep.Mismatched), rep.Healed)
		for _, m := range rep.Mismatched {
			fmt.Fprintf(stdout, "  %q: %d liked edges, cells sum to %d (mismatch %+d)\n", m.Item, m.Liked, m.Cells, m.Mismatch)
		}
		if rep.Truncated {
			fmt.Fprintf(stdout, "TRUNCATED: the region stopped after %d items; the items after them were not checked\n", rep.Items)
		}
	}
	var msgs []string
	if unhealed > 0 {
		msgs = append(msgs, fmt.Sprintf("%d mismatched items (rerun with --heal on a quiescent region)", unhealed))
	}
	if rep.Truncated {
		msgs = append(msgs, fmt.Sprintf("truncated after %d items", rep.Items))
	}
	if len(msgs) > 0 {
		return findingf("reconcile: %s", strings.Join(msgs, "; "))
	}
	return nil
}
