package cassandra

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// ErrClosed is returned by calls on a closed Store.
var ErrClosed = errors.New("cassandra: store closed")

// ErrBadCursor is returned for a Likers cursor this store did not issue; it
// wraps edge.ErrBadCursor.
var ErrBadCursor = fmt.Errorf("cassandra: %w", edge.ErrBadCursor)

// ErrContention is returned when a read-decide-write loop ran out of attempts
// (lightweight transactions kept losing to other writers, or Cassandra kept
// timing out). Nothing of the failed attempt is half-applied beyond what the
// relay machinery finishes (see doc.go); the caller may retry.
var ErrContention = errors.New("cassandra: gave up after repeated contention or timeouts")

// ErrOtherKeyspace is returned by Open for a keyspace created for another
// region or partition count.
var ErrOtherKeyspace = errors.New("cassandra: the keyspace belongs to another region")

// Options configures a Store.
type Options struct {
	// Session is a session from Connect (or any session whose default
	// consistency suits); the Store does not close it.
	Session *gocql.Session
	// Keyspace holds this region's tables (created by Migrate).
	Keyspace string
	// Region is the region this keyspace belongs to. Fixed at creation.
	Region string
	// Partitions is the number of log partitions (default 16). Fixed at creation.
	Partitions int
	// Clock stamps event times and idempotency records (default: wall clock).
	Clock clock.Clock
	// Consistency of ordinary reads and writes and the commit phase of
	// lightweight transactions (default LOCAL_QUORUM).
	Consistency gocql.Consistency
	// Serial is the consistency of lightweight transactions and of the reads
	// that decide them (default SERIAL; LOCAL_SERIAL keeps Paxos in one
	// datacenter).
	Serial gocql.SerialConsistency
	// MaxBatch bounds the events one outbox append carries (default 128).
	MaxBatch int
	// MaxAttempts bounds every read-decide-transaction loop (default 64).
	MaxAttempts int
	// ApplyTimeout bounds one Apply once it has begun (default 30s). The
	// caller's cancellation does not stop it: a write stopped between its
	// edge transaction and its relay would leave its event to the sweeper,
	// possibly after the user's range moved to another region, whose
	// catch-up barrier would not wait for it.
	ApplyTimeout time.Duration
	// IssueEvery is how far a log reader lets CompleteThrough lag the clock
	// before it records a new one with a transaction (default 50ms).
	IssueEvery time.Duration
	// SweepEvery is how often the background sweeper looks for pending events
	// whose writer died (default 5s; negative: no background sweeper).
	SweepEvery time.Duration
	// SweepAge is how old a relay intent must be before the sweeper takes it
	// over (default 1 minute; must exceed the session's request timeout).
	SweepAge time.Duration
	// IdemGrace is added to an idempotency record's Cassandra TTL beyond its
	// logical expiry (default 1h), so a record is never collected before the
	// request clock says it expired.
	IdemGrace time.Duration
	// OnError reports background failures (sweeper). Default: ignored.
	OnError func(error)
	// BreakerCooldown is how long writes are refused at once after a write
	// failed on Cassandra write failures or timeouts, before one probe write
	// is let through (default 1s; see health.go).
	BreakerCooldown time.Duration
	// Logger receives one line per change of write health (default
	// slog.Default()).
	Logger *slog.Logger
	// ForeignPositions says the aggregators read another log that a relay
	// fills from this one (Kafka): their positions and the cells' HWMs are
	// that log's offsets, so Position answers the committed position alone,
	// never at least this log's truncation floor (which retention raises in
	// this log's own positions; see doc.go, "Retention").
	ForeignPositions bool
	// SequenceGroups is how many sequence groups a keyspace this store
	// creates gets (default 1, at most Partitions): the log partitions of
	// one group take their positions from one Cassandra partition, so one
	// transaction serves a group commit across all of them (sequence.go).
	// Fixed at creation, like Partitions; a keyspace created before schema
	// 10 keeps one sequence row per partition whatever this says.
	SequenceGroups int
}

