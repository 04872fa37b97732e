package pebblestore

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/counts"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// ErrClosed is returned by calls on a closed Store.
var ErrClosed = errors.New("pebblestore: closed")

// ErrBadCursor is returned for a cursor this store did not issue; it wraps
// edge.ErrBadCursor.
var ErrBadCursor = fmt.Errorf("pebblestore: %w", edge.ErrBadCursor)

// Options configures a Store.
type Options struct {
	// Dir is the database folder (created if missing).
	Dir string
	// FS overrides the filesystem (tests use vfs.NewCrashableMem). Default: disk.
	FS vfs.FS
	// Region is the region this database belongs to; it names the cells its
	// aggregators write. Fixed at creation.
	Region string
	// Partitions is the number of log partitions (default 16). Fixed at creation.
	Partitions int
	// Clock stamps event times (default: wall clock).
	Clock clock.Clock
	// MaxBatch bounds the requests folded into one group commit (default 512).
	MaxBatch int
	// CacheBytes is Pebble's block cache size (default 64 MiB).
	CacheBytes int64
	// MinFreeBytes and MinFreeFraction (of the filesystem's size) set the
	// low-disk watermark: while free space is below the larger of the two,
	// writes are refused with edge.ErrStorageUnavailable, so the WAL, flushes
	// and compactions keep room and never meet ENOSPC. Both zero: no check.
	MinFreeBytes    uint64
	MinFreeFraction float64
	// SpaceCheckInterval is how often free space is read and a failed store
	// probes whether it can write again (default 500ms, on Clock).
	SpaceCheckInterval time.Duration
	// CloseTimeout bounds closing a failed database before reopening it
	// (default 10s); past it the store asks for a process restart.
	CloseTimeout time.Duration
	// FreeSpace overrides how free space is read (tests, the chaos suite's
	// disk-full knob). Default: the filesystem's disk usage of Dir.
	FreeSpace func() (free, total uint64, err error)
	// Logger receives Pebble's errors and one line per change of the store's
	// ability to write (default: slog.Default()).
	Logger *slog.Logger
	// ForeignPositions says the aggregators' positions and cell HWMs are not
	// positions of this store's log (they read Kafka: offsets of the topic).
	// A rebuild's finish then raises the log past the peer's cursor alone and
	// leaves the positions to RaiseRebuildBase (rebuild.go).
	ForeignPositions bool
}

type meta struct {
	Region     string `json:"region"`
	Partitions int    `json:"partitions"`
}

type result struct {
	d   edge.Decision
	err error
}

type op struct {
	req  edge.Request
	fn   func(b *pebble.Batch, w *batchWriter) error // writes ordered with Apply
	done chan result
}

// Store is one region's embedded database.
type Store struct {
	opts Options
	db   *dbRef
	fs   vfs.FS
	log  *slog.Logger

	ops      chan *op
	closing  chan struct{}
	loopDone chan struct{}
	once     sync.Once
	closeErr error

	mu       sync.Mutex // guards the fields below
	heads    []uint64   // visible log head per partition
	lastTime int64      // last event time assigned
	issued   int64      // max CompleteThrough handed to a reader
	inflight bool       // a group commit is in progress
	flightAt int64      // its event time
	// Retention (retention.go): truncation points and outbox checkpoints.
	floors      []uint64 // per partition: events at or below are deleted
	outboxFloor uint64   // outbox entries at or below are deleted
	checkpoints []checkpoint

	rebuild map[string]bool // peers a rebuild waits for (rebuild.go)

	// Owned by Retain's one caller: where the dedupe and idempotency sweeps
	// resume, and the sweep's pass so far (IdemEstimate).
	dedupeResume, idemResume   []byte
	idemPassKeys, idemLastPass int64

	cellMu  sync.Mutex // serializes fenced cell commits and cell merges
	cellSeq uint64     // last cell outbox sequence (guarded by cellMu)

	commitMu       sync.Mutex            // serializes writes to Pebble (see guardWrite)
	refuse         atomic.Pointer[error] // why writes are refused now; nil: writable
	hmu            sync.Mutex            // guards faults
	faults         faults
	tickMu         sync.Mutex // one monitor round at a time
	monitorDone    chan struct{}
	spaceErrLogged bool // guarded by tickMu
}

