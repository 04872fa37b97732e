package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/gocql/gocql"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// maxTTLSeconds is Cassandra's TTL ceiling (20 years).
const maxTTLSeconds = 630720000

// compensation is an edge whose write raced the start of its user's erasure:
// the writer read no erasure marker, the eraser may have listed the user's
// items before the write's index row existed, so the writer erases the edge
// itself (see doc.go, "Erasure").
type compensation struct {
	item, user string
	epoch      uint64
}

// Apply implements edge.Store: a SERIAL read of the edge, reads of the
// idempotency record and the erasure marker, edge.Decide, one lightweight
// transaction on the edge row that writes the new version together with its
// log event (the pending column), then the relay of that event to the outbox.
// The loop is bounded by Options.MaxAttempts.
func (s *Store) Apply(ctx context.Context, req edge.Request) (edge.Decision, error) {
	if s.isClosed() {
		return edge.Decision{}, ErrClosed
	}
	if s.rebuilding("") {
		return edge.Decision{}, ErrRebuilding
	}
	probe, err := s.admit()
	if err != nil {
		return edge.Decision{}, err
	}
	// Once begun, a write runs to its end whatever the caller does (a client
	// that hung up, a request deadline): see Options.ApplyTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ApplyTimeout)
	defer cancel()
	mu := s.edgeLock(req.Item, req.User)
	mu.Lock()
	d, comps, err := s.apply(ctx, req)
	mu.Unlock()
	if cerr := s.compensate(ctx, comps); cerr != nil && err == nil {
		// The write stands; the caller retries with the same key, which
		// replays or refuses, and retries the compensation on the way.
		err = cerr
	}
	return d, s.observe(probe, err)
}

func (s *Store) apply(ctx context.Context, req edge.Request) (edge.Decision, []compensation, error) {
	var comps []compensation
	bucket := int(edge.BucketOf(req.User))
	part := edge.PartitionOf(req.Item, uint32(bucket), s.opts.Partitions)
	var lastErr error
	// The first read is LOCAL_QUORUM: it sees every edge transaction that
	// completed, and one still in flight makes our own transaction's
	// condition fail (Paxos finishes it first). Only after a lost condition or
	// an unknown outcome is the edge read at the serial consistency, which
	// completes whatever is in flight, so the retry decides on the winner.
	serial := false
	for attempt := 0; attempt < s.opts.MaxAttempts; attempt++ {
		if attempt > 0 && lastErr != nil {
			if err := backoff(ctx, attempt); err != nil {
				return edge.Decision{}, comps, err
			}
		}
		lastErr = nil
		row, err := s.readEdgeRelayed(ctx, req.Item, req.User, serial)
		if err != nil {
			if retryable(err) {
				lastErr = err
				continue
			}
			return edge.Decision{}, comps, err
		}
		if row.pending != nil {
			// An earlier write's event is not relayed yet (its writer is
			// relaying it now, or died): finish it first, so the edge's
			// events reach the log in version order and its record exists
			// before anything is decided on top of it.
			_, c, err := s.relay(ctx, req.Item, req.User, row.eseq, *row.pending)
			comps = append(comps, c...)
			if err != nil {
				if retryable(err) || errors.Is(err, ErrContention) {
					lastErr = err
					continue
				}
				return edge.Decision{}, comps, err
			}
			continue
		}
		var rec *edge.IdemRecord
		var erased bool
		err = parallel(2, func(i int) error {
			if i == 1 {
				var err error
				erased, err = s.erased(ctx, req.User)
				return err
			}
			if req.IdemKey == "" {
				return nil
			}
			r, ok, err := s.readIdem(ctx, req)
			if ok {
				rec = &r
			}
			return err
		})
		if err != nil {
			if retryable(err) {
				lastErr = err
				continue
			}
			return edge.Decision{}, comps, err
		}
		d := edge.Decide(row.e, rec, erased, req)
		logEv := d.LogEvent(req)
		if logEv == nil {
			return d, comps, nil // a refusal, or a no-op without a record: nothing to write
		}
		logEv.Partition = part
		p := pending{Nonce: rand.Uint64() | 1, TTLSec: s.idemTTL(d, req), Event: *logEv}
		if !row.exists && d.Action != edge.ActWrite {
			// A no-op on an edge that does not exist (only at epoch 0): no row
			// to carry the event, and nothing a count depends on.
			if err := s.effects(ctx, req.Item, req.User, p); err != nil {
				return edge.Decision{}, comps, err
			}
			if _, err := s.appendStandalone(ctx, p.Event); err != nil {
				return edge.Decision{}, comps, err
			}
			return d, comps, nil
		}
		eseq := row.eseq + 1
		now := s.opts.Clock.Now().UnixMilli()
		if req.Deadline != 0 && now >= req.Deadline {
			// Retries on a contended or slow Cassandra can outlast the lease
			// proof the write was authorized under: past it, the range may
			// have failed over, and this commit would be a straggler.
			return edge.Decision{}, comps, fmt.Errorf("%w: the lease proof behind epoch %d ended %d ms before the commit of (%q, %q)",
				edge.ErrFailClosed, req.Epoch, now-req.Deadline, req.Item, req.User)
		}
		p.Minute = now / 60000
		intent := []any{int(part), p.Minute, req.Item, req.User, int64(eseq), int64(p.Nonce)}
		if err := s.write(ctx, s.q.intentInsert, append(intent, now)...).Exec(); err != nil {
			if retryable(err) {
				lastErr = err
				continue
			}
			return edge.Decision{}, comps, err
		}
		applied, err := s.writeEdge(ctx, req, row, d, eseq, p)
		if err != nil {
			if !retryable(err) {
				return edge.Decision{}, comps, err
			}
			// Outcome unknown: the SERIAL read settles it, and the nonce says
			// whether the transaction that won was ours.
			lastErr, serial = err, true
			r2, err2 := s.readEdgeRelayed(ctx, req.Item, req.User, true)
			if err2 != nil {
				continue
			}
			applied = (r2.pending != nil && r2.pending.Nonce == p.Nonce) || (r2.lastNonce == p.Nonce && r2.relayedESeq == eseq)
			if !applied {
				continue
			}
		}
		if !applied {
			// Another writer changed the edge since the read: decide again
			// (after a pause, so racing processes spread out).
			_ = s.write(ctx, s.q.intentDelete, intent...).Exec()
			lastErr, serial = errLostRace, true
			continue
		}
		if err := s.crashPoint("edge-written"); err != nil {
			return edge.Decision{}, comps, err
		}
		res, c, err := s.relay(ctx, req.Item, req.User, eseq, p)
		comps = append(comps, c...)
		if err != nil {
			// The write is durable and its event is in the pending column; the
			// next Apply on the edge or the sweeper finishes the relay. The
			// caller retries with the same key and gets the replay.
			return edge.Decision{}, comps, fmt.Errorf("cassandra: write of (%q, %q) committed, relay failed (outcome for the caller: unknown): %w", req.Item, req.User, err)
		}
		if d.Action == edge.ActWrite {
			ev := *d.Event
			ev.Partition, ev.Pos, ev.EventTime, ev.Idem = part, res.pos, res.time, logEv.Idem
			d.Event = &ev
		}
		return d, comps, nil
	}
	if lastErr != nil {
		return edge.Decision{}, comps, fmt.Errorf("%w: apply (%q, %q): %w", ErrContention, req.Item, req.User, lastErr)
	}
	return edge.Decision{}, comps, fmt.Errorf("%w: apply (%q, %q)", ErrContention, req.Item, req.User)
}