// Store is one region's Cassandra backend. It implements edge.Store,
// edge.JobStore, pipeline.Log, pipeline.CellStore and counts.CountStore.
// Safe for concurrent use, and for use by several processes on one keyspace.
type Store struct {
	opts Options
	s    *gocql.Session
	q    stmts

	locks [1024]sync.Mutex // per-edge stripes: a process never races itself on an edge

	appMu     sync.Mutex
	appenders map[uint32]*appender // by sequence group (seqGroup)

	// seqGroups is the keyspace's sequence layout (meta.seq_groups): 0, one
	// row per log partition in outbox_seq; n >= 1, partition p's row in
	// group p % n of outbox_seqs. Fixed at Open.
	seqGroups int
	sq        seqStmts

	hook atomic.Pointer[func(stage string) error] // tests: simulated crashes

	health breaker

	paxosOps, plainOps atomic.Uint64 // requests issued (Ops)
	opsMu              sync.RWMutex
	opsBy              [2]map[string]*atomic.Uint64 // plain, paxos: requests per statement (OpsByStatement)

	rb rebuildState // pending rebuilds from peers (rebuild.go)

	retMu        sync.Mutex // retention's dedupe scan (retention.go)
	dedupeResume []byte     // its next page (nil: from the start)

	reap *reaper // deletes the intents of finished relays (intents.go)

	ctx     context.Context // canceled by Close: background work stops
	cancel  context.CancelFunc
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

var (
	_ edge.Store          = (*Store)(nil)
	_ edge.JobStore       = (*Store)(nil)
	_ pipeline.Log        = (*Store)(nil)
	_ pipeline.CellStore  = (*Store)(nil)
	_ counts.CountStore   = (*Store)(nil)
	_ pipeline.BaseReader = (*Store)(nil)
)

// Open checks the keyspace's schema and meta (creating the meta row on first
// use) and starts the background sweeper.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Session == nil {
		return nil, errNoSession
	}
	if !ValidKeyspace(opts.Keyspace) {
		return nil, fmt.Errorf("cassandra: invalid keyspace name %q", opts.Keyspace)
	}
	if opts.Region == "" {
		return nil, errors.New("cassandra: Options.Region is required")
	}
	if opts.Partitions == 0 {
		opts.Partitions = 16
	}
	if opts.Partitions < 1 || opts.Partitions > 4096 {
		return nil, fmt.Errorf("cassandra: Partitions must be in [1, 4096], got %d", opts.Partitions)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Consistency == 0 {
		opts.Consistency = gocql.LocalQuorum
	}
	if opts.Serial == 0 {
		opts.Serial = gocql.Serial
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 128
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 64
	}
	if opts.IssueEvery <= 0 {
		opts.IssueEvery = 50 * time.Millisecond
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = 5 * time.Second
	}
	if opts.ApplyTimeout <= 0 {
		opts.ApplyTimeout = 30 * time.Second
	}
	if opts.SweepAge <= 0 {
		opts.SweepAge = time.Minute
	}
	if opts.IdemGrace <= 0 {
		opts.IdemGrace = time.Hour
	}
	if opts.OnError == nil {
		opts.OnError = func(error) {}
	}
	if opts.BreakerCooldown <= 0 {
		opts.BreakerCooldown = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SequenceGroups == 0 {
		opts.SequenceGroups = 1
	}
	if opts.SequenceGroups < 1 || opts.SequenceGroups > opts.Partitions {
		return nil, fmt.Errorf("cassandra: SequenceGroups must be in [1, Partitions = %d], got %d", opts.Partitions, opts.SequenceGroups)
	}
	if err := checkSchema(ctx, opts.Session, opts.Keyspace); err != nil {
		return nil, err
	}
	s := &Store{
		opts:      opts,
		s:         opts.Session,
		q:         newStmts(opts.Keyspace),
		appenders: map[uint32]*appender{},
		closing:   make(chan struct{}),
	}
	if err := s.checkMeta(ctx); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if _, err := s.loadRebuild(ctx); err != nil {
		s.cancel()
		return nil, err
	}
	s.reap = newReaper(s)
	s.wg.Add(1)
	go s.reap.loop()
	if opts.SweepEvery > 0 {
		// A process of this region that died between an edge transaction and
		// its relay left the event pending: relay it now rather than a
		// SweepAge from now (exactly once even beside a live writer).
		if err := s.FinishPending(ctx); err != nil {
			opts.OnError(fmt.Errorf("cassandra: relaying pending events at open: %w", err))
		}
		s.wg.Add(1)
		go s.sweepLoop()
	}
	return s, nil
}

func (s *Store) checkMeta(ctx context.Context) error {
	m := map[string]any{}
	applied, err := s.cas(ctx, s.q.metaInsert, "store", s.opts.Region, s.opts.Partitions, s.opts.Clock.Now().UnixMilli(),
		s.opts.SequenceGroups).MapScanCAS(m)
	if err != nil {
		return fmt.Errorf("cassandra: meta: %w", err)
	}
	if applied {
		return s.useSequence(s.opts.SequenceGroups)
	}
	region, _ := m["region"].(string)
	parts, _ := m["partitions"].(int)
	if region != s.opts.Region || parts != s.opts.Partitions {
		return fmt.Errorf("%w: keyspace %s was created for region %q with %d partitions, not region %q with %d",
			ErrOtherKeyspace, s.opts.Keyspace, region, parts, s.opts.Region, s.opts.Partitions)
	}
	groups, _ := m["seq_groups"].(int) // null: created before schema 10
	return s.useSequence(groups)
}

// Partitions implements pipeline.Log.
func (s *Store) Partitions() int { return s.opts.Partitions }

// Region is the region this store belongs to.
func (s *Store) Region() string { return s.opts.Region }

// Keyspace is the keyspace this store uses.
func (s *Store) Keyspace() string { return s.opts.Keyspace }

// Close stops the sweeper and the outbox appenders (failing queued appends
// with ErrClosed), sends the intent deletes still waiting (intents.go), and
// waits for them. It does not close the session.
// Idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.closing)
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// --- query helpers -----------------------------------------------------------

// Ops counts the requests this store has sent to Cassandra: Paxos, the
// lightweight transactions (conditional statements and batches) and the reads
// at the serial consistency; Plain, every other read, write and batch. Its
// ratios to the likes written are the write path's cost (BENCHMARKS.md).
type Ops struct{ Paxos, Plain uint64 }

// Ops returns the requests sent so far.
func (s *Store) Ops() Ops { return Ops{Paxos: s.paxosOps.Load(), Plain: s.plainOps.Load()} }

// OpsByStatement returns the requests sent so far per statement, keyed by
// the kind ("paxos" for a lightweight transaction or a serial read, "plain"
// otherwise) and the statement's text up to its WHERE clause, with the
// keyspace left out (batches are "BATCH" and what they write): where a
// like's requests go
// (BENCHMARKS.md). One map lookup and one atomic add per request.
func (s *Store) OpsByStatement() map[string]uint64 {
	out := map[string]uint64{}
	s.opsMu.RLock()
	defer s.opsMu.RUnlock()
	for kind, name := range [2]string{"plain", "paxos"} {
		for text, n := range s.opsBy[kind] {
			if i := strings.Index(text, " WHERE "); i > 0 {
				text = text[:i]
			}
			out[name+" "+strings.ReplaceAll(text, s.opts.Keyspace+".", "")] += n.Load()
		}
	}
	return out
}

// Request kinds of count.
const (
	opPlain = 0
	opPaxos = 1
)

// count records one request of kind (opPlain, opPaxos) with stmt: a read
// lock, a map lookup and an atomic add; nothing is allocated once the
// statement was seen.
func (s *Store) count(kind int, stmt string) {
	s.opsMu.RLock()
	n := s.opsBy[kind][stmt]
	s.opsMu.RUnlock()
	if n == nil {
		s.opsMu.Lock()
		if s.opsBy[kind] == nil {
			s.opsBy[kind] = map[string]*atomic.Uint64{}
		}
		if n = s.opsBy[kind][stmt]; n == nil {
			n = new(atomic.Uint64)
			s.opsBy[kind][stmt] = n
		}
		s.opsMu.Unlock()
	}
	n.Add(1)
}

// newBatch is a batch at Options.Consistency; cas marks a conditional one;
// what names it in OpsByStatement ("BATCH" and what it writes, a constant, so
// counting allocates nothing).
func (s *Store) newBatch(ctx context.Context, kind gocql.BatchType, cas bool, what string) *gocql.Batch {
	if cas {
		s.paxosOps.Add(1)
		s.count(opPaxos, what)
	} else {
		s.plainOps.Add(1)
		s.count(opPlain, what)
	}
	b := s.s.NewBatch(kind).WithContext(ctx)
	b.SetConsistency(s.opts.Consistency)
	return b
}

// read is an ordinary read or write at Options.Consistency.
func (s *Store) read(ctx context.Context, stmt string, args ...any) *gocql.Query {
	s.plainOps.Add(1)
	s.count(opPlain, stmt)
	return s.s.Query(stmt, args...).WithContext(ctx).Consistency(s.opts.Consistency)
}

// write is an ordinary (non-conditional) write; the same as read.
func (s *Store) write(ctx context.Context, stmt string, args ...any) *gocql.Query {
	return s.read(ctx, stmt, args...).Idempotent(true)
}

// serial is a read at the serial consistency: it sees every lightweight
// transaction that completed, and completes any that is half done.
func (s *Store) serial(ctx context.Context, stmt string, args ...any) *gocql.Query {
	s.paxosOps.Add(1)
	s.count(opPaxos, stmt)
	return s.s.Query(stmt, args...).WithContext(ctx).Consistency(gocql.Consistency(s.opts.Serial))
}

// cas is a lightweight transaction.
func (s *Store) cas(ctx context.Context, stmt string, args ...any) *gocql.Query {
	s.paxosOps.Add(1)
	s.count(opPaxos, stmt)
	return s.s.Query(stmt, args...).WithContext(ctx).Consistency(s.opts.Consistency).SerialConsistency(s.opts.Serial)
}

// retryable reports whether err leaves the outcome of a request unknown or
// transient: timeouts, unavailability, overload, Paxos contention.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	var (
		wt *gocql.RequestErrWriteTimeout
		rt *gocql.RequestErrReadTimeout
		un *gocql.RequestErrUnavailable
		cu *gocql.RequestErrCASWriteUnknown
	)
	if errors.As(err, &wt) || errors.As(err, &rt) || errors.As(err, &un) || errors.As(err, &cu) {
		return true
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeUnavailable, gocql.ErrCodeOverloaded, gocql.ErrCodeBootstrapping,
			gocql.ErrCodeWriteTimeout, gocql.ErrCodeReadTimeout, gocql.ErrCodeCASWriteUnknown:
			return true
		}
		return false
	}
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrConnectionClosed) ||
		errors.Is(err, gocql.ErrNoConnections)
}