var (
	_ edge.Store         = (*Store)(nil)
	_ edge.JobStore      = (*Store)(nil)
	_ pipeline.Log       = (*Store)(nil)
	_ pipeline.CellStore = (*Store)(nil)
	_ counts.CountStore  = (*Store)(nil)
)

// Open opens or creates the database.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("pebblestore: Options.Dir is required")
	}
	if opts.Region == "" {
		return nil, errors.New("pebblestore: Options.Region is required")
	}
	if opts.Partitions == 0 {
		opts.Partitions = 16
	}
	if opts.Partitions < 1 || opts.Partitions > 4096 {
		return nil, fmt.Errorf("pebblestore: Partitions must be in [1, 4096], got %d", opts.Partitions)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 64 << 20
	}
	if opts.MinFreeFraction < 0 || opts.MinFreeFraction >= 1 {
		return nil, fmt.Errorf("pebblestore: MinFreeFraction must be in [0, 1), got %v", opts.MinFreeFraction)
	}
	if opts.SpaceCheckInterval <= 0 {
		opts.SpaceCheckInterval = 500 * time.Millisecond
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{
		opts:        opts,
		fs:          opts.FS,
		log:         opts.Logger.With("store", "pebble", "dir", opts.Dir),
		ops:         make(chan *op, opts.MaxBatch),
		closing:     make(chan struct{}),
		loopDone:    make(chan struct{}),
		monitorDone: make(chan struct{}),
		heads:       make([]uint64, opts.Partitions),
		floors:      make([]uint64, opts.Partitions),
	}
	if s.fs == nil {
		s.fs = vfs.Default
	}
	s.db = &dbRef{s: s}
	db, err := s.openDB()
	if err != nil {
		return nil, err
	}
	s.db.attach(db)
	if err := s.checkMeta(db); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.loadCellSeq(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.loadHeads(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.loadRebuild(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.checkSpace()
	go s.loop()
	go s.monitor()
	return s, nil
}

func (s *Store) checkMeta(db *pebble.DB) error {
	want := meta{Region: s.opts.Region, Partitions: s.opts.Partitions}
	v, closer, err := db.Get(metaKey)
	if errors.Is(err, pebble.ErrNotFound) {
		b, _ := json.Marshal(want)
		return s.guarded("meta", func() error { return db.Set(metaKey, b, pebble.Sync) })
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	var got meta
	if err := json.Unmarshal(v, &got); err != nil {
		return wrapCorrupt("meta", metaKey, err)
	}
	if got != want {
		return fmt.Errorf("pebblestore: %s was created for region %q with %d partitions, not region %q with %d",
			s.opts.Dir, got.Region, got.Partitions, want.Region, want.Partitions)
	}
	return nil
}

// loadHeads reads the log heads and the stamping floor from the database (at
// Open, and after a reopen, where the durable heads replace the ones in memory
// and the floor never goes back).
func (s *Store) loadHeads() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'l'}, UpperBound: []byte{'m'}})
	if err != nil {
		return err
	}
	defer it.Close()
	floors, floorTimes, err := s.loadFloors()
	if err != nil {
		return err
	}
	heads := make([]uint64, s.opts.Partitions)
	var lastTime, issued int64
	for p := 0; p < s.opts.Partitions; p++ {
		// A partition truncated through its head has no event left: its
		// floor carries the head and the last event time.
		heads[p] = floors[p]
		lastTime = max(lastTime, floorTimes[p])
		if !it.SeekLT(logKey(uint32(p)+1, 0)) {
			continue
		}
		k := it.Key()
		if len(k) != 13 || binary.BigEndian.Uint32(k[1:5]) != uint32(p) {
			continue
		}
		pos := binary.BigEndian.Uint64(k[5:])
		heads[p] = max(heads[p], pos)
		ev, err := decodeEvent(uint32(p), pos, it.Value())
		if err != nil {
			return wrapCorrupt("log event", k, err)
		}
		lastTime = max(lastTime, ev.EventTime)
	}
	// A committed watermark is a CompleteThrough this store handed out before
	// the restart: events written from now on must be stamped after it, even if
	// the clock has not moved past it (or stepped back), or the watermark would
	// claim events that are not applied yet.
	for p := 0; p < s.opts.Partitions; p++ {
		_, wm, err := s.Position(context.Background(), uint32(p))
		if err != nil {
			return err
		}
		issued = max(issued, wm)
	}
	s.cellMu.Lock()
	s.cellSeq = max(s.cellSeq, s.OutboxFloor()) // an outbox truncated through its last entry
	s.cellMu.Unlock()
	s.mu.Lock()
	copy(s.heads, heads)
	copy(s.floors, floors)
	s.lastTime = max(s.lastTime, lastTime)
	s.issued = max(s.issued, issued)
	s.inflight = false // a failed group is now in the log, or never will be
	s.mu.Unlock()
	return nil
}

