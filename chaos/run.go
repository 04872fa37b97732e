package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/likes-dev/likes/chaos/proxy"
	"github.com/likes-dev/likes/epoch"
)

// Options configures a run. Zero fields take defaults.
type Options struct {
	Seed     uint64
	Duration time.Duration // length of the nemesis schedule (default 60s; soak: 10m)
	Soak     bool          // a long run: bigger defaults, schedule repeats
	Out      string        // report, history and process logs (default: a new temp folder)
	Break    string        // passed to the regions as --unsafe-break
	Binary   string        // a prebuilt likesd (default: go build into the work folder)
	// Schedule replaces the seeded schedule (targeted runs). Kinds limits the
	// seeded schedule to some nemeses.
	Schedule []Episode
	Kinds    []string
	Workload WorkloadConfig
	// Tail is how long the load keeps running after the last episode (default 3s).
	Tail     time.Duration
	LeaseTTL time.Duration // default 2s
	Regions  []string      // default us, eu, ap
	KeepData bool          // keep the data folders even when the run passes
	Progress io.Writer     // progress lines (default: none)
	// Engines, when set, puts every region on Cassandra + Kafka + Redis
	// (engines.go); the disk-full nemesis is left out of the schedule.
	Engines *Engines
	// Nodes is how many likesd nodes serve a region (default 1; several
	// need Engines). A run with such a region also draws the node nemeses.
	Nodes map[string]int
	// ProgressEvery is the period of progress lines (default 5s).
	ProgressEvery time.Duration
}

// OpStats summarizes the client ops.
type OpStats struct {
	Total         int            `json:"total"`
	Acked         int            `json:"acknowledged"`
	AckedWrites   int            `json:"acknowledgedWrites"` // likes, unlikes, retractions
	Rejected      int            `json:"rejected"`
	Indeterminate int            `json:"indeterminate"`
	Unsent        int            `json:"unsent"`
	Attempts      int            `json:"attempts"`
	Duplicated    int            `json:"duplicatedOps"`
	StaleRetries  int            `json:"staleRetries"`
	PostErasure   int            `json:"postErasureWrites"`
	ByKind        map[string]int `json:"byKind"`
	ByCode        map[string]int `json:"lastCodes"`
	Samples       int            `json:"countSamples"`
}

// Report is the JSON report of a run.
type Report struct {
	Seed         uint64                 `json:"seed"`
	Duration     string                 `json:"duration"`
	Break        string                 `json:"break,omitempty"`
	Soak         bool                   `json:"soak,omitempty"`
	Started      time.Time              `json:"started"`
	Finished     time.Time              `json:"finished"`
	Elapsed      string                 `json:"elapsed"`
	Replay       string                 `json:"replay"`
	Schedule     []Episode              `json:"schedule"`
	Faults       []NemesisEvent         `json:"faults"`
	FaultsByKind map[string]int         `json:"faultsByKind"`
	Links        map[string]proxy.Stats `json:"links"`
	Ops          OpStats                `json:"ops"`
	PinVersions  int                    `json:"pinVersions"`
	Windows      []FailoverWindow       `json:"failoverWindows"`
	Check        *CheckResult           `json:"check"`
	Mismatches   int                    `json:"mismatches"`
	// ConvergedIn is the time from the final heal until every region was
	// quiet (erasures done, no lag, asOf past the heal); empty if it never was.
	ConvergedIn time.Duration    `json:"convergedInNs,omitempty"`
	Pass        bool             `json:"pass"`
	Final       map[string]int64 `json:"finalCounts"` // item → count at the first region
	OutDir      string           `json:"outDir"`
	WorkDir     string           `json:"workDir,omitempty"`
	History     string           `json:"history"`
	Logs        []string         `json:"processLogs"`
}

