package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sweep finishes the relays of writers that died between their edge
// transaction and the outbox append. It scans every log partition's relay
// intents older than minAge (by the store's clock): an intent whose edge still
// holds that pending event is relayed (as any Apply on the edge would);
// one whose edge does not is deleted, since minAge exceeds the time a
// transaction can still be in flight. It returns how many events it relayed.
func (s *Store) Sweep(ctx context.Context, minAge time.Duration) (int, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	now := s.opts.Clock.Now().UnixMilli()
	relayedN := 0
	var errs []error
	for part := 0; part < s.opts.Partitions; part++ {
		type intent struct {
			item, user  string
			eseq, nonce int64
			createdAt   int64
		}
		var found []intent
		it := s.read(ctx, s.q.intentScan, part).PageSize(1000).Iter()
		var in intent
		for it.Scan(&in.item, &in.user, &in.eseq, &in.nonce, &in.createdAt) {
			if now-in.createdAt >= minAge.Milliseconds() {
				found = append(found, in)
			}
		}
		if err := it.Close(); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, in := range found {
			mu := s.edgeLock(in.item, in.user)
			mu.Lock()
			row, err := s.readEdge(ctx, in.item, in.user, true)
			var comps []compensation
			if err == nil && row.pending != nil && row.eseq == uint64(in.eseq) && row.pending.Nonce == uint64(in.nonce) {
				_, comps, err = s.relay(ctx, in.item, in.user, row.eseq, *row.pending)
				if err == nil {
					relayedN++
				}
			} else if err == nil {
				err = s.write(ctx, s.q.intentDelete, part, in.item, in.user, in.eseq, in.nonce).Exec()
			}
			mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("cassandra: sweep (%q, %q): %w", in.item, in.user, err))
			}
			if err := s.compensate(ctx, comps); err != nil {
				errs = append(errs, err)
			}
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
