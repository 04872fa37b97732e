package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/likes-dev/likes/auth"
	likes "github.com/likes-dev/likes/client"
)

// WorkloadConfig shapes the client load. Zero fields take defaults.
type WorkloadConfig struct {
	Clients        int           // concurrent clients, each with its own users (default 12)
	UsersPerClient int           // users per client (default 4)
	Items          int           // item universe (default 150)
	ZipfS          float64       // Zipf exponent of item popularity (default 1.2: a few hot items)
	Think          time.Duration // mean pause between a client's ops (default 60ms)
	AttemptTimeout time.Duration // per send (default 2s)
	MaxAttempts    int           // sends per op before giving up (default 6)
	MaxOps         int           // total ops bound (default 100000)
	SampleEvery    time.Duration // count sampling period (default 100ms)
	// Probabilities per op (defaults in parentheses; negative: never).
	PDup     float64 // send a like/unlike 2-3 times concurrently (0.05)
	PStale   float64 // stale retry of an old like after a later unlike (0.04)
	PRetract float64 // admin retraction of one of the client's edges (0.01)
	PErase   float64 // erase one of the client's users (0.008)
	PProbe   float64 // a new like as an already erased user (0.01)
	// PButton reads the actor's button at another region right after an
	// acknowledged like or unlike, with the session token (0.2).
	PButton float64
}

func (c *WorkloadConfig) defaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Clients, 12)
	def(&c.UsersPerClient, 4)
	def(&c.Items, 150)
	def(&c.MaxAttempts, 6)
	def(&c.MaxOps, 100000)
	if c.ZipfS == 0 {
		c.ZipfS = 1.2
	}
	if c.Think == 0 {
		c.Think = 60 * time.Millisecond
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 2 * time.Second
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 100 * time.Millisecond
	}
	fdef := func(p *float64, v float64) {
		switch {
		case *p == 0:
			*p = v
		case *p < 0: // explicitly off
			*p = 0
		}
	}
	fdef(&c.PDup, 0.05)
	fdef(&c.PStale, 0.04)
	fdef(&c.PRetract, 0.01)
	fdef(&c.PErase, 0.008)
	fdef(&c.PProbe, 0.01)
	fdef(&c.PButton, 0.2)
}

// Workload runs the clients and the count sampler.
type Workload struct {
	cfg     WorkloadConfig
	seed    uint64
	regions []string
	urls    map[string]string
	secret  []byte
	admin   string
	hist    *History
	http    *http.Client
	// api is a client of each region (package client) without retries: the
	// workload's own loop retries, across regions, and records every attempt.
	api    map[string]*likes.Client
	apiErr error // a region URL the client refused (every send then fails)

	nextOp atomic.Int64
	issued atomic.Int64
	acked  atomic.Int64
	indet  atomic.Int64

	mu      sync.Mutex
	ops     []*Op
	samples []Sample
	buttons []ButtonRead
	erased  map[string]bool // users whose erasure was acknowledged

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewWorkload prepares the clients against the given region URLs.
func NewWorkload(cfg WorkloadConfig, seed uint64, regions []string, urls map[string]string, secret []byte, admin string, hist *History) *Workload {
	cfg.defaults()
	w := &Workload{
		cfg: cfg, seed: seed, regions: regions, urls: urls, secret: secret, admin: admin, hist: hist,
		erased: map[string]bool{},
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
			DialContext: (&net.Dialer{Timeout: time.Second}).DialContext,
		}},
		api: map[string]*likes.Client{},
	}
	for region, u := range urls {
		c, err := likes.New(u, likes.WithHTTPClient(w.http),
			likes.WithRetry(likes.RetryPolicy{MaxAttempts: 1, AttemptTimeout: cfg.AttemptTimeout}))
		if err != nil {
			w.apiErr = fmt.Errorf("chaos: region %s: %w", region, err)
			continue
		}
		w.api[region] = c
	}
	return w
}

// Start launches the clients and the sampler.
func (w *Workload) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	for i := range w.cfg.Clients {
		c := w.newClient(i)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			c.run(ctx)
		}()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.sample(ctx)
	}()
}

// Stop cancels every client and waits for them; in-flight sends end as
// indeterminate.
func (w *Workload) Stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
	if t, ok := w.http.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}

