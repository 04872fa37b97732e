package cassandra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/pipeline"
)

// chunkSize is how many positions one outbox partition holds (pos / 1024).
const chunkSize = 1024

func chunkOf(pos uint64) int64 { return int64(pos / chunkSize) }

// seqRow is a log partition's sequence row.
type seqRow struct {
	exists   bool
	head     uint64
	lastTime int64
	issued   int64
	inflight []slot
}

// appendReq is one event waiting for its position.
type appendReq struct {
	part uint32 // the log partition (or feedPart)
	slot slot   // ESeq > 0: an edge's pending event (Item/User name the edge)
	// legacy: the pending event is of format 1, which an earlier release may
	// have relayed (tryAppend then reads the edge row too).
	legacy bool
	done   chan appendRes
}

type appendRes struct {
	res relayed
	err error
}

// appender is the in-process sequencer of one sequence group (one log
// partition in the per-partition layout): it folds the events waiting at a
// moment, for any partition of the group, into one append (one transaction on
// the group's sequence rows), so this process never contends with itself
// there. Processes sharing the keyspace contend through the transaction.
type appender struct {
	s      *Store
	group  uint32
	reqs   chan *appendReq
	exited chan struct{} // closed when loop returns
	parts  map[uint32]*partSeq
}

// partSeq is what an appender knows of one partition's sequence row.
type partSeq struct {
	// completed is the head after the last append whose slots this appender
	// fully wrote and recorded (0: none): the next append may then skip
	// flushing them again.
	completed uint64
	// known is the sequence row as this appender's last applied, finished
	// append left it (nil: unknown). The next append conditions its
	// transaction on it instead of reading the row at the serial consistency
	// first; if anyone moved the row since, the condition fails and the retry
	// reads it.
	known *seqRow
}

func (a *appender) part(p uint32) *partSeq {
	ps := a.parts[p]
	if ps == nil {
		ps = &partSeq{}
		a.parts[p] = ps
	}
	return ps
}

func (s *Store) appenderOf(part uint32) (*appender, error) {
	s.appMu.Lock()
	defer s.appMu.Unlock()
	if s.isClosed() {
		return nil, ErrClosed
	}
	g := s.seqGroup(part)
	a := s.appenders[g]
	if a == nil {
		a = &appender{s: s, group: g, reqs: make(chan *appendReq, s.opts.MaxBatch), exited: make(chan struct{}), parts: map[uint32]*partSeq{}}
		s.appenders[g] = a
		s.wg.Add(1)
		go a.loop()
	}
	return a, nil
}

// submit queues r and waits for its outcome. Once queued the append happens
// (or fails) even if ctx ends, so a caller never reports failure for an event
// that reached the log.
func (s *Store) submit(ctx context.Context, part uint32, sl slot, legacy bool) (relayed, error) {
	a, err := s.appenderOf(part)
	if err != nil {
		return relayed{}, err
	}
	r := &appendReq{part: part, slot: sl, legacy: legacy, done: make(chan appendRes, 1)}
	select {
	case a.reqs <- r:
	case <-s.closing:
		return relayed{}, ErrClosed
	case <-ctx.Done():
		return relayed{}, ctx.Err()
	}
	select {
	case res := <-r.done:
		return res.res, res.err
	case <-a.exited:
		select {
		case res := <-r.done:
			return res.res, res.err
		default:
			return relayed{}, ErrClosed
		}
	}
}

// appendEdgeEvent appends an edge's pending event (exactly once).
func (s *Store) appendEdgeEvent(ctx context.Context, item, user string, eseq uint64, p pending) (relayed, error) {
	ev := p.Event
	ev.Item, ev.User = item, user
	ev.Partition = edge.PartitionOf(item, edge.BucketOf(user), s.opts.Partitions)
	return s.submit(ctx, ev.Partition, slot{ESeq: eseq, Nonce: p.Nonce, Event: ev}, p.legacy)
}