// backoff waits a jittered, growing pause before retry attempt n (n >= 1):
// 1–2ms doubling up to 64–128ms. It is the pause between bounded attempts of
// a loop that lost a race, never a wait for a condition.
func backoff(ctx context.Context, n int) error {
	d := time.Millisecond << min(n-1, 6)
	d += rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// parallel runs fn(i) for i in [0, n) with at most 16 at a time and returns the
// first error.
func parallel(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// crashPoint is where tests simulate a crash: a non-nil error stops the write
// at that stage.
func (s *Store) crashPoint(stage string) error {
	if h := s.hook.Load(); h != nil && *h != nil {
		return (*h)(stage)
	}
	return nil
}

func (s *Store) edgeLock(item, user string) *sync.Mutex {
	return &s.locks[edge.Hash(item+"\x00"+user)%uint64(len(s.locks))]
}

// --- edges ---------------------------------------------------------------------

// edgeRow is an edges row as read.
type edgeRow struct {
	exists   bool
	e        edge.Edge
	eseq     uint64
	pending  *pending
	branches crdt.Branches
	// The last relayed event's attempt nonce, edge event sequence, position
	// and event time.
	lastNonce   uint64
	relayedESeq uint64
	relayedPos  uint64
	relayedTime int64
}

// relayRec is an edge_relays row: the last of an edge's events known to be in
// the outbox.
type relayRec struct {
	eseq, nonce, pos uint64
	time             int64
}

func (s *Store) readRelay(ctx context.Context, item, user string) (relayRec, error) {
	var eseq, nonce, pos, t int64
	err := s.read(ctx, s.q.relaySelect, item, int(edge.BucketOf(user)), user).Scan(&eseq, &nonce, &pos, &t)
	if errors.Is(err, gocql.ErrNotFound) {
		return relayRec{}, nil
	}
	return relayRec{eseq: uint64(eseq), nonce: uint64(nonce), pos: uint64(pos), time: t}, err
}

// writeRelay records that event eseq of an edge is at pos in the outbox: a
// plain write USING TIMESTAMP eseq, so the highest event's record wins in any
// order of arrival (see the edge_relays schema step).
func (s *Store) writeRelay(ctx context.Context, sl slot) error {
	err := s.write(ctx, s.q.relayPut, sl.Event.Item, int(edge.BucketOf(sl.Event.User)), sl.Event.User,
		int64(sl.ESeq), int64(sl.Nonce), int64(sl.Pos), sl.Event.EventTime, int64(sl.ESeq)).Exec()
	if err != nil {
		return fmt.Errorf("cassandra: relay record of (%q, %q): %w", sl.Event.Item, sl.Event.User, err)
	}
	return nil
}

// readEdgeRelayed reads an edge row and its relay record (LOCAL_QUORUM, or the
// edge at the serial consistency) and folds the record in: a pending event
// whose relay is recorded is no longer pending.
func (s *Store) readEdgeRelayed(ctx context.Context, item, user string, serial bool) (edgeRow, error) {
	var r edgeRow
	var rel relayRec
	err := parallel(2, func(i int) error {
		var err error
		if i == 0 {
			r, err = s.readEdge(ctx, item, user, serial)
		} else {
			rel, err = s.readRelay(ctx, item, user)
		}
		return err
	})
	if err != nil {
		return r, err
	}
	if rel.eseq > r.relayedESeq {
		r.lastNonce, r.relayedESeq, r.relayedPos, r.relayedTime = rel.nonce, rel.eseq, rel.pos, rel.time
	}
	if r.pending != nil && r.relayedESeq >= r.eseq {
		r.pending = nil
	}
	return r, nil
}

// readEdge reads an edge row alone; its pending column may hold an event that
// is relayed already (readEdgeRelayed tells).
func (s *Store) readEdge(ctx context.Context, item, user string, serial bool) (edgeRow, error) {
	q := s.read
	if serial {
		q = s.serial
	}
	var (
		state                               int8
		epoch, op, updated, eseq            int64
		pend, branches                      []byte
		lastNonce, relESeq, relPos, relTime int64
	)
	err := q(ctx, s.q.edgeSelect, item, int(edge.BucketOf(user)), user).Scan(
		&state, &epoch, &op, &updated, &eseq, &pend, &branches, &lastNonce, &relESeq, &relPos, &relTime)
	if errors.Is(err, gocql.ErrNotFound) {
		return edgeRow{e: edge.Edge{Item: item, User: user}}, nil
	}
	if err != nil {
		return edgeRow{}, err
	}
	r := edgeRow{
		exists:      true,
		e:           edge.Edge{Item: item, User: user, State: crdt.State(state), Version: crdt.Version{Epoch: uint64(epoch), Op: uint64(op)}, UpdatedAt: updated},
		eseq:        uint64(eseq),
		lastNonce:   uint64(lastNonce),
		relayedESeq: uint64(relESeq),
		relayedPos:  uint64(relPos),
		relayedTime: relTime,
	}
	if len(pend) > 0 {
		p, err := decodePending(pend)
		if err != nil {
			return r, wrapCorrupt(fmt.Sprintf("pending event of edge (%q, %q)", item, user), err)
		}
		r.pending = &p
	}
	if r.branches, err = decodeBranches(branches); err != nil {
		return r, wrapCorrupt(fmt.Sprintf("branches of edge (%q, %q)", item, user), err)
	}
	return r, nil
}

// Edge implements edge.Store.
func (s *Store) Edge(ctx context.Context, item, user string) (edge.Edge, bool, error) {
	r, err := s.readEdge(ctx, item, user, false)
	return r.e, r.exists, err
}

// Branches returns an edge's branch records.
func (s *Store) Branches(ctx context.Context, item, user string) (crdt.Branches, error) {
	r, err := s.readEdge(ctx, item, user, false)
	return r.branches, err
}

// Likers implements edge.Store. The cursor is the (bucket, user) of the last row
// looked at (the same format as the embedded store's); a page may hold fewer
// than limit users when many rows in a row are not LIKED, and then still
// carries a cursor. Each page reads at most a few buckets of the item.
func (s *Store) Likers(ctx context.Context, item, cursor string, limit int) ([]string, string, error) {
	if limit <= 0 {
		return nil, "", fmt.Errorf("cassandra: Likers limit must be positive, got %d", limit)
	}
	bucket, after := 0, ""
	started := false
	if cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(c) < 2 || c[0] >= edge.Buckets || !utf8.Valid(c[1:]) || strings.IndexByte(string(c[1:]), 0) >= 0 {
			return nil, "", ErrBadCursor
		}
		bucket, after, started = int(c[0]), string(c[1:]), true
	}
	budget := 16*limit + 256 // rows looked at per page, as the embedded store
	var users []string
	lastBucket, lastUser := bucket, after
	for ; bucket < edge.Buckets; bucket, started = bucket+1, false {
		stmt, args := s.q.likersFirst, []any{item, bucket}
		if started {
			stmt, args = s.q.likersAfter, []any{item, bucket, after}
		}
		it := s.read(ctx, stmt, args...).PageSize(min(budget, 5000)).Iter()
		var u string
		var st int8
		for it.Scan(&u, &st) {
			if len(users) == limit || budget == 0 {
				_ = it.Close()
				return users, likersCursor(lastBucket, lastUser), nil
			}
			budget--
			lastBucket, lastUser = bucket, u
			if crdt.State(st) == crdt.Liked {
				users = append(users, u)
			}
		}
		if err := it.Close(); err != nil {
			return nil, "", err
		}
	}
	return users, "", nil
}

func likersCursor(bucket int, user string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{byte(bucket)}, user...))
}