// Progress is a snapshot of the counters.
func (w *Workload) Progress() (issued, acked, indeterminate int64) {
	return w.issued.Load(), w.acked.Load(), w.indet.Load()
}

// Ops returns every finished op.
func (w *Workload) Ops() []*Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*Op(nil), w.ops...)
}

// Samples returns the count reads.
func (w *Workload) Samples() []Sample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Sample(nil), w.samples...)
}

// Buttons returns the session button reads.
func (w *Workload) Buttons() []ButtonRead {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ButtonRead(nil), w.buttons...)
}

// edgeOps is a client's memory of one edge: its ops in order.
type edgeOps struct {
	ops []*Op
}

type user struct {
	id    string
	token string
	// session is the newest Likes-Session token the user's writes were
	// answered with; sent on every request, as a client SDK does.
	session string
}

type client struct {
	w       *Workload
	id      int
	rng     *rand.Rand
	zipf    *rand.Zipf
	users   []*user
	retired []*user
	nextU   int
	edges   map[[2]string]*edgeOps // (user, item)
}

func (w *Workload) newClient(i int) *client {
	rng := rand.New(rand.NewPCG(w.seed, uint64(i)+1))
	c := &client{w: w, id: i, rng: rng, edges: map[[2]string]*edgeOps{},
		zipf: rand.NewZipf(rng, w.cfg.ZipfS, 1, uint64(w.cfg.Items-1))}
	for range w.cfg.UsersPerClient {
		c.users = append(c.users, c.newUser())
	}
	return c
}

func (c *client) newUser() *user {
	id := fmt.Sprintf("u%02d-%03d", c.id, c.nextU)
	c.nextU++
	tok, err := auth.Sign(c.w.secret, id, false, 12*time.Hour, time.Now())
	if err != nil {
		panic(err) // only for an empty user or ttl, which cannot happen here
	}
	return &user{id: id, token: tok}
}

func (c *client) item() string { return fmt.Sprintf("i%03d", c.zipf.Uint64()) }

func (c *client) region() string { return c.w.regions[c.rng.IntN(len(c.w.regions))] }

// pause waits about d (uniform in [d/2, 3d/2]) or until ctx ends.
func pause(ctx context.Context, rng *rand.Rand, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	j := d/2 + time.Duration(rng.Int64N(int64(d)+1))
	t := time.NewTimer(j)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c *client) run(ctx context.Context) {
	cfg := c.w.cfg
	for pause(ctx, c.rng, cfg.Think) {
		if c.w.issued.Load() >= int64(cfg.MaxOps) {
			return
		}
		r := c.rng.Float64()
		switch {
		case r < cfg.PErase:
			c.erase(ctx)
		case r < cfg.PErase+cfg.PRetract:
			c.retract(ctx)
		case r < cfg.PErase+cfg.PRetract+cfg.PStale && c.stale(ctx):
		case r < cfg.PErase+cfg.PRetract+cfg.PStale+cfg.PProbe && len(c.retired) > 0:
			u := c.retired[c.rng.IntN(len(c.retired))]
			op := c.newOp(u, c.item(), KindLike)
			op.PostErasure = true
			c.execute(ctx, op, u, 1)
		default:
			u := c.users[c.rng.IntN(len(c.users))]
			item := c.item()
			kind := KindLike
			if e := c.edges[[2]string{u.id, item}]; e != nil && len(e.ops) > 0 {
				last := e.ops[len(e.ops)-1]
				// Mostly flip the edge; sometimes repeat (a no-op write).
				if (last.Target == TargetLiked) == (c.rng.Float64() < 0.85) {
					kind = KindUnlike
				}
			}
			copies := 1
			if c.rng.Float64() < cfg.PDup {
				copies = 2 + c.rng.IntN(2)
			}
			c.execute(ctx, c.newOp(u, item, kind), u, copies)
		}
	}
}