// ReplayCommand is the command line that replays a seed.
func ReplayCommand(o Options) string {
	s := fmt.Sprintf("go run ./chaos/cmd/likes-chaos --seed %d --duration %v", o.Seed, o.Duration)
	if o.Soak {
		s += " --soak"
	}
	if o.Break != "" {
		s += " --break " + o.Break
	}
	if o.Engines != nil {
		s += " --engines"
	}
	if n := NodesFlag(o.Nodes); n != "" {
		s += " --nodes " + n
	}
	if len(o.Kinds) > 0 {
		s += " --nemeses " + strings.Join(o.Kinds, ",")
	}
	if o.Workload.PErase != 0 {
		s += fmt.Sprintf(" --p-erase %g", o.Workload.PErase)
	}
	if o.Workload.PStale != 0 {
		s += fmt.Sprintf(" --p-stale %g", o.Workload.PStale)
	}
	if o.Schedule != nil {
		s += "   (this run used a fixed schedule, see report.json; the command replays the seeded one)"
	}
	return s
}

func (o *Options) defaults() {
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
		if o.Soak {
			o.Duration = 10 * time.Minute
		}
	}
	if o.Tail == 0 {
		o.Tail = 3 * time.Second
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if len(o.Regions) == 0 {
		o.Regions = []string{"us", "eu", "ap"}
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 5 * time.Second
	}
	if o.Soak && o.Workload.Clients == 0 {
		o.Workload.Clients = 16
	}
}

// NodesFlag is nodes as the --nodes flag spells it (us=2,eu=2), in name
// order; regions of one node are left out.
func NodesFlag(nodes map[string]int) string {
	var parts []string
	for _, r := range sortedKeys(nodes) {
		if nodes[r] > 1 {
			parts = append(parts, fmt.Sprintf("%s=%d", r, nodes[r]))
		}
	}
	return strings.Join(parts, ",")
}

// ParseNodes reads the --nodes flag (region=count,…).
func ParseNodes(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		name, count, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k, err := strconv.Atoi(count)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("want region=count, got %q", kv)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("region %s named twice", name)
		}
		out[name] = k
	}
	return out, nil
}

// validate refuses options that cannot be run, before anything starts.
func (o *Options) validate() error {
	multi := false
	for r, k := range o.Nodes {
		if !slices.Contains(o.Regions, r) {
			return fmt.Errorf("chaos: nodes for %q, which is not a region of the run (%s)", r, strings.Join(o.Regions, ","))
		}
		if k < 1 || k > 4 {
			return fmt.Errorf("chaos: region %s on %d nodes: want 1 to 4", r, k)
		}
		if k > 1 && o.Engines == nil {
			return fmt.Errorf("chaos: region %s on %d nodes needs --engines (a region on the embedded store is one process)", r, k)
		}
		multi = multi || k > 1
	}
	for _, k := range o.Kinds {
		if slices.Contains(NodeNemeses, k) && !multi {
			return fmt.Errorf("chaos: the %s nemesis needs a region of several nodes (--nodes)", k)
		}
	}
	return nil
}

