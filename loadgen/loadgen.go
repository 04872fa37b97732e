package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/client"
)

// Phase names.
const (
	PhaseUniform = "uniform-writes"
	PhaseViral   = "viral-writes"
	PhaseReads   = "count-reads"
)

// AllPhases is the default phase order.
var AllPhases = []string{PhaseUniform, PhaseViral, PhaseReads}

// Config configures a Run. Only URL and Secret are required.
type Config struct {
	// URL is the region's base URL, e.g. http://127.0.0.1:8080. Loopback only.
	URL string
	// Secret signs the users' bearer tokens (auth.Sign); it must be the server's.
	Secret []byte
	// Workers is the number of concurrent request loops (default 64).
	Workers int
	// Users in all (default Workers*50), split evenly over workers; each user is
	// driven by exactly one worker.
	Users int
	// Items is the number of distinct items of the uniform and read phases
	// (default 10000).
	Items int
	// PhaseDuration bounds each phase (default 10s).
	PhaseDuration time.Duration
	// Phases to run, in order (default AllPhases).
	Phases []string
	// SampleEvery is the staleness sampler's period during write phases
	// (default 50ms).
	SampleEvery time.Duration
	// RequestTimeout bounds one request (default 10s).
	RequestTimeout time.Duration
	// RunID prefixes user ids, item ids and idempotency keys so runs against the
	// same data stay independent (default: derived from the start time).
	RunID string
	// Seed seeds the random choices (default: from the start time).
	Seed uint64
	// Client overrides the HTTP client (default NewClient(Workers, RequestTimeout)).
	Client *http.Client
	// ServerCPU, if set, returns the server process's cumulative CPU time (user +
	// system); each phase then reports server CPU per successful request, a
	// figure that CPU contention from other processes distorts far less than
	// throughput.
	ServerCPU func() (time.Duration, error)
	// Progress, if set, is called every ProgressEvery (default 1s) during a phase.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// ButtonURL, if set, is another region: every ButtonEvery-th uniform write
	// is followed at once by the actor's button read there, with the
	// Likes-Session token the writes handed out (a real client's read after
	// its write through another region); the phase reports where those reads
	// were answered from and any that missed the write.
	ButtonURL   string
	ButtonEvery int
}

// Progress is a snapshot of a running phase.
type Progress struct {
	Phase    string
	Elapsed  time.Duration
	Requests int64
	OK       int64
	Errors   int64
	// Rate is successful requests per second over the last interval.
	Rate float64
}

func (c *Config) defaults() error {
	if _, err := CheckLoopback(c.URL); err != nil {
		return err
	}
	c.URL = strings.TrimRight(c.URL, "/")
	if len(c.Secret) == 0 {
		return errors.New("loadgen: Config.Secret is required")
	}
	if c.Workers == 0 {
		c.Workers = 64
	}
	if c.Users == 0 {
		c.Users = c.Workers * 50
	}
	if c.Items == 0 {
		c.Items = 10000
	}
	if c.PhaseDuration == 0 {
		c.PhaseDuration = 10 * time.Second
	}
	if c.Workers < 1 || c.Workers > 4096 || c.Users < 1 || c.Items < 1 || c.PhaseDuration < 0 || c.PhaseDuration > time.Hour {
		return fmt.Errorf("loadgen: need 1 <= workers <= 4096, users >= 1, items >= 1, 0 <= duration <= 1h (got %d, %d, %d, %v)",
			c.Workers, c.Users, c.Items, c.PhaseDuration)
	}
	if c.Phases == nil {
		c.Phases = AllPhases
	}
	for _, p := range c.Phases {
		if p != PhaseUniform && p != PhaseViral && p != PhaseReads {
			return fmt.Errorf("loadgen: unknown phase %q", p)
		}
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 50 * time.Millisecond
	}
	if c.ButtonURL != "" {
		if _, err := CheckLoopback(c.ButtonURL); err != nil {
			return err
		}
		c.ButtonURL = strings.TrimRight(c.ButtonURL, "/")
	}
	if c.ButtonEvery <= 0 {
		c.ButtonEvery = 4
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	now := time.Now()
	if c.RunID == "" {
		c.RunID = strconv.FormatInt(now.UnixNano()/1e6, 36)
	}
	if c.Seed == 0 {
		c.Seed = uint64(now.UnixNano())
	}
	if c.Client == nil {
		c.Client = NewClient(c.Workers, c.RequestTimeout)
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = time.Second
	}
	return nil
}

type user struct {
	id    string
	token string // bearer token
}

type runner struct {
	cfg   Config
	users [][]user // per worker
	viral string
	// api and buttons are the client package's clients of URL and ButtonURL,
	// without retries: every request is one measured attempt.
	api, buttons *client.Client
}

// newClient is a client of base over cfg.Client that never retries (the
// bench counts every attempt) and has no per-attempt timeout of its own
// (cfg.Client's Timeout bounds a request).
func newClient(cfg Config, base string) (*client.Client, error) {
	return client.New(base, client.WithHTTPClient(cfg.Client),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 1, AttemptTimeout: -1}))
}