// UserItems implements edge.Store.
func (s *Store) UserItems(ctx context.Context, user, after string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	it := s.read(ctx, s.q.userItems, user, after, limit).Iter()
	var items []string
	var item string
	for it.Scan(&item) {
		items = append(items, item)
	}
	return items, it.Close()
}

// PurgeUser implements edge.Store: the user's idempotency records and item
// index go (one partition delete each), then a KindPurge event is appended so
// peers purge too. Retried after a failure it may append a second purge
// event, which purges nothing more.
func (s *Store) PurgeUser(ctx context.Context, user string) error {
	if s.isClosed() {
		return ErrClosed
	}
	if err := s.write(ctx, s.q.idemPurge, user).Exec(); err != nil {
		return fmt.Errorf("cassandra: purge records of %q: %w", user, err)
	}
	if err := s.write(ctx, s.q.userItemsPurge, user).Exec(); err != nil {
		return fmt.Errorf("cassandra: purge item index of %q: %w", user, err)
	}
	ev := edge.Event{User: user, Bucket: edge.BucketOf(user), Kind: edge.KindPurge}
	_, err := s.appendStandalone(ctx, ev)
	return err
}

// Heal appends a reconcile event carrying delta for item to this region's log,
// so the difference flows through the ordinary fenced pipeline as its own event.
func (s *Store) Heal(ctx context.Context, item string, delta int64) error {
	if delta == 0 {
		return nil
	}
	if delta > 1<<30 || delta < -(1<<30) {
		return fmt.Errorf("cassandra: heal of %d for %q is out of range", delta, item)
	}
	_, err := s.appendStandalone(ctx, edge.Event{Item: item, Kind: edge.KindReconcile, Delta: int32(delta)})
	return err
}