func (c *client) newOp(u *user, item, kind string) *Op {
	op := &Op{ID: c.w.nextOp.Add(1), Client: c.id, User: u.id, Item: item, Kind: kind}
	switch kind {
	case KindLike:
		op.Target = TargetLiked
		op.Key = fmt.Sprintf("k%d", op.ID)
	case KindUnlike:
		op.Target = TargetUnliked
		op.Key = fmt.Sprintf("k%d", op.ID)
	case KindRetract:
		op.Target = TargetUnliked
	case KindErase:
		op.Target = TargetErased
	}
	if item != "" {
		k := [2]string{u.id, item}
		if c.edges[k] == nil {
			c.edges[k] = &edgeOps{}
		}
		c.edges[k].ops = append(c.edges[k].ops, op)
	}
	return op
}

// retract has the abuse system (admin token) unlike one of this client's edges.
func (c *client) retract(ctx context.Context) {
	u := c.users[c.rng.IntN(len(c.users))]
	c.execute(ctx, c.newOp(u, c.item(), KindRetract), u, 1)
}

// erase erases one user and replaces it with a new one. Half the time the
// user is the one with the newest acknowledged like: a write that recent is the
// one a fault may have left unreplicated, so its erasure at a new owner races
// the old owner's tail (the resurrection of issue 17).
func (c *client) erase(ctx context.Context) {
	i := c.rng.IntN(len(c.users))
	if c.rng.IntN(2) == 0 {
		i = c.newestLiker(i)
	}
	u := c.users[i]
	op := c.newOp(u, "", KindErase)
	c.execute(ctx, op, u, 1)
	if op.Outcome == OutcomeAck {
		c.w.mu.Lock()
		c.w.erased[u.id] = true
		c.w.mu.Unlock()
	}
	// Acknowledged or not, the user is done with: only probes use it again.
	c.retired = append(c.retired, u)
	c.users[i] = c.newUser()
}

// newestLiker is the index of the user with the newest acknowledged like (by
// op id, so the seed decides), or def when no user has one.
func (c *client) newestLiker(def int) int {
	best, newest := def, int64(-1)
	for i, u := range c.users {
		for k, e := range c.edges {
			if k[0] != u.id {
				continue
			}
			for _, o := range e.ops {
				if o.Kind == KindLike && o.Outcome == OutcomeAck && o.ID > newest {
					best, newest = i, o.ID
				}
			}
		}
	}
	return best
}

// stale re-sends an old acknowledged like whose edge was later unliked by an
// acknowledged op (deep-dive 1). It returns false when there is none.
func (c *client) stale(ctx context.Context) bool {
	var cands []*Op
	for _, u := range c.users {
		for k, e := range c.edges {
			if k[0] != u.id || len(e.ops) < 2 {
				continue
			}
			last := e.ops[len(e.ops)-1]
			if last.Kind != KindUnlike || last.Outcome != OutcomeAck {
				continue
			}
			for _, o := range e.ops[:len(e.ops)-1] {
				if o.Kind == KindLike && o.Outcome == OutcomeAck {
					cands = append(cands, o)
				}
			}
		}
	}
	if len(cands) == 0 {
		return false
	}
	// Map iteration order is random: choose by op id so the seed decides.
	// Half the time the newest candidate: recent writes are the ones a fault
	// may have left unreplicated.
	sort.Slice(cands, func(i, j int) bool { return cands[i].ID < cands[j].ID })
	op := cands[len(cands)-1]
	if c.rng.IntN(2) == 0 {
		op = cands[c.rng.IntN(len(cands))]
	}
	var u *user
	for _, uu := range c.users {
		if uu.id == op.User {
			u = uu
		}
	}
	op.StaleRetries++
	a := c.send(ctx, op, u, c.region(), op.Attempts+1, true, false)
	op.Attempts++
	c.w.hist.Write("attempt", a)
	return true
}