// Run drives the region through cfg.Phases and returns the report. When ctx
// ends early it stops at once and returns the partial report (Interrupted set)
// and a nil error; an error means the run could not start.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, viral: "lg-" + cfg.RunID + "-viral"}
	var err error
	if r.api, err = newClient(cfg, cfg.URL); err != nil {
		return nil, err
	}
	if cfg.ButtonURL != "" {
		if r.buttons, err = newClient(cfg, cfg.ButtonURL); err != nil {
			return nil, err
		}
	}
	if err := r.preflight(ctx); err != nil {
		return nil, err
	}
	per := (cfg.Users + cfg.Workers - 1) / cfg.Workers
	ttl := time.Duration(len(cfg.Phases)+1)*cfg.PhaseDuration + time.Hour
	now := time.Now()
	r.users = make([][]user, cfg.Workers)
	for w := range r.users {
		r.users[w] = make([]user, per)
		for i := range r.users[w] {
			id := fmt.Sprintf("lg-%s-u%d", cfg.RunID, w*per+i)
			tok, err := auth.Sign(cfg.Secret, id, false, ttl, now)
			if err != nil {
				return nil, err
			}
			r.users[w][i] = user{id: id, token: tok}
		}
	}
	rep := &Report{
		URL: cfg.URL, Workers: cfg.Workers, Users: per * cfg.Workers, Items: cfg.Items,
		PhaseDurationS: cfg.PhaseDuration.Seconds(), RunID: cfg.RunID, ViralItem: r.viral, Started: now.UTC(),
	}
	// Per-worker edge state lives across phases so a later phase keeps alternating.
	states := make([]*workerState, cfg.Workers)
	for w := range states {
		states[w] = &workerState{liked: map[uint64]struct{}{}, viral: make([]bool, per), sessions: map[int]string{}}
	}
	for _, name := range cfg.Phases {
		if ctx.Err() != nil {
			break
		}
		pr := r.phase(ctx, name, states)
		rep.Phases = append(rep.Phases, pr)
	}
	rep.Interrupted = ctx.Err() != nil
	rep.Finished = time.Now().UTC()
	return rep, nil
}