// --- erasure jobs ------------------------------------------------------------

// PutErasure implements edge.JobStore. The job row is also the user's erasure
// marker; Apply reads it at Options.Consistency after this write returns, so
// every later Apply sees the user as erased. An Apply that read the marker
// just before it was written is caught after its write (see doc.go). It
// writes edge.MergeJob(stored, j), so a job re-opened by a late replicated
// edge stays re-opened. A job starting here (new, or taken over from another
// region's mark) is announced with a KindErasing event, so the mark
// replicates with the log (peers refuse the user's writes too): first the
// row (announced = false), then the event, then announced = true. The row
// before the event is what a snapshot needs: it reads the log's heads
// before it scans the erasures, so every start at or below its heads has
// its row in the scan (snapshot.go). A failure after the row leaves
// announced = false, and the next PutErasure of the job (the caller's retry,
// or the eraser saving its progress) appends the event; a failure after the
// event may append it twice, which marks nothing more.
func (s *Store) PutErasure(ctx context.Context, j edge.ErasureJob) error {
	if s.isClosed() {
		return ErrClosed
	}
	old, had, err := s.Erasure(ctx, j.User)
	if err != nil {
		return err
	}
	if had {
		j = edge.MergeJob(old, j)
	}
	if j.State != edge.ErasureRunning || j.Remote {
		return s.writeJob(ctx, j)
	}
	announce := !had || old.Remote
	if !announce {
		var ann *bool
		if err := s.read(ctx, s.q.erasureAnnGet, j.User).Scan(&ann); err != nil && !errors.Is(err, gocql.ErrNotFound) {
			return err
		}
		announce = ann != nil && !*ann
	}
	if !announce {
		return s.writeJob(ctx, j)
	}
	// One write: a row without announced = false would count as announced.
	if err := s.write(ctx, s.q.erasureInsertNew, j.User, j.State, j.Edges, j.Unliked, j.StartedAt, j.FinishedAt, j.Cursor, j.Remote, j.Late).Exec(); err != nil {
		return err
	}
	if err := s.crashPoint("erasure-row-written"); err != nil {
		return err
	}
	if _, err := s.appendStandalone(ctx, edge.Event{User: j.User, Bucket: edge.BucketOf(j.User), Kind: edge.KindErasing,
		EventTime: j.StartedAt}); err != nil {
		return err
	}
	if err := s.crashPoint("erasure-announced"); err != nil {
		return err
	}
	return s.write(ctx, s.q.erasureAnnPut, true, j.User).Exec()
}