// execute sends op until it is acknowledged, definitely refused, out of
// attempts, or the run ends. copies > 1 sends the first attempt that many
// times concurrently to different regions (duplicate requests).
func (c *client) execute(ctx context.Context, op *Op, u *user, copies int) {
	c.w.issued.Add(1)
	op.Duplicates = copies - 1
	backoff := 100 * time.Millisecond
	for n := 1; n <= c.w.cfg.MaxAttempts && ctx.Err() == nil; n++ {
		k := 1
		if n == 1 {
			k = copies
		}
		regions := c.rng.Perm(len(c.w.regions))
		results := make([]Attempt, k)
		var wg sync.WaitGroup
		for i := range k {
			region := c.w.regions[regions[i%len(regions)]]
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = c.send(ctx, op, u, region, op.Attempts+i+1, false, k > 1)
			}()
		}
		wg.Wait()
		done := false
		for _, a := range results {
			op.Attempts++
			c.w.hist.Write("attempt", a)
			if op.Invoke.IsZero() || a.Start.Before(op.Invoke) {
				op.Invoke = a.Start
			}
			op.LastCode = a.Code
			switch a.Class {
			case OutcomeAck:
				if op.Ack.IsZero() || a.End.Before(op.Ack) {
					op.Ack, op.AckRegion = a.End, a.Region
				}
				if a.session != "" {
					u.session = a.session
				}
				op.Outcome = OutcomeAck
				done = true
			case OutcomeIndeterminate:
				if op.Outcome != OutcomeAck {
					op.Outcome = OutcomeIndeterminate
				}
			case OutcomeReject:
				if op.Outcome == "" {
					op.Outcome = OutcomeReject
				}
				if a.Status == http.StatusGone || a.Status == http.StatusConflict ||
					(a.Status >= 400 && a.Status < 500 && a.Status != http.StatusTooManyRequests) {
					done = true // final answers: retrying cannot change them
				}
			}
		}
		if done {
			break
		}
		if !pause(ctx, c.rng, backoff) {
			break
		}
		backoff = min(2*backoff, time.Second)
	}
	if op.Outcome == "" {
		op.Outcome = OutcomeUnsent
	}
	switch op.Outcome {
	case OutcomeAck:
		c.w.acked.Add(1)
	case OutcomeIndeterminate:
		c.w.indet.Add(1)
	}
	c.w.hist.Write("op", op)
	c.w.mu.Lock()
	c.w.ops = append(c.w.ops, op)
	c.w.mu.Unlock()
	if op.Outcome == OutcomeAck && (op.Kind == KindLike || op.Kind == KindUnlike) && !op.PostErasure &&
		u.session != "" && c.rng.Float64() < c.w.cfg.PButton {
		c.readButton(ctx, op, u)
	}
}

// readButton reads u's button on op's item at a region other than the one
// that acknowledged op, at once, with the session token.
func (c *client) readButton(ctx context.Context, op *Op, u *user) {
	var others []string
	for _, r := range c.w.regions {
		if r != op.AckRegion {
			others = append(others, r)
		}
	}
	if len(others) == 0 {
		return
	}
	region := others[c.rng.IntN(len(others))]
	api := c.w.api[region]
	if api == nil {
		return
	}
	br := ButtonRead{Op: op.ID, User: op.User, Item: op.Item, Region: region, Want: op.Target == TargetLiked, Sent: time.Now()}
	var status int
	b, err := api.Liked(ctx, op.Item, op.User, likes.SessionToken(u.session),
		likes.OnAttempt(func(a likes.Attempt) { status = a.Status }))
	if err != nil || status != http.StatusOK {
		return // unanswered reads prove nothing
	}
	br.Recv, br.Liked, br.Source = time.Now(), b.Liked, b.Source
	c.w.hist.Write("button", br)
	c.w.mu.Lock()
	c.w.buttons = append(c.w.buttons, br)
	c.w.mu.Unlock()
}