func (r *runner) preflight(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.api.Health(ctx); err != nil {
		var ae *client.Error
		if errors.As(err, &ae) {
			return fmt.Errorf("loadgen: %s/healthz answered %d %s", r.cfg.URL, ae.Status, http.StatusText(ae.Status))
		}
		return fmt.Errorf("loadgen: region at %s is not answering: %w", r.cfg.URL, err)
	}
	// A region that has just started has no watermark yet and labels counts with
	// asOf = the Unix epoch. Wait (bounded) until it can prove some freshness so
	// the first staleness samples measure the pipeline, not the start-up.
	probe := "lg-" + r.cfg.RunID + "-probe"
	for range 50 {
		if c, err := r.api.Count(ctx, probe); err == nil && c.AsOf.Unix() > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // not fatal: the samples will show it
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

type workerState struct {
	liked    map[uint64]struct{} // uniform phase: (user index, item) pairs currently liked
	viral    []bool              // viral phase: per user index
	sessions map[int]string      // per user index: the newest Likes-Session token
}

// counters are shared by a phase's workers for progress only.
type counters struct {
	req, ok, errs atomic.Int64
}

type workerResult struct {
	lat     Histogram
	errs    map[string]int64
	req     int64
	ok      int64
	changed int64
	buttons buttonResult
}

func (r *runner) phase(ctx context.Context, name string, states []*workerState) PhaseReport {
	cfg := r.cfg
	srv0, srvOK := r.serverCPU()
	cli0, cliOK := selfCPU()
	start := time.Now()
	stop := start.Add(cfg.PhaseDuration)
	var ctr counters
	results := make([]*workerResult, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		res := &workerResult{errs: map[string]int64{}}
		results[w] = res
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)<<8|uint64(phaseIndex(name))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx, name, w, stop, rng, states[w], res, &ctr)
		}()
	}
	var samp *sampler
	sampDone := make(chan struct{})
	if name != PhaseReads {
		samp = &sampler{r: r, phase: name, rng: rand.New(rand.NewPCG(cfg.Seed, 1<<40|uint64(phaseIndex(name)))), errs: map[string]int64{}, seen: map[string]struct{}{}}
		go func() { defer close(sampDone); samp.run(ctx, stop) }()
	} else {
		close(sampDone)
	}
	progDone := make(chan struct{})
	workersDone := make(chan struct{})
	go func() {
		defer close(progDone)
		r.progress(name, start, &ctr, workersDone)
	}()
	wg.Wait()
	elapsed := time.Since(start)
	close(workersDone)
	<-sampDone
	<-progDone

	pr := PhaseReport{Name: name, DurationS: elapsed.Seconds(), Errors: map[string]int64{}, Partial: ctx.Err() != nil}
	var lat Histogram
	for _, res := range results {
		lat.Merge(&res.lat)
		pr.Requests += res.req
		pr.OK += res.ok
		pr.Changed += res.changed
		for k, v := range res.errs {
			pr.Errors[k] += v
		}
		pr.Buttons = mergeButtons(pr.Buttons, &res.buttons)
	}
	if elapsed > 0 {
		pr.Throughput = float64(pr.OK) / elapsed.Seconds()
	}
	pr.Latency = summarize(&lat)
	if srv1, ok := r.serverCPU(); ok && srvOK {
		pr.ServerCPUS = (srv1 - srv0).Seconds()
		if pr.OK > 0 {
			pr.ServerCPUPerReqUs = float64((srv1 - srv0).Microseconds()) / float64(pr.OK)
		}
	}
	if cli1, ok := selfCPU(); ok && cliOK {
		pr.ClientCPUS = (cli1 - cli0).Seconds()
		if pr.OK > 0 {
			pr.ClientCPUPerReqUs = float64((cli1 - cli0).Microseconds()) / float64(pr.OK)
		}
	}
	if samp != nil {
		pr.Staleness = samp.report()
	}
	return pr
}

func (r *runner) serverCPU() (time.Duration, bool) {
	if r.cfg.ServerCPU == nil {
		return 0, false
	}
	d, err := r.cfg.ServerCPU()
	return d, err == nil
}

func phaseIndex(name string) int {
	for i, p := range AllPhases {
		if p == name {
			return i + 1
		}
	}
	return 0
}

func (r *runner) progress(name string, start time.Time, ctr *counters, done <-chan struct{}) {
	if r.cfg.Progress == nil {
		return
	}
	t := time.NewTicker(r.cfg.ProgressEvery)
	defer t.Stop()
	last, lastAt := int64(0), start
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			ok := ctr.ok.Load()
			rate := 0.0
			if dt := now.Sub(lastAt).Seconds(); dt > 0 {
				rate = float64(ok-last) / dt
			}
			last, lastAt = ok, now
			r.cfg.Progress(Progress{Phase: name, Elapsed: now.Sub(start), Requests: ctr.req.Load(), OK: ok, Errors: ctr.errs.Load(), Rate: rate})
		}
	}
}