// idemTTL is the Cassandra TTL of the decision's idempotency record: its
// logical lifetime plus IdemGrace.
func (s *Store) idemTTL(d edge.Decision, req edge.Request) int64 {
	rec := d.Record(req)
	if rec == nil {
		return 0
	}
	ms := rec.ExpiresAt - req.Now
	if ms <= 0 {
		return 0
	}
	secs := (ms+999)/1000 + int64(s.opts.IdemGrace.Seconds())
	return min(max(secs, 1), maxTTLSeconds)
}

// writeEdge is the lightweight transaction of a decision: a new edge (IF NOT
// EXISTS), a new version (IF eseq, epoch, op unchanged) or a record event on
// an unchanged edge (same condition), each with its pending event.
func (s *Store) writeEdge(ctx context.Context, req edge.Request, row edgeRow, d edge.Decision, eseq uint64, p pending) (bool, error) {
	bucket := int(edge.BucketOf(req.User))
	blob := encodePending(p)
	m := map[string]any{}
	if d.Action != edge.ActWrite {
		return s.cas(ctx, s.q.edgeRecord, int64(eseq), blob, req.Item, bucket, req.User,
			int64(row.eseq), int64(row.e.Version.Epoch), int64(row.e.Version.Op)).MapScanCAS(m)
	}
	branches := row.branches
	if d.Branch != nil {
		branches = branches.Open(d.Branch.Epoch, d.Branch.Base)
	}
	e := d.Edge
	if !row.exists {
		return s.cas(ctx, s.q.edgeInsert, req.Item, bucket, req.User, int8(e.State), int64(e.Version.Epoch),
			int64(e.Version.Op), e.UpdatedAt, int64(eseq), blob, encodeBranches(branches)).MapScanCAS(m)
	}
	return s.cas(ctx, s.q.edgeUpdate, int8(e.State), int64(e.Version.Epoch), int64(e.Version.Op), e.UpdatedAt,
		int64(eseq), blob, encodeBranches(branches), req.Item, bucket, req.User,
		int64(row.eseq), int64(row.e.Version.Epoch), int64(row.e.Version.Op)).MapScanCAS(m)
}