// Partitions implements pipeline.Log.
func (s *Store) Partitions() int { return s.opts.Partitions }

// Region is the region this store belongs to.
func (s *Store) Region() string { return s.opts.Region }

// DB exposes the Pebble database to tests and tools in this module (nil while
// it is being reopened after a write error).
func (s *Store) DB() *pebble.DB { return s.db.raw() }

// Close stops the writer, failing queued requests with ErrClosed, and closes
// the database. Idempotent. A database wedged by a fatal error inside Pebble
// (Health.RestartRequired) is left unclosed: closing it could hang, and the
// process is about to restart.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.closing)
		<-s.loopDone
		<-s.monitorDone
		if s.Health().RestartRequired {
			s.closeErr = fmt.Errorf("%w: closed without closing the failed database", ErrFatal)
			return
		}
		if g := s.db.detach(); g != nil {
			g.refs.Wait()
			s.closeErr = g.db.Close()
		}
	})
	return s.closeErr
}

// submit hands a write to the writer loop, or refuses it at once while the
// store cannot write: it never queues behind a full disk or a failed WAL.
func (s *Store) submit(ctx context.Context, o *op) (edge.Decision, error) {
	if err := s.refusal(); err != nil {
		return edge.Decision{}, err
	}
	o.done = make(chan result, 1)
	select {
	case s.ops <- o:
	case <-s.closing:
		return edge.Decision{}, ErrClosed
	case <-ctx.Done():
		return edge.Decision{}, ctx.Err()
	}
	// Once queued the write happens; wait for its outcome even if ctx ends, so the
	// caller never reports failure for a write that became durable.
	select {
	case r := <-o.done:
		return r.d, r.err
	case <-s.loopDone:
		select {
		case r := <-o.done:
			return r.d, r.err
		default:
			return edge.Decision{}, ErrClosed
		}
	}
}

