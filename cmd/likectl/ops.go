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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

const defaultEtcd = "http://127.0.0.1:2379"

func directory(ctx context.Context, ef etcdFlags, ranges int) (*etcdepoch.Directory, func(), error) {
	endpoints := ef.endpoints
	cli, err := etcdepoch.NewClientWith(ef.config())
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %s: %w", endpoints, err)
	}
	d, err := etcdepoch.NewDirectory(cli, epoch.Config{Ranges: ranges})
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	// Fail fast with a clear message when etcd is not there.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Get(pctx, "/likes/meta/ranges"); err != nil {
		_ = cli.Close()
		return nil, nil, fmt.Errorf("cannot reach etcd at %s (is likesd dev running?): %w", endpoints, err)
	}
	return d, func() { _ = cli.Close() }, nil
}

func pins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("pins: want a subcommand: list, move, drain, settle or rebalance")
	}
	fs := flag.NewFlagSet("likectl pins "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var etcd etcdFlags
	etcd.register(fs)
	ranges := fs.Int("ranges", 256, "user ranges of the cluster")
	rng := fs.Int("range", -1, "range to move or settle (move, settle)")
	unplanned := fs.Bool("unplanned", false, "move without the catch-up barrier, as a failover does: the new owner writes at notBefore even if the old owner's tail has not replicated (move, drain)")
	to := fs.String("to", "", "target region (move, drain)")
	from := fs.String("from", "", "region to drain (drain)")
	ttl := fs.Duration("lease-ttl", 5*time.Second, "the cluster's lease TTL (sets notBefore = now + TTL + max skew)")
	skew := fs.Duration("max-skew", 500*time.Millisecond, "the cluster's max clock skew")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	d, done, err := directory(ctx, etcd, *ranges)
	if err != nil {
		return err
	}
	defer done()
	cfg := epoch.Config{Ranges: *ranges, TTL: *ttl, MaxSkew: *skew}
	cfg, err = cfg.WithDefaults()
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
		ps, err := d.Pins(ctx)
		if err != nil {
			return err
		}
		homes, err := d.Homes(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RANGE\tHOME\tREGION\tEPOCH\tNOT BEFORE\tSTATE")
		per := map[string]int{}
		catching, away := 0, 0
		for _, p := range ps {
			state := "writable"
			if p.CatchUp {
				state = "catching up (planned move from " + p.From + ")"
				catching++
			}
			home := epoch.Home(p.Range, homes)
			if home == "" {
				home = "?"
			} else if home != p.Region {
				away++
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", p.Range, home, p.Region, p.Epoch, p.NotBefore.UTC().Format(time.RFC3339Nano), state)
			per[p.Region]++
		}
		defer func() {
			if away > 0 {
				fmt.Fprintf(stdout, "%d ranges are away from their home (they move back by failback, or now with likectl pins rebalance)\n", away)
			}
		}()
		_ = tw.Flush()
		var regions []string
		for r := range per {
			regions = append(regions, r)
		}
		sort.Strings(regions)
		for _, r := range regions {
			fmt.Fprintf(stdout, "%s owns %d ranges\n", r, per[r])
		}
		if catching > 0 {
			fmt.Fprintf(stdout, "%d ranges refuse writes until their new owner has caught up on every live region's log\n", catching)
		}
		return nil
	case "move":
		if *rng < 0 || *rng >= *ranges || *to == "" {
			return fmt.Errorf("pins move: need --range in [0, %d) and --to REGION", *ranges)
		}
		cur, err := d.Pin(ctx, uint32(*rng))
		if err != nil {
			return err
		}
		if cur.Region == *to {
			fmt.Fprintf(stdout, "range %d is already pinned to %s (epoch %d)\n", *rng, *to, cur.Epoch)
			return nil
		}
		p, err := d.Move(ctx, uint32(*rng), cur.Epoch, *to, cfg.NotBefore(time.Now()), moveOpts(*unplanned)...)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "range %d: %s epoch %d → %s epoch %d, writable from %s%s\n", *rng, cur.Region, cur.Epoch, p.Region, p.Epoch,
			p.NotBefore.UTC().Format(time.RFC3339Nano), catchUpNote(p.CatchUp))
		return nil
	case "settle":
		if *rng < 0 || *rng >= *ranges {
			return fmt.Errorf("pins settle: need --range in [0, %d)", *ranges)
		}
		cur, err := d.Pin(ctx, uint32(*rng))
		if err != nil {
			return err
		}
		if !cur.CatchUp {
			fmt.Fprintf(stdout, "range %d (region %s, epoch %d) is not catching up\n", *rng, cur.Region, cur.Epoch)
			return nil
		}
		if _, err := d.Settle(ctx, uint32(*rng), cur.Epoch); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "range %d: %s writes epoch %d now, without waiting for the other regions' logs (an unplanned move: late writes of the old owner merge through corrections)\n", *rng, cur.Region, cur.Epoch)
		return nil
	case "drain":
		if *from == "" || *to == "" || *from == *to {
			return errors.New("pins drain: need --from REGION --to OTHER_REGION")
		}
		moved, err := d.Drain(ctx, *from, *to, cfg.NotBefore(time.Now()), moveOpts(*unplanned)...)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "moved %d ranges from %s to %s (epochs bumped; %s writes them after notBefore%s)\n", len(moved), *from, *to, *to, catchUpNote(!*unplanned))
		return nil
	case "rebalance":
		return rebalance(ctx, d, cfg, stdout)
	}
	return fmt.Errorf("pins: unknown subcommand %q (list, move, drain, settle, rebalance)", args[0])
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
		return err
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
	return json.Unmarshal(b, out)
}