// Run runs the suite once: it builds likesd (unless Options.Binary), starts
// the cluster, runs the load and the nemesis schedule, heals, quiesces,
// checks, and writes report.json, history.jsonl and summary.txt into the
// output folder. Every process is killed before it returns. The error is
// for runs that could not be carried out; violations are in the report.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	o.defaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "chaos: "+format+"\n", args...)
		}
	}
	work, err := os.MkdirTemp("", "likes-chaos-work-")
	if err != nil {
		return nil, err
	}
	if o.Out == "" {
		if o.Out, err = os.MkdirTemp("", fmt.Sprintf("likes-chaos-%d-", o.Seed)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	rep = &Report{Seed: o.Seed, Duration: o.Duration.String(), Break: o.Break, Soak: o.Soak, Started: time.Now(),
		Replay: ReplayCommand(o), OutDir: o.Out, WorkDir: work, History: filepath.Join(o.Out, "history.jsonl")}
	keep := o.KeepData
	defer func() {
		if !keep && (errors.Is(err, context.Canceled) || err == nil && rep.Pass) {
			_ = os.RemoveAll(work)
			rep.WorkDir = ""
		}
	}()

	if o.Binary == "" {
		logf("building likesd into %s", work)
		if o.Binary, err = BuildLikesd(ctx, work); err != nil {
			return rep, err
		}
	}
	var eng *engineRun
	if o.Engines != nil {
		if o.Schedule == nil {
			all := len(o.Kinds) == 0
			if o.Kinds, err = engineKinds(o.Kinds); err != nil {
				return rep, err
			}
			if all && NodesFlag(o.Nodes) != "" {
				o.Kinds = append(o.Kinds, NodeNemeses...)
			}
		}
		logf("regions on the engines: Cassandra %s, Kafka %s, Redis %s", strings.Join(o.Engines.Cassandra, ","),
			strings.Join(o.Engines.Kafka, ","), o.Engines.Redis)
		eng, err = o.Engines.prepare(ctx, o.Seed, o.Regions, logf)
		// Registered before the cluster's Close, so it runs after it: a
		// passing run's keyspaces and topics are dropped; a failing one's kept.
		defer func() {
			if eng != nil && !keep && err == nil && rep.Pass {
				if derr := eng.drop(); derr != nil {
					logf("dropping the run's keyspaces and topics: %v", derr)
				}
			}
		}()
		if err != nil {
			return rep, err
		}
	}
	rep.Started = time.Now() // the build is not part of the run
	hist, err := NewHistory(rep.History)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := hist.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	secret := fmt.Sprintf("chaos-secret-%020d", o.Seed) // ≥ 32 bytes: likesd run refuses shorter ones
	sched := o.Schedule
	if sched == nil {
		sched = PlanSchedule(o.Seed, o.Duration, o.Regions, o.Nodes, o.Kinds, o.LeaseTTL)
	}
	rep.Schedule = sched
	hist.Write("note", map[string]any{"seed": o.Seed, "replay": rep.Replay, "schedule": sched})

	logf("seed %d: starting etcd and %d regions (%s), links through fault-injecting proxies", o.Seed, len(o.Regions), strings.Join(o.Regions, ","))
	ccfg := ClusterConfig{
		Binary: o.Binary, Dir: work, LogDir: filepath.Join(o.Out, "logs"), Regions: o.Regions, Secret: secret,
		LeaseTTL: o.LeaseTTL, Window: 100 * time.Millisecond, AntiEntropy: 2 * time.Second,
		Partitions: 16, Ranges: 64, Unsafe: o.Break, Logf: logf,
	}
	if eng != nil {
		ccfg.EngineArgs = eng.args
	}
	ccfg.Nodes = o.Nodes
	cl, err := StartCluster(ctx, ccfg)
	if cl != nil {
		rep.Logs = cl.LogFiles()
	}
	if err != nil {
		return rep, err
	}
	defer cl.Close()
	rep.Logs = cl.LogFiles()
	pins := WatchPins(ctx, cl.Etcd(), epoch.DefaultPrefix, hist)
	defer pins.Close()

	urls := map[string]string{}
	for _, r := range o.Regions {
		urls[r] = cl.Region(r).URL()
	}
	wl := NewWorkload(o.Workload, o.Seed, o.Regions, urls, []byte(secret), cl.AdminToken(), hist)
	nem := NewNemesis(cl, hist, logf)

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	start := time.Now()
	wl.Start(runCtx)
	var progWG sync.WaitGroup
	progDone := make(chan struct{})
	progWG.Add(1)
	go func() {
		defer progWG.Done()
		t := time.NewTicker(o.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-progDone:
				return
			case <-t.C:
				is, ack, ind := wl.Progress()
				cur := nem.Current()
				if cur == "" {
					cur = "-"
				}
				logf("t=%-4v ops=%d acked=%d indeterminate=%d nemesis: %s", time.Since(start).Round(time.Second), is, ack, ind, cur)
			}
		}
	}()
	if nem.Run(runCtx, start, sched) == nil { // an error here is only the end of ctx
		_ = sleep(runCtx, o.Tail)
	}
	wl.Stop()
	close(progDone)
	progWG.Wait()
	if ctx.Err() != nil {
		return rep, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	logf("load stopped after %v; healing every link and process", time.Since(start).Round(time.Second))
	if err := cl.HealAll(ctx); err != nil {
		return rep, fmt.Errorf("heal: %w", err)
	}
	healed := time.Now()

	ops := wl.Ops()
	in := CheckInput{Regions: o.Regions, Ranges: 64, TTL: o.LeaseTTL, MaxSkew: cl.EpochConfig().MaxSkew,
		Ops: ops, Nemesis: nem.Events(), Planned: nem.Planned(), Samples: wl.Samples(), Buttons: wl.Buttons(), Nodes: map[string]string{}}
	for _, r := range cl.MultiNode() {
		for _, n := range cl.Region(r).Nodes {
			in.Nodes[n.Name] = r
		}
	}
	logf("waiting for erasures to finish and the regions to quiesce")
	in.Converge = waitErasures(ctx, cl, ops, 30*time.Second)
	if in.Converge == nil {
		quiet := 90 * time.Second
		if o.Engines != nil { // Cassandra's staleness is seconds, not 300 ms (BENCHMARKS.md)
			quiet = 3 * time.Minute
		}
		_, in.Converge = cl.Quiesce(ctx, healed, quiet)
	}
	if in.Converge == nil {
		rep.ConvergedIn = time.Since(healed)
	}
	logf("reading final counts, who-liked lists and logs")
	items := map[string]bool{}
	for _, op := range ops {
		if op.Item != "" {
			items[op.Item] = true
		}
	}
	if in.Logs, err = fetchLogs(ctx, cl); err != nil {
		return rep, err
	}
	for _, evs := range in.Logs {
		for _, ev := range evs {
			if ev.Item != "" {
				items[ev.Item] = true
			}
		}
	}
	if in.Final, in.NodeFinal, err = finalReads(ctx, cl, sortedKeys(items)); err != nil {
		return rep, err
	}
	if in.Converge == nil {
		// A recount needs a converged region; after a failed quiesce the
		// convergence violation already says it all.
		logf("reconciling every region (a recount of every item's edges against its cells, no healing)")
		in.Reconcile = map[string][]Recount{}
		for _, r := range o.Regions {
			if in.Reconcile[r], err = cl.Reconcile(ctx, r); err != nil {
				return rep, err
			}
		}
	}
	if in.Pins, err = pins.Sync(ctx, 10*time.Second); err != nil {
		return rep, fmt.Errorf("pin history: %w", err)
	}
	for i, v := range in.Pins {
		in.Pins[i].Planned = in.Planned[PlannedMove{v.Range, v.Epoch}]
	}
	res := Check(in)
	if err := writeForensics(o.Out, in); err != nil {
		return rep, err
	}

	rep.Finished = time.Now()
	rep.Elapsed = rep.Finished.Sub(rep.Started).Round(time.Second).String()
	rep.Faults = in.Nemesis
	rep.FaultsByKind = map[string]int{}
	for _, e := range in.Nemesis {
		rep.FaultsByKind[e.Kind]++
	}
	rep.Links = cl.LinkStats()
	rep.Ops = opStats(ops, len(in.Samples))
	rep.PinVersions = len(in.Pins)
	rep.Windows = res.Windows
	rep.Check = res
	rep.Mismatches = 0
	for _, n := range res.ByCheck {
		rep.Mismatches += n
	}
	rep.Pass = rep.Mismatches == 0
	rep.Final = map[string]int64{}
	for it, fi := range in.Final[o.Regions[0]] {
		rep.Final[it] = fi.Count
	}
	if !rep.Pass {
		keep = true
	}
	if err := writeReport(rep); err != nil {
		return rep, err
	}
	return rep, nil
}

func opStats(ops []*Op, samples int) OpStats {
	s := OpStats{ByKind: map[string]int{}, ByCode: map[string]int{}, Samples: samples}
	for _, op := range ops {
		s.Total++
		s.ByKind[op.Kind]++
		s.Attempts += op.Attempts
		s.StaleRetries += op.StaleRetries
		if op.Duplicates > 0 {
			s.Duplicated++
		}
		if op.PostErasure {
			s.PostErasure++
		}
		if op.LastCode != "" {
			s.ByCode[op.LastCode]++
		}
		switch op.Outcome {
		case OutcomeAck:
			s.Acked++
			if op.Kind != KindErase {
				s.AckedWrites++
			}
		case OutcomeReject:
			s.Rejected++
		case OutcomeIndeterminate:
			s.Indeterminate++
		case OutcomeUnsent:
			s.Unsent++
		}
	}
	return s
}

// waitErasures waits until every erasure job the regions know of is done.
func waitErasures(ctx context.Context, cl *Cluster, ops []*Op, timeout time.Duration) error {
	var users []string
	for _, op := range ops {
		if op.Kind == KindErase && (op.Outcome == OutcomeAck || op.Outcome == OutcomeIndeterminate) {
			users = append(users, op.User)
		}
	}
	return poll(ctx, timeout, 250*time.Millisecond, func() error {
		for _, u := range users {
			for _, r := range cl.Regions() {
				var job struct {
					State string `json:"state"`
				}
				err := cl.getJSON(ctx, cl.Region(r), "/v1/users/"+url.PathEscape(u)+"/erasure", true, &job)
				if err != nil {
					if strings.Contains(err.Error(), ": 404 ") {
						continue
					}
					return err
				}
				if job.State != "done" {
					return fmt.Errorf("erasure of %s at %s is %s", u, r, job.State)
				}
			}
		}
		return nil
	})
}

// fetchLogs reads every region's whole committed log.
func fetchLogs(ctx context.Context, cl *Cluster) (map[string][]LogEvent, error) {
	out := map[string][]LogEvent{}
	for _, r := range cl.Regions() {
		var evs []LogEvent
		parts := 1
		for p := 0; p < parts; p++ {
			after := uint64(0)
			for range 100000 {
				var page struct {
					Partitions int        `json:"partitions"`
					Head       uint64     `json:"head"`
					Events     []LogEvent `json:"events"`
				}
				path := fmt.Sprintf("/v1/admin/log?partition=%d&after=%d&limit=10000", p, after)
				if err := cl.getJSON(ctx, cl.Region(r), path, true, &page); err != nil {
					return nil, fmt.Errorf("log of %s: %w", r, err)
				}
				parts = page.Partitions
				evs = append(evs, page.Events...)
				if len(page.Events) == 0 {
					break
				}
				after = page.Events[len(page.Events)-1].Pos
				if after >= page.Head {
					break
				}
			}
		}
		out[r] = evs
	}
	return out, nil
}

// finalReads reads every item's count and who-liked list at every region,
// and at every node of a region of several (node → item). A
// count cache may serve an entry computed before convergence for up to a
// second, so the reads repeat (bounded) until the regions agree.
func finalReads(ctx context.Context, cl *Cluster, items []string) (regions, nodes map[string]map[string]FinalItem, err error) {
	read := func(at endpoint) (map[string]FinalItem, error) {
		m := map[string]FinalItem{}
		for _, it := range items {
			fi, err := readItem(ctx, cl, at, it)
			if err != nil {
				return nil, err
			}
			m[it] = fi
		}
		return m, nil
	}
	for attempt := 0; attempt < 6; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, 1200*time.Millisecond); err != nil {
				return nil, nil, err
			}
		}
		regions, nodes = map[string]map[string]FinalItem{}, map[string]map[string]FinalItem{}
		for _, r := range cl.Regions() {
			if regions[r], err = read(cl.Region(r)); err != nil {
				return nil, nil, err
			}
		}
		for _, r := range cl.MultiNode() {
			for _, n := range cl.Region(r).Nodes {
				if nodes[n.Name], err = read(n); err != nil {
					return nil, nil, err
				}
			}
		}
		// Every region and every node must answer alike.
		all := maps.Clone(regions)
		maps.Copy(all, nodes)
		if agree(all, slices.Sorted(maps.Keys(all)), items) {
			break
		}
	}
	return regions, nodes, nil
}