// appendStandalone appends an event that no edge row carries (purges,
// reconcile heals). A retry after an unknown outcome may append it twice;
// such events are idempotent in effect.
func (s *Store) appendStandalone(ctx context.Context, ev edge.Event) (relayed, error) {
	ev.Partition = edge.PartitionOf(ev.Item, ev.Bucket, s.opts.Partitions)
	return s.submit(ctx, ev.Partition, slot{Nonce: rand.Uint64() | 1, Event: ev}, false)
}

func (a *appender) loop() {
	defer a.s.wg.Done()
	defer close(a.exited)
	batch := make([]*appendReq, 0, a.s.opts.MaxBatch)
	for {
		select {
		case r := <-a.reqs:
			batch = append(batch[:0], r)
		case <-a.s.closing:
			for {
				select {
				case r := <-a.reqs:
					r.done <- appendRes{err: ErrClosed}
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < a.s.opts.MaxBatch {
			select {
			case r := <-a.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		a.appendBatch(batch)
	}
}

// edgeSlotKey identifies an edge event.
type edgeSlotKey struct {
	item, user string
	eseq       uint64
}

// appendBatch appends the events of reqs to the partition, each exactly once.
//
// The dedupe argument (doc.go, "Outbox order"): take the sequence row (a
// SERIAL read, or the state our own last append left), then read every edge
// event's row and relay record (LOCAL_QUORUM), then append with a transaction
// conditioned on the head taken first. An event is appended by a transaction
// that moved the head; if that happened before our sequence state, the event
// is either in the row's inflight slots (found) or those slots were replaced,
// which happens only after they were written and their relay records written
// (so our later read finds it relayed); if it happened after, our
// transaction's condition fails and we start over.
func (a *appender) appendBatch(reqs []*appendReq) {
	s := a.s
	ctx := s.ctx // queued appends finish even if their callers gave up (Close cancels)
	// Collapse duplicates (several relays of one pending event).
	groups := map[edgeSlotKey][]*appendReq{}
	var order []*appendReq
	for _, r := range reqs {
		if r.slot.ESeq == 0 {
			order = append(order, r)
			continue
		}
		k := edgeSlotKey{r.slot.Event.Item, r.slot.Event.User, r.slot.ESeq}
		if groups[k] == nil {
			order = append(order, r)
		}
		groups[k] = append(groups[k], r)
	}
	settle := func(r *appendReq, res appendRes) {
		if r.slot.ESeq == 0 {
			r.done <- res
			return
		}
		for _, x := range groups[edgeSlotKey{r.slot.Event.Item, r.slot.Event.User, r.slot.ESeq}] {
			x.done <- res
		}
	}
	open := order
	var lastErr error
	for attempt := 0; attempt < s.opts.MaxAttempts && len(open) > 0; attempt++ {
		if attempt > 0 && lastErr != nil {
			if err := backoff(ctx, attempt); err != nil {
				break
			}
		}
		var err error
		open, err = a.tryAppend(ctx, open, settle)
		lastErr = err
		if err != nil && !retryable(err) && !errors.Is(err, errLostRace) {
			for _, r := range open {
				settle(r, appendRes{err: err})
			}
			return
		}
	}
	for _, r := range open {
		err := fmt.Errorf("%w: outbox append to partition %d: %v", ErrContention, r.part, lastErr)
		settle(r, appendRes{err: err})
	}
}

// rowFromRelay is what step 2 of tryAppend needs of the edge of a format-2
// event eseq, from its relay record alone: still pending below the record,
// else relayed (at the record's position when the record is this event's).
func rowFromRelay(eseq uint64, rel relayRec) edgeRow {
	r := edgeRow{eseq: eseq, relayedESeq: rel.eseq, relayedPos: rel.pos, relayedTime: rel.time}
	if rel.eseq < eseq {
		r.pending = &pending{}
	}
	return r
}

// errLostRace: another append moved the head between our read and our write.
var errLostRace = errors.New("cassandra: outbox append lost a race")

// maxSeqBatchBytes bounds the inflight slots one grouped transaction
// carries (Cassandra refuses a batch past batch_size_fail_threshold, 50 KiB
// by default); partitions beyond it wait for the next transaction.
const maxSeqBatchBytes = 32 << 10

// partAppend is one partition's part of an append.
type partAppend struct {
	part  uint32
	seq   seqRow // the row the transaction is conditioned on
	slots []slot
	blob  []byte
	head  uint64
	t     int64
}

// tryAppend is one attempt; it settles what it can and returns the rest.
func (a *appender) tryAppend(ctx context.Context, open []*appendReq, settle func(*appendReq, appendRes)) ([]*appendReq, error) {
	s := a.s
	// The sequence rows of the partitions open touches: as this appender's
	// own last append left them, else read at the serial consistency.
	var parts []uint32
	for _, r := range open {
		if !slices.Contains(parts, r.part) {
			parts = append(parts, r.part)
		}
	}
	slices.Sort(parts)
	seqs := make(map[uint32]seqRow, len(parts))
	var unknown []uint32
	for _, p := range parts {
		if k := a.part(p).known; k != nil {
			seqs[p] = *k
		} else {
			unknown = append(unknown, p)
		}
	}
	if len(unknown) > 0 {
		got, err := s.readSeqs(ctx, unknown)
		if err != nil {
			return open, err
		}
		maps.Copy(seqs, got)
	}
	for _, p := range parts {
		a.part(p).known = nil // until this attempt ends with our own append applied and finished
	}
	inflight := map[edgeSlotKey]slot{}
	for _, p := range parts {
		for _, sl := range seqs[p].inflight {
			if sl.ESeq > 0 {
				inflight[edgeSlotKey{sl.Event.Item, sl.Event.User, sl.ESeq}] = sl
			}
		}
	}
	// flush writes and records a partition's last append's slots unless this
	// appender did so already.
	flush := func(p uint32) error {
		ps, seq := a.part(p), seqs[p]
		if len(seq.inflight) == 0 || ps.completed == seq.head {
			return nil
		}
		if err := s.finishSlots(ctx, p, seq.inflight); err != nil {
			return err
		}
		ps.completed = seq.head
		return nil
	}
	// 1. Events in the last append's slots are appended already.
	rest := open[:0:0]
	for _, r := range open {
		if sl, ok := inflight[edgeSlotKey{r.slot.Event.Item, r.slot.Event.User, r.slot.ESeq}]; ok && r.slot.ESeq > 0 {
			if err := flush(r.part); err != nil {
				return open, err
			}
			settle(r, appendRes{res: relayed{pos: sl.Pos, time: sl.Event.EventTime}})
			continue
		}
		rest = append(rest, r)
	}
	// 2. Events whose edge no longer holds them pending were relayed by
	// someone else. LOCAL_QUORUM reads suffice: a relay whose slots were
	// replaced before our sequence state finished writing its relay records
	// (or, from an older release, clearing its pending columns) before that
	// replacing transaction. An event of format 2 is relayed only by
	// releases that record every relay in edge_relays (an earlier one fails
	// to decode it), and a later event of its edge is written only once its
	// record is: so its relay record alone tells, one read instead of two.
	rows := make([]edgeRow, len(rest))
	if err := parallel(len(rest), func(i int) error {
		r := rest[i]
		if r.slot.ESeq == 0 {
			return nil
		}
		var err error
		if r.legacy {
			rows[i], err = s.readEdgeRelayed(ctx, r.slot.Event.Item, r.slot.Event.User, false)
			return err
		}
		var rel relayRec
		rel, err = s.readRelay(ctx, r.slot.Event.Item, r.slot.Event.User)
		rows[i] = rowFromRelay(r.slot.ESeq, rel)
		return err
	}); err != nil {
		return rest, err
	}
	todo := rest[:0:0]
	for i, r := range rest {
		if r.slot.ESeq == 0 {
			todo = append(todo, r)
			continue
		}
		row := rows[i]
		switch {
		case row.eseq == r.slot.ESeq && row.pending != nil:
			todo = append(todo, r)
		case row.eseq == r.slot.ESeq && row.relayedESeq == r.slot.ESeq:
			settle(r, appendRes{res: relayed{pos: row.relayedPos, time: row.relayedTime}})
		case row.eseq >= r.slot.ESeq:
			settle(r, appendRes{}) // relayed, position no longer known here
		default:
			settle(r, appendRes{err: fmt.Errorf("cassandra: edge (%q, %q) is at event %d, behind its pending event %d",
				r.slot.Event.Item, r.slot.Event.User, row.eseq, r.slot.ESeq)})
		}
	}
	byPart := map[uint32][]*appendReq{}
	for _, r := range todo {
		byPart[r.part] = append(byPart[r.part], r)
	}
	// The rows this attempt does not transact on stay as read (or as known),
	// for the next append's condition, if their slots are written.
	for _, p := range parts {
		if seq := seqs[p]; len(byPart[p]) == 0 && a.part(p).completed == seq.head && seq.exists {
			a.part(p).known = &seq
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	// 3. The last append's slots must be written and recorded before they are
	// replaced (unless this appender did so itself).
	for _, p := range parts {
		if len(byPart[p]) > 0 {
			if err := flush(p); err != nil {
				return todo, err
			}
		}
	}
	// 4. Append: in each partition positions head+1…, one event time for the
	// partition's slots, never below its last one nor at or below a
	// CompleteThrough already handed out; one transaction for them all.
	now := s.opts.Clock.Now().UnixMilli()
	var apps []partAppend
	var later []*appendReq // past maxSeqBatchBytes: the next transaction's
	size := 0
	for _, p := range parts {
		rs := byPart[p]
		if len(rs) == 0 {
			continue
		}
		if len(apps) > 0 && size >= maxSeqBatchBytes {
			later = append(later, rs...)
			continue
		}
		seq := seqs[p]
		t := max(now, seq.lastTime, seq.issued+1)
		slots := make([]slot, len(rs))
		for i, r := range rs {
			sl := r.slot
			sl.Pos = seq.head + uint64(i) + 1
			sl.Event.Partition, sl.Event.Pos, sl.Event.EventTime = p, sl.Pos, t
			if sl.Event.Kind == edge.KindReconcile {
				sl.Event.Version = crdt.Version{Op: sl.Pos} // unique and growing: its dedupe identity
			}
			slots[i] = sl
		}
		blob := encodeInflight(slots)
		size += len(blob)
		apps = append(apps, partAppend{part: p, seq: seq, slots: slots, blob: blob, head: seq.head + uint64(len(slots)), t: t})
	}
	applied, err := a.transact(ctx, apps)
	if err != nil {
		if !retryable(err) {
			return todo, err
		}
		// Outcome unknown: look for our slots (a batch is atomic, so its
		// first partition tells for all).
		first := apps[0]
		seq2, err2 := s.readSeq(ctx, first.part, true)
		if err2 != nil || len(seq2.inflight) == 0 || seq2.inflight[0].Nonce != first.slots[0].Nonce || seq2.inflight[0].Pos != first.slots[0].Pos {
			return todo, err // not ours (or replaced: then the edge reads of the next attempt tell)
		}
		applied = true
	}
	if !applied {
		return todo, errLostRace
	}
	if err := s.crashPoint("sequence-written"); err != nil {
		return todo, err
	}
	done := make([]bool, len(apps))
	_ = parallel(len(apps), func(i int) error {
		if err := s.finishSlots(ctx, apps[i].part, apps[i].slots); err != nil {
			// The slots are committed in the sequence row: a reader or the
			// next append writes them. Report the positions anyway.
			s.opts.OnError(err)
			return nil
		}
		done[i] = true
		return nil
	})
	for i, ap := range apps {
		if done[i] {
			ps := a.part(ap.part)
			ps.completed = ap.head
			ps.known = &seqRow{exists: true, head: ap.head, lastTime: ap.t, issued: ap.seq.issued, inflight: ap.slots}
		}
		for j, r := range byPart[ap.part] { // slot j was made from request j
			settle(r, appendRes{res: relayed{pos: ap.slots[j].Pos, time: ap.slots[j].Event.EventTime}})
		}
	}
	return later, nil
}

// transact is the append's one lightweight transaction: a conditional
// statement for one partition, a conditional batch on the group's Cassandra
// partition for several (atomic: all apply or none).
func (a *appender) transact(ctx context.Context, apps []partAppend) (bool, error) {
	s := a.s
	if len(apps) == 1 {
		ap := apps[0]
		stmt, args := s.seqAppendArgs(ap.part, ap.seq, ap.head, ap.t, ap.blob)
		return s.cas(ctx, stmt, args...).MapScanCAS(map[string]any{})
	}
	b := s.newBatch(ctx, gocql.LoggedBatch, true, "BATCH outbox_seqs")
	b.SerialConsistency(s.opts.Serial)
	for _, ap := range apps {
		stmt, args := s.seqAppendArgs(ap.part, ap.seq, ap.head, ap.t, ap.blob)
		b.Query(stmt, args...)
	}
	applied, it, err := s.s.MapExecuteBatchCAS(b, map[string]any{})
	if it != nil {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}
	return applied, err
}

// finishSlots makes an append's slots durable as outbox rows, then records
// each edge event's relay (where it went) in edge_relays, which is what marks
// its edge's pending event relayed. Plain writes only; idempotent.
func (s *Store) finishSlots(ctx context.Context, part uint32, slots []slot) error {
	if err := s.writeRows(ctx, part, slots); err != nil {
		return err
	}
	return parallel(len(slots), func(i int) error {
		if slots[i].ESeq == 0 {
			return nil
		}
		return s.writeRelay(ctx, slots[i])
	})
}

// writeRows writes slots as outbox rows, one unlogged batch per chunk
// partition. Rows are written with their final contents, so writing one twice
// changes nothing.
func (s *Store) writeRows(ctx context.Context, part uint32, slots []slot) error {
	byChunk := map[int64][]slot{}
	for _, sl := range slots {
		byChunk[chunkOf(sl.Pos)] = append(byChunk[chunkOf(sl.Pos)], sl)
	}
	for chunk, ss := range byChunk {
		b := s.newBatch(ctx, gocql.UnloggedBatch, false, "BATCH outbox")
		for _, sl := range ss {
			b.Query(s.q.outboxInsert, int(part), chunk, int64(sl.Pos), encodeEvent(sl.Event))
		}
		if err := s.s.ExecuteBatch(b); err != nil {
			return fmt.Errorf("cassandra: write outbox rows of partition %d: %w", part, err)
		}
	}
	return nil
}

// Read implements pipeline.Log. Every position up to the sequence row's head
// is an outbox row, or one of the head's inflight slots that the appender has
// not written yet (Read writes those itself), so a reader never sees a
// position appear behind its cursor.
//
// CompleteThrough is max(last event time − 1, issued): events are stamped at
// or after the last one and strictly after issued. To let an idle partition's
// watermark follow the clock, Read records issued = now with a transaction
// conditioned on the head it read, at most once per IssueEvery of the clock.
func (s *Store) Read(ctx context.Context, part uint32, after uint64, limit int) ([]edge.Event, pipeline.Head, error) {
	if int(part) >= s.opts.Partitions {
		return nil, pipeline.Head{}, fmt.Errorf("cassandra: partition %d out of range", part)
	}
	return s.readLog(ctx, part, after, limit, true)
}

// readLog is Read of any outbox partition (the log's, or the cell-change
// feed's without issuing CompleteThrough).
func (s *Store) readLog(ctx context.Context, part uint32, after uint64, limit int, issue bool) ([]edge.Event, pipeline.Head, error) {
	seq, err := s.readSeq(ctx, part, false)
	if err != nil {
		return nil, pipeline.Head{}, err
	}
	h := pipeline.Head{Pos: seq.head, CompleteThrough: max(seq.lastTime-1, seq.issued)}
	if now := s.opts.Clock.Now().UnixMilli(); issue && now-h.CompleteThrough >= s.opts.IssueEvery.Milliseconds() && now > seq.issued {
		var applied bool
		var err error
		if seq.exists {
			applied, err = s.cas(ctx, s.sq.issue, s.seqArgs(part, []any{now}, int64(seq.head), seq.issued)...).MapScanCAS(map[string]any{})
		} else {
			applied, err = s.cas(ctx, s.sq.issueNew, s.seqArgs(part, []any{now})...).MapScanCAS(map[string]any{})
		}
		if err == nil && applied {
			h.CompleteThrough = now
		}
		// Otherwise an append (or another reader) got there first; the old
		// CompleteThrough is still honest for this head.
	}
	if after >= h.Pos || limit <= 0 {
		return nil, h, nil
	}
	upper := min(h.Pos, after+uint64(limit))
	evs, missing, err := s.readRows(ctx, part, after, upper)
	if err != nil {
		return nil, h, err
	}
	if len(missing) > 0 {
		// Rows below the truncation point were deleted by retention. Its
		// floor is written before its rows are deleted (retention.go), so a
		// read that missed deleted rows sees the raised floor here.
		if fl, err := s.logFloor(ctx, part); err != nil {
			return nil, h, err
		} else if after < fl {
			return nil, h, truncatedErr(part, after, fl)
		}
		// Missing rows are the head's inflight slots (the appender is
		// writing them, or died): write them from the sequence row.
		byPos := map[uint64]slot{}
		for _, sl := range seq.inflight {
			byPos[sl.Pos] = sl
		}
		var fill []slot
		for _, p := range missing {
			sl, ok := byPos[p]
			if !ok {
				fill = nil
				break // the slots were replaced since our read, so they are written now
			}
			fill = append(fill, sl)
		}
		if fill != nil {
			if err := s.writeRows(ctx, part, fill); err != nil {
				return nil, h, err
			}
		}
		evs, missing, err = s.readRows(ctx, part, after, upper)
		if err != nil {
			return nil, h, err
		}
		if len(missing) > 0 {
			return nil, h, fmt.Errorf("cassandra: outbox partition %d has no row at position %d below head %d", part, missing[0], h.Pos)
		}
	}
	return evs, h, nil
}

// readRows reads positions (after, upper] and reports the ones without a row.
func (s *Store) readRows(ctx context.Context, part uint32, after, upper uint64) ([]edge.Event, []uint64, error) {
	var evs []edge.Event
	for c := chunkOf(after + 1); c <= chunkOf(upper); c++ {
		it := s.read(ctx, s.q.outboxRange, int(part), c, int64(after), int64(upper)).PageSize(1000).Iter()
		var pos int64
		var blob []byte
		for it.Scan(&pos, &blob) {
			ev, err := decodeEvent(part, uint64(pos), blob)
			if err != nil {
				_ = it.Close()
				return nil, nil, wrapCorrupt(fmt.Sprintf("outbox row %d/%d", part, pos), err)
			}
			evs = append(evs, ev)
		}
		if err := it.Close(); err != nil {
			return nil, nil, err
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].Pos < evs[j].Pos })
	var missing []uint64
	next := after + 1
	for _, ev := range evs {
		for ; next < ev.Pos; next++ {
			missing = append(missing, next)
		}
		next = ev.Pos + 1
	}
	for ; next <= upper; next++ {
		missing = append(missing, next)
	}
	return evs, missing, nil
}
