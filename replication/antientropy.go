package replication

import (
	"context"
	"fmt"
)

// aeGroupFactor × MaxCells bounds the cells one repair scan collects.
const aeGroupFactor = 16

// antiEntropy runs one digest round with the peer: hash this region's own
// cells into DigestBuckets buckets, ask the peer which buckets differ in its
// copy, and push the full latest state of every cell in those buckets, in
// chunks of at most maxCells. Repair batches leave the cell cursor where it is
// (CellsAfter = CellsThrough = acknowledged) and carry no watermark: they add
// states, they vouch for nothing.
func (l *peerLoop) antiEntropy() error {
	cfg := &l.s.cfg
	parts := cfg.Source.Partitions()
	var (
		d      Digest
		counts [DigestBuckets]int
	)
	err := cfg.Source.ScanCells(l.ctx, cfg.Region, func(c CellState) error {
		if c.Key.Region == cfg.Region {
			d.Add(c)
			counts[BucketOf(c.Key.Item)]++
		}
		return nil
	})
	if err != nil {
		return &localError{fmt.Errorf("anti-entropy: scan own cells: %w", err)}
	}
	ctx, cancel := context.WithTimeout(l.ctx, cfg.PushTimeout)
	resp, err := cfg.Transport.Digest(ctx, l.peer, DigestRequest{From: cfg.Region, Partitions: parts, Buckets: d[:]})
	cancel()
	if err != nil {
		return fmt.Errorf("anti-entropy digest: %w", err)
	}
	l.adopt(resp.Cursor, parts, nil)
	repaired := 0
	// Repair the mismatched buckets in groups of at most aeGroupFactor×MaxCells
	// cells (a single larger bucket forms its own group), one scan per group:
	// memory stays bounded however much the receiver lost.
	limit := aeGroupFactor * cfg.MaxCells
	pending := resp.Mismatched
	for len(pending) > 0 {
		group := map[uint32]bool{}
		total := 0
		for len(pending) > 0 {
			b := pending[0]
			if b >= DigestBuckets {
				pending = pending[1:]
				continue // a confused peer; ignore
			}
			if len(group) > 0 && total+counts[b] > limit {
				break
			}
			group[b] = true
			total += counts[b]
			pending = pending[1:]
		}
		// Collect first: a store iterator is not held open across network calls.
		cells := make([]CellState, 0, total)
		err := cfg.Source.ScanCells(l.ctx, cfg.Region, func(c CellState) error {
			if c.Key.Region == cfg.Region && group[BucketOf(c.Key.Item)] {
				cells = append(cells, c)
			}
			return nil
		})
		if err != nil {
			return &localError{fmt.Errorf("anti-entropy: scan own cells: %w", err)}
		}
		for len(cells) > 0 {
			n := min(len(cells), l.maxCells)
			b := Batch{
				From: cfg.Region, Partitions: parts, Cells: cells[:n],
				CellsAfter: l.cur.Cells, CellsThrough: l.cur.Cells,
			}
			cur, err := l.push(b)
			if err != nil {
				if isTooLarge(err) {
					l.maxCells = max(1, l.maxCells/2)
				}
				return fmt.Errorf("anti-entropy repair: %w", err)
			}
			cells = cells[n:]
			repaired += n
			l.adopt(cur, parts, func(st *PeerStats) {
				st.Pushes++
				st.CellsShipped += uint64(n)
				st.CellsRepaired += uint64(n)
			})
		}
	}
	now := cfg.Clock.Now()
	l.note(func(st *PeerStats) {
		st.DigestRounds++
		st.LastDigest = now
	})
	if repaired > 0 {
		cfg.Logger.Info("replication: anti-entropy repaired cells", "peer", l.peer.Region,
			"buckets", len(resp.Mismatched), "cells", repaired)
	}
	return nil
}