func (s *Store) loop() {
	defer close(s.loopDone)
	batch := make([]*op, 0, s.opts.MaxBatch)
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
		case <-s.closing:
			for {
				select {
				case o := <-s.ops:
					o.done <- result{err: ErrClosed}
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < s.opts.MaxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

// commit applies a group of requests in one indexed batch and one fsync. A
// group whose commit fails (the WAL write or its sync) is failed as a whole and
// never retried: the store goes to its failed state and reopens from disk.
//
// An operation that fails (a read error, a corrupt value) may already have
// written to the batch, and a batch cannot take writes back. So the group is
// built again without it, in a fresh batch: the others' reads and writes are
// redone and only operations that succeeded in the pass that commits are
// acknowledged (at most len(ops)+1 passes; only failures cost a pass).
func (s *Store) commit(ops []*op) {
	if err := s.refusal(); err != nil {
		for _, o := range ops {
			o.done <- result{err: err}
		}
		return
	}
	s.mu.Lock()
	now := max(s.opts.Clock.Now().UnixMilli(), s.lastTime, s.issued+1)
	s.lastTime = now
	s.inflight, s.flightAt = true, now
	heads := append([]uint64(nil), s.heads...)
	s.mu.Unlock()

	res := make([]result, len(ops))
	failed := make([]bool, len(ops))
	var (
		b    *batch
		next []uint64
		err  error
	)
	for {
		if b, err = s.db.newBatch(true); err != nil {
			break
		}
		next = append(next[:0], heads...)
		again := false
		for i, o := range ops {
			if failed[i] {
				continue
			}
			bw := &batchWriter{s: s, b: b.Batch, now: now, next: next}
			if o.fn != nil {
				res[i] = result{err: o.fn(b.Batch, bw)}
			} else {
				res[i].d, res[i].err = s.applyOne(b.Batch, o.req, bw)
			}
			if res[i].err != nil {
				failed[i], again = true, true
			}
		}
		if !again {
			break
		}
		_ = b.Close() // holds a failed op's writes: drop it, build the rest again
		b = nil
	}
	if b != nil {
		err = b.Commit(pebble.Sync)
		_ = b.Close()
	}
	s.mu.Lock()
	if err == nil {
		copy(s.heads, next)
	}
	// A group whose commit failed fatally may still turn out durable (its
	// bytes reached the disk anyway): keep its time as the bound of
	// CompleteThrough until the reopen reloads the log, or a watermark handed
	// out meanwhile could claim its events before they are counted.
	s.inflight = err != nil && errors.Is(err, ErrFatal)
	s.mu.Unlock()
	for i, o := range ops {
		if err != nil && !failed[i] {
			res[i] = result{err: fmt.Errorf("pebblestore: commit: %w", err)}
		}
		o.done <- res[i]
	}
}

// getter is what point reads need: the database handle or a batch.
type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

func getInto[T any](r getter, key []byte, decode func([]byte) (T, error)) (T, bool, error) {
	var zero T
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return zero, false, nil
	}
	if err != nil {
		return zero, false, err
	}
	defer closer.Close()
	t, err := decode(v)
	if err != nil {
		return zero, false, wrapCorrupt("value", key, err)
	}
	return t, true, nil
}

func exists(r getter, key []byte) (bool, error) {
	_, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	closer.Close()
	return true, nil
}

// batchWriter appends log events to a group commit, assigning positions.
type batchWriter struct {
	s    *Store
	b    *pebble.Batch
	now  int64
	next []uint64
}

func (w *batchWriter) appendEvent(ev edge.Event) edge.Event {
	ev.Partition = edge.PartitionOf(ev.Item, ev.Bucket, w.s.opts.Partitions)
	w.next[ev.Partition]++
	ev.Pos = w.next[ev.Partition]
	ev.EventTime = w.now
	if ev.Kind == edge.KindReconcile {
		ev.Version = crdt.Version{Op: ev.Pos} // unique and growing: its dedupe identity
	}
	_ = w.b.Set(logKey(ev.Partition, ev.Pos), encodeEvent(ev), nil)
	return ev
}

func (s *Store) applyOne(b *pebble.Batch, req edge.Request, w *batchWriter) (edge.Decision, error) {
	ek := edgeKey(req.Item, req.User)
	cur, _, err := getInto(b, ek, func(v []byte) (edge.Edge, error) { return decodeEdge(req.Item, req.User, v) })
	if err != nil {
		return edge.Decision{}, err
	}
	var rec *edge.IdemRecord
	if req.IdemKey != "" {
		r, ok, err := getInto(b, idemKey(req.User, req.IdemKey), func(v []byte) (edge.IdemRecord, error) {
			return decodeIdem(req.Item, req.User, v)
		})
		if err != nil {
			return edge.Decision{}, err
		}
		if ok {
			rec = &r
		}
	}
	erased, err := exists(b, erasureKey(req.User))
	if err != nil {
		return edge.Decision{}, err
	}
	d := edge.Decide(cur, rec, erased, req)
	if r := d.Record(req); r != nil {
		_ = b.Set(idemKey(req.User, req.IdemKey), encodeIdem(*r), nil)
	}
	logEv := d.LogEvent(req)
	if d.Action != edge.ActWrite {
		if logEv != nil { // a no-op's record, carried to peers
			w.appendEvent(*logEv)
		}
		return d, nil
	}
	if d.Branch != nil {
		bk := branchKey(req.Item, req.User)
		rec, _, err := getInto(b, bk, decodeBranchRec)
		if err != nil {
			return edge.Decision{}, err
		}
		rec.bs = rec.bs.Open(d.Branch.Epoch, d.Branch.Base)
		_ = b.Set(bk, encodeBranchRec(rec), nil)
	}
	_ = b.Set(ek, encodeEdge(d.Edge), nil)
	_ = b.Set(userIdxKey(req.User, req.Item), nil, nil)
	ev := w.appendEvent(*logEv)
	d.Event = &ev
	return d, nil
}

// Apply implements edge.Store.
func (s *Store) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	if s.rebuilding("") {
		return edge.Decision{}, ErrRebuilding
	}
	return s.submit(ctx, &op{req: req})
}

// Edge implements edge.Store.
func (s *Store) Edge(_ context.Context, item, user string) (edge.Edge, bool, error) {
	return getInto(s.db, edgeKey(item, user), func(v []byte) (edge.Edge, error) { return decodeEdge(item, user, v) })
}

// Branches returns an edge's branch records.
func (s *Store) Branches(_ context.Context, item, user string) (crdt.Branches, error) {
	rec, _, err := getInto(s.db, branchKey(item, user), decodeBranchRec)
	return rec.bs, err
}

// Likers implements edge.Store. The cursor is the (bucket, user) of the last row
// looked at; a page may hold fewer than limit users when many rows in a row are
// not LIKED, and then still carries a cursor.
func (s *Store) Likers(_ context.Context, item, cursor string, limit int) ([]string, string, error) {
	prefix := edgePrefix(item)
	start := prefix
	if cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(c) < 2 || c[0] >= edge.Buckets || bytes.IndexByte(c[1:], sep) >= 0 {
			return nil, "", ErrBadCursor
		}
		start = append(append(append([]byte(nil), prefix...), c...), sep)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, "", err
	}
	defer it.Close()
	budget := 16*limit + 256
	var users []string
	var last []byte
	for ok := it.First(); ok; ok = it.Next() {
		if len(users) == limit || budget == 0 {
			return users, base64.RawURLEncoding.EncodeToString(last), nil
		}
		budget--
		k := it.Key()
		last = append(last[:0], k[len(prefix):]...)
		if len(it.Value()) > 0 && crdt.State(it.Value()[0]) == crdt.Liked {
			users = append(users, string(k[len(prefix)+1:]))
		}
	}
	return users, "", it.Error()
}