func (s *Store) writeJob(ctx context.Context, j edge.ErasureJob) error {
	return s.write(ctx, s.q.erasureInsert, j.User, j.State, j.Edges, j.Unliked, j.StartedAt, j.FinishedAt, j.Cursor, j.Remote, j.Late).Exec()
}

func scanJob(sc interface{ Scan(...any) bool }, j *edge.ErasureJob) bool {
	return sc.Scan(&j.User, &j.State, &j.Edges, &j.Unliked, &j.StartedAt, &j.FinishedAt, &j.Cursor, &j.Remote, &j.Late)
}

// Erasure implements edge.JobStore.
func (s *Store) Erasure(ctx context.Context, user string) (edge.ErasureJob, bool, error) {
	it := s.read(ctx, s.q.erasureSelect, user).Iter()
	var j edge.ErasureJob
	ok := scanJob(it, &j)
	if err := it.Close(); err != nil {
		return edge.ErasureJob{}, false, err
	}
	if !ok {
		return edge.ErasureJob{}, false, nil
	}
	return j, true, nil
}

// Erasures implements edge.JobStore (a scan of the erasures table).
func (s *Store) Erasures(ctx context.Context) ([]edge.ErasureJob, error) {
	it := s.read(ctx, s.q.erasureAll).PageSize(1000).Iter()
	var out []edge.ErasureJob
	for {
		var j edge.ErasureJob
		if !scanJob(it, &j) {
			break
		}
		out = append(out, j)
	}
	return out, it.Close()
}

// erased reports whether the user's erasure has started.
func (s *Store) erased(ctx context.Context, user string) (bool, error) {
	it := s.read(ctx, s.q.erasureExists, user).Iter()
	var u string
	ok := it.Scan(&u)
	return ok, it.Close()
}