func regions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likectl regions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var etcd etcdFlags
	etcd.register(fs)
	var ac adminClient
	ac.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, done, err := directory(ctx, etcd, 256)
	if err != nil {
		return err
	}
	defer done()
	live, err := d.Regions(ctx)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		fmt.Fprintln(stdout, "no live regions (no region holds a lease)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGION\tHTTP\tLEASE\tKEEPALIVE AGO\tPINS\tASOF\tAGG LAG\tREPLICATION (peer: lag events, last error)")
	for _, r := range live {
		var st struct {
			AsOf          string `json:"asOf"`
			AggregatorLag uint64 `json:"aggregatorLagEvents"`
			KeepaliveAgo  string `json:"lastKeepaliveAgo"`
			PinsOwned     int    `json:"pinsOwned"`
			CatchingUp    int    `json:"pinsCatchingUp"`
			Peers         []struct {
				Region    string
				LagEvents uint64
				LastError string
				Active    bool
			} `json:"replication"`
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := adminGet(cctx, &ac, http.MethodGet, r.HTTP+"/v1/admin/status", nil, &st)
		cancel()
		if err != nil {
			fmt.Fprintf(tw, "%s\t%s\talive\t?\t?\t?\t?\tstatus unavailable: %v\n", r.Name, r.HTTP, err)
			continue
		}
		var peers []string
		for _, p := range st.Peers {
			if !p.Active {
				continue
			}
			s := fmt.Sprintf("%s: %d", p.Region, p.LagEvents)
			if p.LastError != "" {
				s += " (" + p.LastError + ")"
			}
			peers = append(peers, s)
		}
		pins := fmt.Sprint(st.PinsOwned)
		if st.CatchingUp > 0 {
			pins += fmt.Sprintf(" (%d catching up)", st.CatchingUp)
		}
		fmt.Fprintf(tw, "%s\t%s\talive\t%s\t%s\t%s\t%d\t%s\n", r.Name, r.HTTP, st.KeepaliveAgo, pins, st.AsOf, st.AggregatorLag, strings.Join(peers, "; "))
	}
	return tw.Flush()
}

func reconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("likectl reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "the region's HTTP address")
	item := fs.String("item", "", "one item (default: every item)")
	heal := fs.Bool("heal", false, "append healing events for mismatches (the region must be quiescent)")
	var ac adminClient
	ac.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var rep struct {
		Region     string `json:"region"`
		Items      int    `json:"itemsChecked"`
		Healed     int    `json:"healed"`
		Mismatched []struct {
			Item     string `json:"itemId"`
			Liked    int64  `json:"likedEdges"`
			Cells    int64  `json:"cellSum"`
			Mismatch int64  `json:"mismatch"`
		} `json:"mismatched"`
	}
	body := map[string]any{"heal": *heal}
	if *item != "" {
		body["itemId"] = *item
	}
	if err := adminGet(ctx, &ac, http.MethodPost, strings.TrimRight(*url, "/")+"/v1/admin/reconcile", body, &rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "region %s: %d items checked, %d mismatched, %d healed\n", rep.Region, rep.Items, len(rep.Mismatched), rep.Healed)
	for _, m := range rep.Mismatched {
		fmt.Fprintf(stdout, "  %q: %d liked edges, cells sum to %d (mismatch %+d)\n", m.Item, m.Liked, m.Cells, m.Mismatch)
	}
	if len(rep.Mismatched) > 0 && rep.Healed == 0 {
		return fmt.Errorf("%d mismatched items (rerun with --heal on a quiescent region)", len(rep.Mismatched))
	}
	return nil
}

// rebalance moves every range that is away from its home back to it, as
// planned moves, when the home is live and not draining (what failback does
// after --failback-after, on demand).
func rebalance(ctx context.Context, d *etcdepoch.Directory, cfg epoch.Config, stdout io.Writer) error {
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
	ok := map[string]bool{}
	for _, ri := range live {
		ok[ri.Name] = !ri.Draining
	}
	ps, err := d.Pins(ctx)
	if err != nil {
		return err
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
		fmt.Fprintf(stdout, "range %d: %s epoch %d → home %s epoch %d (planned)\n", p.Range, p.Region, p.Epoch, np.Region, np.Epoch)
	}
	fmt.Fprintf(stdout, "moved %d ranges home; %d away ranges left (home not live, draining, or a move in progress)\n", moved, skipped)
	return nil
}