// UserItems implements edge.Store.
func (s *Store) UserItems(_ context.Context, user, after string, limit int) ([]string, error) {
	prefix := userIdxPrefix(user)
	start := prefix
	if after != "" {
		start = append(append(append([]byte(nil), prefix...), after...), sep)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var items []string
	for ok := it.First(); ok && len(items) < limit; ok = it.Next() {
		items = append(items, string(it.Key()[len(prefix):]))
	}
	return items, it.Error()
}

// PurgeUser implements edge.Store.
func (s *Store) PurgeUser(ctx context.Context, user string) error {
	_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, w *batchWriter) error {
		if err := purgeUser(b, user); err != nil {
			return err
		}
		w.appendEvent(edge.Event{User: user, Bucket: edge.BucketOf(user), Kind: edge.KindPurge})
		return nil
	}})
	return err
}

// PutErasure implements edge.JobStore, ordered with Apply.
func (s *Store) PutErasure(ctx context.Context, j edge.ErasureJob) error {
	_, err := s.submit(ctx, &op{fn: func(b *pebble.Batch, w *batchWriter) error {
		old, had, err := getInto(b, erasureKey(j.User), decodeJob)
		if err != nil {
			return err
		}
		j := j
		if had {
			j = edge.MergeJob(old, j)
		}
		v, err := encodeJob(j)
		if err != nil {
			return err
		}
		// A job starting here (new, or taken over from a remote replica) is
		// logged, so its mark replicates with the log: a region that becomes the
		// user's home (a planned move catches up on this log first) refuses the
		// erased user's writes from then on, not only after the purge.
		if j.State == edge.ErasureRunning && !j.Remote && (!had || old.Remote) {
			w.appendEvent(edge.Event{User: j.User, Bucket: edge.BucketOf(j.User), Kind: edge.KindErasing})
		}
		return b.Set(erasureKey(j.User), v, nil)
	}})
	return err
}

