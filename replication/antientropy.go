package replication

import (
	"context"
	"fmt"
)

// antiEntropy runs one digest round with the peer: hash this region's own
// cells into DigestBuckets buckets, ask the peer which buckets differ in its
// copy, and push the full latest state of every cell in those buckets, in
// chunks of at most maxCells. Repair batches leave the cell cursor where it is
// (CellsAfter = CellsThrough = acknowledged) and carry no watermark: they add
// states, they vouch for nothing.
func (l *peerLoop) antiEntropy() error {
	cfg := &l.s.cfg
	parts := cfg.Source.Partitions()
	var d Digest
	err := cfg.Source.ScanCells(l.ctx, cfg.Region, func(c CellState) error {
		if c.Key.Region == cfg.Region {
			d.Add(c)
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
	if len(resp.Mismatched) > 0 {
		want := make(map[uint32]bool, len(resp.Mismatched))
		for _, b := range resp.Mismatched {
			want[b] = true
		}
		// Collect first: a store iterator is not held open across network calls.
		var cells []CellState
		err := cfg.Source.ScanCells(l.ctx, cfg.Region, func(c CellState) error {
			if c.Key.Region == cfg.Region && want[BucketOf(c.Key.Item)] {
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