// send performs one attempt (one HTTP request through the client package,
// which does not retry here) and classifies it.
func (c *client) send(ctx context.Context, op *Op, u *user, region string, n int, stale, dup bool) Attempt {
	a := Attempt{Op: op.ID, N: n, Region: region, Stale: stale, Dup: dup}
	api := c.w.api[region]
	if api == nil {
		a.Class, a.Err = OutcomeReject, fmt.Sprintf("chaos: no client of region %q: %v", region, c.w.apiErr)
		return a
	}
	// The attempt as the client made it: its timing, status and headers.
	var at likes.Attempt
	seen := false
	call := []likes.CallOption{
		likes.BearerToken(u.token),
		likes.SessionToken(""),
		likes.OnAttempt(func(x likes.Attempt) { at, seen = x, true }),
	}
	if op.Kind == KindLike || op.Kind == KindUnlike {
		call = append(call, likes.IdempotencyKey(op.Key), likes.SessionToken(u.session))
	}
	var (
		ans likes.WriteAnswer
		rr  likes.RetractAnswer
		err error
	)
	start := time.Now()
	switch op.Kind {
	case KindLike:
		ans, err = api.Like(ctx, op.Item, call...)
	case KindUnlike:
		ans, err = api.Unlike(ctx, op.Item, op.User, call...)
	case KindRetract:
		rr, err = api.Retract(ctx, op.Item, []string{op.User}, append(call, likes.BearerToken(c.w.admin))...)
	case KindErase:
		_, err = api.EraseUser(ctx, op.User, call...)
	default:
		err = fmt.Errorf("chaos: unknown op kind %q", op.Kind)
	}
	if !seen { // refused before any request was sent
		a.Start, a.End = start, time.Now()
		a.Class, a.Err = OutcomeReject, err.Error()
		return a
	}
	a.Start, a.End = at.Start, at.End
	a.Status = at.Status
	if at.Header != nil {
		a.session = at.Header.Get(sessionHeader)
	}
	var ae *likes.Error
	switch {
	case at.Status == 0: // no answer
		a.Err = err.Error()
		a.Class = OutcomeIndeterminate
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" {
			a.Class = OutcomeReject // never reached the server
		}
		return a
	case errors.Is(err, likes.ErrAnswerCut): // the status line, then the body was lost
		a.Err = err.Error()
		a.Class = OutcomeIndeterminate
		return a
	case errors.As(err, &ae):
		if ae.Status >= 400 {
			a.Code = ae.Code
		}
	}
	switch {
	case at.Status == http.StatusOK || at.Status == http.StatusAccepted:
		a.Class = OutcomeAck
		switch op.Kind {
		case KindLike, KindUnlike:
			if err == nil { // an answer that does not decode still acknowledges
				a.Liked, a.Changed = &ans.Liked, &ans.Changed
			}
		case KindRetract:
			if err != nil || len(rr.Results) != 1 {
				a.Class, a.Err = OutcomeIndeterminate, fmt.Sprintf("bad retraction answer: %+v %v", rr, err)
			} else if e := rr.Results[0].Error; e != "" {
				a.Code = e
				a.Class = OutcomeIndeterminate
				if e == "user_erased" || e == "overloaded" {
					a.Class = OutcomeReject
				}
			} else {
				a.Changed = &rr.Results[0].Changed
			}
		}
	case at.Status == http.StatusTooManyRequests,
		at.Status == http.StatusServiceUnavailable && a.Code == "overloaded":
		a.Class = OutcomeReject // refused before anything was attempted
	case at.Status >= 500:
		a.Class = OutcomeIndeterminate
	default:
		a.Class = OutcomeReject
		if a.Code == "" && ae != nil {
			a.Code = ae.Message // the raw body when it was not the API's error
		}
	}
	return a
}

// sessionHeader carries the Likes-Session token (internal/sessiontok).
const sessionHeader = "Likes-Session"

// sample reads counts of popular items at random regions.
func (w *Workload) sample(ctx context.Context) {
	rng := rand.New(rand.NewPCG(w.seed, 1<<32))
	zipf := rand.NewZipf(rng, w.cfg.ZipfS, 1, uint64(w.cfg.Items-1))
	t := time.NewTicker(w.cfg.SampleEvery)
	defer t.Stop()
	for n := 0; n < 100000; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		region := w.regions[rng.IntN(len(w.regions))]
		item := fmt.Sprintf("i%03d", zipf.Uint64())
		s, err := w.readCount(ctx, region, item)
		if err != nil {
			continue
		}
		w.hist.Write("read", s)
		w.mu.Lock()
		w.samples = append(w.samples, s)
		w.mu.Unlock()
	}
}

func (w *Workload) readCount(ctx context.Context, region, item string) (Sample, error) {
	s := Sample{Region: region, Item: item, Sent: time.Now()}
	api := w.api[region]
	if api == nil {
		return s, fmt.Errorf("chaos: no client of region %q: %v", region, w.apiErr)
	}
	var status int
	c, err := api.Count(ctx, item, likes.OnAttempt(func(a likes.Attempt) { status = a.Status }))
	if err != nil {
		return s, err
	}
	if status != http.StatusOK {
		return s, fmt.Errorf("count: %d", status)
	}
	s.Recv = time.Now()
	s.Count, s.AsOf = c.Count.Count, c.AsOf
	return s, nil
}