func encodeJob(j edge.ErasureJob) ([]byte, error) {
	return json.Marshal(struct {
		edge.ErasureJob
		Cursor string `json:"cursor"`
	}{j, j.Cursor})
}

func decodeJob(v []byte) (edge.ErasureJob, error) {
	var j struct {
		edge.ErasureJob
		Cursor string `json:"cursor"`
	}
	err := json.Unmarshal(v, &j)
	j.ErasureJob.Cursor = j.Cursor
	return j.ErasureJob, err
}

// Erasure implements edge.JobStore.
func (s *Store) Erasure(_ context.Context, user string) (edge.ErasureJob, bool, error) {
	return getInto(s.db, erasureKey(user), decodeJob)
}

// Erasures implements edge.JobStore.
func (s *Store) Erasures(_ context.Context) ([]edge.ErasureJob, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'x'}, UpperBound: []byte{'y'}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []edge.ErasureJob
	for ok := it.First(); ok; ok = it.Next() {
		j, err := decodeJob(it.Value())
		if err != nil {
			return nil, wrapCorrupt("erasure job", it.Key(), err)
		}
		out = append(out, j)
	}
	return out, it.Error()
}

// Read implements pipeline.Log.
func (s *Store) Read(_ context.Context, part uint32, after uint64, limit int) ([]edge.Event, pipeline.Head, error) {
	if int(part) >= s.opts.Partitions {
		return nil, pipeline.Head{}, fmt.Errorf("pebblestore: partition %d out of range", part)
	}
	s.mu.Lock()
	h := pipeline.Head{Pos: s.heads[part]}
	if s.inflight {
		h.CompleteThrough = s.flightAt - 1
	} else {
		h.CompleteThrough = max(s.opts.Clock.Now().UnixMilli(), s.issued)
	}
	s.issued = max(s.issued, h.CompleteThrough)
	s.mu.Unlock()
	if after >= h.Pos {
		return nil, h, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(part, after+1), UpperBound: logKey(part, h.Pos+1)})
	if err != nil {
		return nil, h, err
	}
	defer it.Close()
	if err := s.truncatedBelow(part, after); err != nil {
		return nil, h, err
	}
	var evs []edge.Event
	for ok := it.First(); ok && len(evs) < limit; ok = it.Next() {
		ev, err := decodeEvent(part, binary.BigEndian.Uint64(it.Key()[5:]), it.Value())
		if err != nil {
			return nil, h, wrapCorrupt("log event", it.Key(), err)
		}
		evs = append(evs, ev)
	}
	return evs, h, it.Error()
}

// Position implements pipeline.CellStore.
func (s *Store) Position(_ context.Context, part uint32) (uint64, int64, error) {
	v, closer, err := s.db.Get(posKey(part))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer closer.Close()
	return decodePos(v)
}