func (s *Store) readIdem(ctx context.Context, req edge.Request) (edge.IdemRecord, bool, error) {
	var r edge.IdemRecord
	it := s.read(ctx, s.q.idemSelect, req.User, req.IdemKey).Iter()
	ok := it.Scan(&r.Fingerprint, &r.Answer.Liked, &r.Answer.Changed, &r.ExpiresAt)
	if err := it.Close(); err != nil {
		return r, false, err
	}
	r.Answer.Item, r.Answer.User = req.Item, req.User
	return r, ok, nil
}

type relayed struct {
	pos  uint64
	time int64
}

// relay moves an edge's pending event (event number eseq of the edge) to the
// outbox: first its effects outside the edge row (the idempotency record and
// the user index, both idempotent), then the append (which dedupes, assigns
// the position and clears the pending column), then the erasure re-check;
// the relay intent is deleted in the background (intents.go).
// Any number of relays of one pending event may run at once, in any
// processes; the event reaches the outbox exactly once.
func (s *Store) relay(ctx context.Context, item, user string, eseq uint64, p pending) (relayed, []compensation, error) {
	if err := s.effects(ctx, item, user, p); err != nil {
		return relayed{}, nil, err
	}
	res, err := s.appendEdgeEvent(ctx, item, user, eseq, p)
	if err != nil {
		return relayed{}, nil, err
	}
	part := edge.PartitionOf(item, edge.BucketOf(user), s.opts.Partitions)
	s.reap.forget(ctx, intentKey{int(part), p.Minute, item, user, int64(eseq), int64(p.Nonce)})
	var comps []compensation
	if k := p.Event.Kind; (k == edge.KindFlip || k == edge.KindRetraction) && p.Event.State != crdt.Erased {
		erased, err := s.erased(ctx, user)
		if err != nil {
			return res, nil, err
		}
		if erased {
			comps = append(comps, compensation{item: item, user: user, epoch: p.Event.Version.Epoch})
		}
	}
	return res, comps, nil
}

// effects writes what a pending event implies outside the edge row: the
// idempotency record it carries and, for a write, the user's item index (a
// correction's index entry, if any is due, is the remote apply's to write:
// replica.go).
//
// Both are the user's rows, so when both are due they go in one unlogged
// batch: one request instead of two (a quarter of Cassandra's CPU is spent
// per request, BENCHMARKS.md). The batch is not atomic across the two
// tables, and need not be: each write is idempotent, and a failure fails
// the relay, which is repeated.
func (s *Store) effects(ctx context.Context, item, user string, p pending) error {
	ev := p.Event
	record := ev.Idem != nil && p.TTLSec > 0
	index := ev.Kind != edge.KindRecord && ev.Kind != edge.KindCorrection
	recordArgs := func() []any {
		return []any{user, ev.Idem.Key, ev.Idem.Fingerprint, ev.Idem.Liked, ev.Idem.Changed, ev.Idem.ExpiresAt, int(p.TTLSec)}
	}
	switch {
	case record && index:
		err := s.execIdempotent(ctx, func() *gocql.Batch {
			b := s.newBatch(ctx, gocql.UnloggedBatch, false, "BATCH idem+user_items")
			b.Query(s.q.idemInsert, recordArgs()...)
			b.Query(s.q.userItemsAdd, user, item)
			return b
		})
		if err != nil {
			return fmt.Errorf("cassandra: idempotency record (%q, %q) and user index (%q): %w", user, ev.Idem.Key, item, err)
		}
	case record:
		if err := s.write(ctx, s.q.idemInsert, recordArgs()...).Exec(); err != nil {
			return fmt.Errorf("cassandra: idempotency record (%q, %q): %w", user, ev.Idem.Key, err)
		}
	case index:
		if err := s.write(ctx, s.q.userItemsAdd, user, item).Exec(); err != nil {
			return fmt.Errorf("cassandra: user index (%q, %q): %w", user, item, err)
		}
	}
	return nil
}

// compensate erases edges whose writes raced their user's erasure start, and
// purges the user again if the erasure already finished.
func (s *Store) compensate(ctx context.Context, comps []compensation) error {
	var errs []error
	for _, c := range comps {
		req := edge.Request{Item: c.item, User: c.user, Target: crdt.Erased, Kind: edge.KindErasure,
			Epoch: c.epoch, Now: s.opts.Clock.Now().UnixMilli()}
		mu := s.edgeLock(c.item, c.user)
		mu.Lock()
		d, more, err := s.apply(ctx, req)
		mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("cassandra: erase (%q, %q) after a write raced its erasure: %w", c.item, c.user, err))
			continue
		}
		_ = d // ActStale: a newer epoch's owner wrote the edge, and erases it there
		if len(more) > 0 {
			errs = append(errs, fmt.Errorf("cassandra: erasure of (%q, %q) asked for compensation", c.item, c.user))
		}
		j, ok, err := s.Erasure(ctx, c.user)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok && j.State == edge.ErasureDone {
			if err := s.PurgeUser(ctx, c.user); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