func agree(f map[string]map[string]FinalItem, regions, items []string) bool {
	for _, it := range items {
		ref := f[regions[0]][it]
		for _, r := range regions {
			fi := f[r][it]
			if fi.Count != ref.Count || fi.Count != int64(len(fi.Likers)) || diff(fi.Likers, ref.Likers) != "" {
				return false
			}
		}
	}
	return true
}

func readItem(ctx context.Context, cl *Cluster, reg endpoint, item string) (FinalItem, error) {
	var fi FinalItem
	var cb struct {
		Count int64 `json:"count"`
	}
	if err := cl.getJSON(ctx, reg, "/v1/items/"+url.PathEscape(item)+"/count", false, &cb); err != nil {
		return fi, err
	}
	fi.Count = cb.Count
	cursor := ""
	for range 10000 {
		var page struct {
			UserIDs    []string `json:"userIds"`
			NextCursor string   `json:"nextCursor"`
		}
		q := "?limit=500"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		if err := cl.getJSON(ctx, reg, "/v1/items/"+url.PathEscape(item)+"/likes"+q, false, &page); err != nil {
			return fi, err
		}
		fi.Likers = append(fi.Likers, page.UserIDs...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	sort.Strings(fi.Likers)
	if fi.Likers == nil {
		fi.Likers = []string{}
	}
	return fi, nil
}

// writeForensics saves what the checker judged: every region's log (one JSON
// event per line, with its region), the final reads and the pin history.
func writeForensics(dir string, in CheckInput) error {
	f, err := os.Create(filepath.Join(dir, "region-logs.jsonl"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range in.Regions {
		for _, ev := range in.Logs[r] {
			if err := enc.Encode(struct {
				Region string `json:"region"`
				LogEvent
			}{r, ev}); err != nil {
				_ = f.Close()
				return err
			}
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	var conv string
	if in.Converge != nil {
		conv = in.Converge.Error()
	}
	b, err := json.MarshalIndent(forensics{Regions: in.Regions, Ranges: in.Ranges, TTL: in.TTL, MaxSkew: in.MaxSkew,
		Converge: conv, Final: in.Final, NodeFinal: in.NodeFinal, Nodes: in.Nodes, Reconcile: in.Reconcile, Pins: in.Pins}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "final.json"), b, 0o644)
}

// forensics is final.json.
type forensics struct {
	Regions  []string                        `json:"regions"`
	Ranges   int                             `json:"ranges"`
	TTL      time.Duration                   `json:"ttl"`
	MaxSkew  time.Duration                   `json:"maxSkew"`
	Converge string                          `json:"convergeError,omitempty"`
	Final    map[string]map[string]FinalItem `json:"final"`
	// NodeFinal and Nodes: the reads at each node of a region of several.
	NodeFinal map[string]map[string]FinalItem `json:"nodeFinal,omitempty"`
	Nodes     map[string]string               `json:"nodes,omitempty"`
	Reconcile map[string][]Recount            `json:"reconcile,omitempty"`
	Pins      []PinVersion                    `json:"pins"`
}

// LoadCheckInput rebuilds a run's checker input from its output folder
// (history.jsonl, region-logs.jsonl, final.json), so a run can be re-judged
// without running it again.
func LoadCheckInput(dir string) (CheckInput, error) {
	var in CheckInput
	b, err := os.ReadFile(filepath.Join(dir, "final.json"))
	if err != nil {
		return in, err
	}
	var f forensics
	if err := json.Unmarshal(b, &f); err != nil {
		return in, fmt.Errorf("final.json: %w", err)
	}
	if len(f.Regions) == 0 || f.Ranges < 1 {
		return in, errors.New("final.json names no regions or ranges (written by an older version of the suite?)")
	}
	in.Regions, in.Ranges, in.TTL, in.MaxSkew, in.Final, in.Pins = f.Regions, f.Ranges, f.TTL, f.MaxSkew, f.Final, f.Pins
	in.NodeFinal, in.Nodes, in.Reconcile = f.NodeFinal, f.Nodes, f.Reconcile
	if f.Converge != "" {
		in.Converge = errors.New(f.Converge)
	}
	in.Planned = map[PlannedMove]bool{}
	for _, v := range in.Pins {
		if v.Planned {
			in.Planned[PlannedMove{v.Range, v.Epoch}] = true
		}
	}
	if err := eachLine(filepath.Join(dir, "history.jsonl"), func(line []byte) error {
		var rec struct {
			Type string          `json:"type"`
			Rec  json.RawMessage `json:"rec"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		switch rec.Type {
		case "op":
			op := &Op{}
			if err := json.Unmarshal(rec.Rec, op); err != nil {
				return err
			}
			in.Ops = append(in.Ops, op)
		case "nemesis":
			var e NemesisEvent
			if err := json.Unmarshal(rec.Rec, &e); err != nil {
				return err
			}
			in.Nemesis = append(in.Nemesis, e)
		case "read":
			var s Sample
			if err := json.Unmarshal(rec.Rec, &s); err != nil {
				return err
			}
			in.Samples = append(in.Samples, s)
		case "button":
			var b ButtonRead
			if err := json.Unmarshal(rec.Rec, &b); err != nil {
				return err
			}
			in.Buttons = append(in.Buttons, b)
		}
		return nil
	}); err != nil {
		return in, fmt.Errorf("history.jsonl: %w", err)
	}
	in.Logs = map[string][]LogEvent{}
	if err := eachLine(filepath.Join(dir, "region-logs.jsonl"), func(line []byte) error {
		var ev struct {
			Region string `json:"region"`
			LogEvent
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return err
		}
		in.Logs[ev.Region] = append(in.Logs[ev.Region], ev.LogEvent)
		return nil
	}); err != nil {
		return in, fmt.Errorf("region-logs.jsonl: %w", err)
	}
	return in, nil
}

func eachLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

func writeReport(rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rep.OutDir, "report.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(rep.OutDir, "summary.txt"), []byte(rep.Summary()), 0o644)
}

// Summary is the human summary of a report.
func (rep *Report) Summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !rep.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "likes chaos run: %s (seed %d, schedule %s, elapsed %s", verdict, rep.Seed, rep.Duration, rep.Elapsed)
	if rep.Break != "" {
		fmt.Fprintf(&b, ", --break %s", rep.Break)
	}
	b.WriteString(")\n")
	o := rep.Ops
	fmt.Fprintf(&b, "  operations:        %d (%d attempts; %d acknowledged, %d rejected, %d indeterminate, %d unsent)\n",
		o.Total, o.Attempts, o.Acked, o.Rejected, o.Indeterminate, o.Unsent)
	fmt.Fprintf(&b, "                     by kind %v; %d sent as concurrent duplicates, %d stale retries, %d post-erasure writes, %d count samples\n",
		sortedMap(o.ByKind), o.Duplicated, o.StaleRetries, o.PostErasure, o.Samples)
	fmt.Fprintf(&b, "  acknowledged writes: %d\n", o.AckedWrites)
	fmt.Fprintf(&b, "  faults injected:   %d %v\n", len(rep.Faults), sortedMap(rep.FaultsByKind))
	for _, f := range rep.Faults {
		fmt.Fprintf(&b, "    %s %-22s %s", f.Start.Format("15:04:05.0"), f.Kind, f.Detail)
		if f.Err != "" {
			fmt.Fprintf(&b, " (error: %s)", f.Err)
		}
		b.WriteString("\n")
	}
	if c := rep.Check; c != nil {
		fmt.Fprintf(&b, "  pins: %d versions, %d planned moves, %d unplanned (failover windows excuse %d acknowledged ops)\n",
			rep.PinVersions, c.PlannedMoves, c.UnplannedMoves, c.ExcusedOps)
		fmt.Fprintf(&b, "  checked: %d items, %d edges with history, %d erased users, %d LIKED edges, %d writes against pins, %d asOf samples, %d session reads, %d regions reconciled\n",
			c.ItemsChecked, c.EdgesChecked, c.ErasedUsers, c.FinalLikedEdges, c.EventsChecked, c.SamplesChecked, c.SessionReads, c.Reconciled)
		fmt.Fprintf(&b, "  final mismatches:  %d", rep.Mismatches)
		if len(c.ByCheck) > 0 {
			fmt.Fprintf(&b, " %v", sortedMap(c.ByCheck))
		}
		b.WriteString("\n")
		for i, v := range c.Violations {
			if i == 30 {
				fmt.Fprintf(&b, "    … %d more in report.json\n", len(c.Violations)-30)
				break
			}
			fmt.Fprintf(&b, "    %s\n", v)
		}
	}
	fmt.Fprintf(&b, "  report:  %s\n  history: %s\n", filepath.Join(rep.OutDir, "report.json"), rep.History)
	if rep.WorkDir != "" {
		fmt.Fprintf(&b, "  data kept in %s\n", rep.WorkDir)
	}
	fmt.Fprintf(&b, "  replay:  %s\n", rep.Replay)
	return b.String()
}

func sortedMap(m map[string]int) string {
	ks := sortedKeys(m)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// ErrViolations is returned by the command when a run finds violations.
var ErrViolations = errors.New("chaos: guarantees violated")