// Cells implements pipeline.CellStore.
func (s *Store) Cells(_ context.Context, keys []crdt.CellKey) (map[crdt.CellKey]crdt.Cell, error) {
	out := make(map[crdt.CellKey]crdt.Cell, len(keys))
	for _, k := range keys {
		c, ok, err := getInto(s.db, cellKey(k), decodeCell)
		if err != nil {
			return nil, err
		}
		if ok {
			out[k] = c
		}
	}
	return out, nil
}

// Applied implements pipeline.CellStore.
func (s *Store) Applied(_ context.Context, _ uint32, keys []pipeline.EdgeKey) (map[pipeline.EdgeKey]pipeline.Applied, error) {
	out := make(map[pipeline.EdgeKey]pipeline.Applied, len(keys))
	for _, k := range keys {
		a, ok, err := getInto(s.db, dedupeKey(k.Item, k.User), decodeApplied)
		if err != nil {
			return nil, err
		}
		if ok {
			out[k] = a
		}
	}
	return out, nil
}

// Commit implements pipeline.CellStore: one atomic batch, fenced per cell.
func (s *Store) Commit(_ context.Context, w pipeline.Window) error {
	if err := s.fatalErr(); err != nil {
		return err
	}
	s.cellMu.Lock()
	defer s.cellMu.Unlock()
	if fl := s.logFloor(w.Partition); w.Through < fl && !s.opts.ForeignPositions {
		// An aggregator's stale position under a floor a rebuild raised.
		// (Positions of another log are not comparable with the floor.)
		return fmt.Errorf("%w: window of partition %d through %d, below the floor %d", ErrTruncated, w.Partition, w.Through, fl)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, u := range w.Cells {
		k := cellKey(u.Key)
		cur, _, err := getInto(s.db, k, decodeCell)
		if err != nil {
			return err
		}
		if cur.HWM != u.Expect {
			return fmt.Errorf("%w: cell %v has hwm %d, window expected %d", pipeline.ErrFenced, u.Key, cur.HWM, u.Expect)
		}
		_ = b.Set(k, encodeCell(u.Cell), nil)
	}
	for _, u := range w.Cells {
		s.cellSeq++
		_ = b.Set(outboxKey(s.cellSeq), cellKey(u.Key), nil)
	}
	for k, a := range w.Dedupe {
		_ = b.Set(dedupeKey(k.Item, k.User), encodeApplied(a), nil)
	}
	_ = b.Set(posKey(w.Partition), encodePos(w.Through, w.Watermark), nil)
	// Windows that change cells are synced: their outbox sequence numbers are
	// shipped to peers, whose cursors must never get ahead of what survives a
	// crash here (else changes reusing those numbers would be skipped until
	// anti-entropy). Watermark-only windows need no fsync: losing one only
	// makes asOf older.
	opt := pebble.NoSync
	if len(w.Cells) > 0 {
		opt = pebble.Sync
	}
	if err := b.Commit(opt); err != nil {
		s.cellSeq -= uint64(len(w.Cells))
		return err
	}
	return nil
}

// Count implements counts.CountStore.
func (s *Store) Count(_ context.Context, item string) (int64, error) {
	prefix := cellPrefix(item)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		c, err := decodeCell(it.Value())
		if err != nil {
			return 0, wrapCorrupt("cell", it.Key(), err)
		}
		n += c.Value()
	}
	return n, it.Error()
}

// Watermarks implements counts.CountStore: this region's watermark is the min
// over its partitions (a partition never committed counts as 0); peers'
// watermarks are the latest shipped with their cells.
func (s *Store) Watermarks(ctx context.Context) (crdt.Watermarks, error) {
	min, err := s.OwnWatermark(ctx)
	if err != nil {
		return nil, err
	}
	wms := crdt.Watermarks{s.opts.Region: min}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'w'}, UpperBound: []byte{'x'}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, n := binary.Varint(it.Value())
		if n <= 0 {
			return nil, wrapCorrupt("watermark", it.Key(), errCorrupt)
		}
		wms[string(it.Key()[1:])] = v
	}
	return wms, it.Error()
}
