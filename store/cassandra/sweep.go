package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gocql/gocql"
)

// maxSweepMinutes bounds the intent buckets one Sweep reads per partition.
const maxSweepMinutes = 24 * 60

// Sweep finishes the relays of writers that died between their edge
// transaction and the outbox append. For every log partition it reads the
// relay intent buckets from the partition's sweep cursor to now: an intent at
// least minAge old (by the store's clock) whose edge still holds that pending
// event is relayed, as any Apply on the edge would; one whose edge does not is
// deleted (minAge must exceed the time an edge transaction can be in flight:
// the session's request timeout). A bucket that is entirely older than minAge
// and clean moves the cursor past it. It returns how many events it relayed.
func (s *Store) Sweep(ctx context.Context, minAge time.Duration) (int, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	// Intents of relays that finished are on their way out (intents.go):
	// send them first rather than read their edges below.
	s.reap.flush(ctx)
	now := s.opts.Clock.Now().UnixMilli()
	created, err := s.createdMinute(ctx)
	if err != nil {
		return 0, err
	}
	relayedN := 0
	var errs []error
	for part := 0; part < s.opts.Partitions; part++ {
		n, err := s.sweepPartition(ctx, part, created, now, minAge.Milliseconds())
		relayedN += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return relayedN, errors.Join(errs...)
}

// FinishPending relays every pending event now, however young its intent
// (catchup.Pending): the catch-up barrier's Heads answer comes after it, so
// an edge transaction that committed before the range moved is in the log
// the new owner waits for, even if its writer failed before its relay.
// Writes in flight must have been waited for (edge.Service.Quiesce): a
// relay racing one is still exactly once, but its event may be missed.
func (s *Store) FinishPending(ctx context.Context) error {
	_, err := s.Sweep(ctx, 0)
	return err
}

func (s *Store) createdMinute(ctx context.Context) (int64, error) {
	var ms int64
	if err := s.read(ctx, s.q.metaSelect, "store").Scan(&ms); err != nil {
		return 0, fmt.Errorf("cassandra: read meta: %w", err)
	}
	return ms / 60000, nil
}

func (s *Store) sweepPartition(ctx context.Context, part int, created, now, minAge int64) (int, error) {
	cursor := created
	var c int64
	switch err := s.read(ctx, s.q.cursorGet, part).Scan(&c); {
	case err == nil:
		cursor = max(c, created)
	case !errors.Is(err, gocql.ErrNotFound):
		return 0, err
	}
	type intent struct {
		item, user  string
		eseq, nonce int64
		createdAt   int64
	}
	relayedN := 0
	var errs []error
	clean := cursor // buckets before clean are known clean
	last := min(now/60000, cursor+maxSweepMinutes)
	for minute := cursor; minute <= last; minute++ {
		// A bucket can still receive intents until its minute is over (and a
		// writer's clock may run behind): it is final once minAge past its end.
		final := (minute+1)*60000+minAge <= now
		var found []intent
		young := false
		it := s.read(ctx, s.q.intentScan, part, minute).PageSize(1000).Iter()
		var in intent
		for it.Scan(&in.item, &in.user, &in.eseq, &in.nonce, &in.createdAt) {
			if now-in.createdAt >= minAge {
				found = append(found, in)
			} else {
				young = true
			}
		}
		if err := it.Close(); err != nil {
			errs = append(errs, err)
			break
		}
		ok := true
		for _, in := range found {
			mu := s.edgeLock(in.item, in.user)
			mu.Lock()
			row, err := s.readEdgeRelayed(ctx, in.item, in.user, true)
			var comps []compensation
			if err == nil && row.pending != nil && row.eseq == uint64(in.eseq) && row.pending.Nonce == uint64(in.nonce) {
				_, comps, err = s.relay(ctx, in.item, in.user, row.eseq, *row.pending)
				if err == nil {
					relayedN++
				}
			} else if err == nil {
				err = s.write(ctx, s.q.intentDelete, part, minute, in.item, in.user, in.eseq, in.nonce).Exec()
			}
			mu.Unlock()
			if err != nil {
				ok = false
				errs = append(errs, fmt.Errorf("cassandra: sweep (%q, %q): %w", in.item, in.user, err))
			}
			if err := s.compensate(ctx, comps); err != nil {
				errs = append(errs, err)
			}
		}
		if ok && !young && final && clean == minute {
			clean = minute + 1
		}
	}
	if clean > cursor {
		if err := s.write(ctx, s.q.cursorPut, part, clean).Exec(); err != nil {
			errs = append(errs, err)
		}
	}
	return relayedN, errors.Join(errs...)
}

func (s *Store) sweepLoop() {
	defer s.wg.Done()
	t := s.opts.Clock.NewTicker(s.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C():
		}
		if _, err := s.Sweep(s.ctx, s.opts.SweepAge); err != nil && s.ctx.Err() == nil {
			s.opts.OnError(err)
		}
	}
}