func (r *runner) worker(ctx context.Context, phase string, w int, stop time.Time, rng *rand.Rand, st *workerState, res *workerResult, ctr *counters) {
	users := r.users[w]
	items := uint64(r.cfg.Items)
	next := rng.IntN(len(users)) // viral: round-robin start
	for seq := 0; ; seq++ {
		if ctx.Err() != nil || !time.Now().Before(stop) {
			return
		}
		var (
			u     user
			ui    = -1
			item  string
			like  bool
			apply func()
		)
		switch phase {
		case PhaseUniform:
			ui = rng.IntN(len(users))
			it := rng.Uint64N(items)
			u = users[ui]
			item = r.item(it)
			key := uint64(ui)*items + it
			if _, liked := st.liked[key]; liked {
				apply = func() { delete(st.liked, key) }
			} else {
				like = true
				apply = func() { st.liked[key] = struct{}{} }
			}
		case PhaseViral:
			ui := next
			next = (next + 1) % len(users)
			u = users[ui]
			item, like = r.viral, !st.viral[ui]
			apply = func() { st.viral[ui] = !st.viral[ui] }
		default: // reads
			item = r.item(rng.Uint64N(items))
		}
		var (
			ans client.WriteAnswer
			err error
		)
		t0 := time.Now()
		if phase == PhaseReads {
			_, err = r.api.Count(ctx, item)
		} else {
			var sess string
			if ui >= 0 {
				sess = st.sessions[ui]
			}
			call := []client.CallOption{
				client.BearerToken(u.token),
				client.IdempotencyKey("lg-" + r.cfg.RunID + "-w" + strconv.Itoa(w) + "-" + phaseShort(phase) + strconv.Itoa(seq)),
				client.SessionToken(sess),
			}
			if like {
				ans, err = r.api.Like(ctx, item, call...)
			} else {
				ans, err = r.api.Unlike(ctx, item, u.id, call...)
			}
		}
		d := time.Since(t0)
		if err != nil {
			if ctx.Err() != nil {
				return // interrupted: the request is not counted
			}
			res.req++
			ctr.req.Add(1)
			res.errs[errorClass(err)]++
			ctr.errs.Add(1)
			if errors.Is(err, client.ErrTransport) && !errors.Is(err, client.ErrAnswerCut) {
				time.Sleep(5 * time.Millisecond) // a dead server must not turn this loop into a spin
			}
			continue
		}
		res.req++
		ctr.req.Add(1)
		res.ok++
		ctr.ok.Add(1)
		res.lat.Record(d)
		if apply != nil {
			apply()
			if ans.Changed {
				res.changed++
			}
		}
		if ui >= 0 {
			if ans.Session != "" {
				st.sessions[ui] = ans.Session
			}
			if r.buttons != nil && seq%r.cfg.ButtonEvery == 0 {
				r.readButton(ctx, u, item, st.sessions[ui], like, &res.buttons)
			}
		}
	}
}

func (r *runner) item(i uint64) string { return "lg-" + r.cfg.RunID + "-i" + strconv.FormatUint(i, 10) }

func phaseShort(p string) string {
	switch p {
	case PhaseUniform:
		return "u"
	case PhaseViral:
		return "v"
	}
	return "r"
}

// errorClass names a failed request in the report: its HTTP status, "body"
// for an answer cut off or malformed, "timeout", "refused-non-loopback" or
// "transport".
func errorClass(err error) string {
	var ae *client.Error
	switch {
	case errors.As(err, &ae):
		return strconv.Itoa(ae.Status)
	case errors.Is(err, client.ErrAnswerCut), errors.Is(err, client.ErrBadAnswer):
		return "body"
	}
	return transportClass(err)
}

func transportClass(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return "timeout"
	}
	if errors.Is(err, ErrNotLoopback) {
		return "refused-non-loopback"
	}
	return "transport"
}

// sampler reads counts during a write phase and records staleness.
type sampler struct {
	r      *runner
	phase  string
	rng    *rand.Rand
	client Histogram // now − asOf, as the client sees it
	server Histogram // the server's stalenessMs
	first  Histogram // now − asOf of items this sampler had not read before
	seen   map[string]struct{}
	errs   map[string]int64
	n      int64
	// unproven counts answers with asOf at or before the Unix epoch: the region
	// had no watermark for them (kept out of the quantiles, reported apart).
	unproven int64
}

func (s *sampler) run(ctx context.Context, stop time.Time) {
	t := time.NewTicker(s.r.cfg.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if !now.Before(stop) {
				return
			}
			item := s.r.viral
			if s.phase == PhaseUniform {
				item = s.r.item(s.rng.Uint64N(uint64(s.r.cfg.Items)))
			}
			s.sample(ctx, item)
		}
	}
}

func (s *sampler) sample(ctx context.Context, item string) {
	c, err := s.r.api.Count(ctx, item)
	now := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			s.errs[errorClass(err)]++
		}
		return
	}
	asOf := c.AsOf
	if asOf.Unix() <= 0 {
		s.unproven++
		return
	}
	s.n++
	s.client.Record(now.Sub(asOf))
	s.server.Record(time.Duration(c.StalenessMs) * time.Millisecond)
	if _, ok := s.seen[item]; !ok {
		s.seen[item] = struct{}{}
		s.first.Record(now.Sub(asOf))
	}
}

func (s *sampler) report() *Staleness {
	st := &Staleness{Samples: s.n, Unproven: s.unproven, Errors: s.errs, FirstReads: int64(s.first.Count())}
	if s.n > 0 {
		st.P50Ms = ms(s.client.Quantile(0.50))
		st.P99Ms = ms(s.client.Quantile(0.99))
		st.MaxMs = ms(s.client.Max())
		st.ServerP50Ms = ms(s.server.Quantile(0.50))
		st.ServerP99Ms = ms(s.server.Quantile(0.99))
		st.FirstReadP99Ms = ms(s.first.Quantile(0.99))
	}
	return st
}
