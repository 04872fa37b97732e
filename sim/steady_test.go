package sim

import (
	"fmt"
	"testing"
	"time"
)

var steadyKinds = []string{"log", "outbox", "dedupe", "idempotency"}

// TestSteadyRetention runs a constant like/unlike load for many simulated
// days with a 2-day retention: the key counts of the log, the cell outbox,
// dedupe and idempotency records level off once the horizon (and the 24 h
// record expiry) has passed, while every day ends with every region's counts
// equal to the number of LIKED edges and every edge equal everywhere. Without
// retention (the reference) the log grows with the days.
func TestSteadyRetention(t *testing.T) {
	days, rph := 14, 20
	if testing.Short() || raceEnabled {
		days, rph = 9, 8
	}
	const horizon = 2 * 24 * time.Hour
	run := func(retention time.Duration) SteadyReport {
		rep, err := RunSteady(SteadyOptions{Seed: 1, Days: days, RequestsPerHour: rph, Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	with, without := run(horizon), run(0)
	settled := 4 // days: the horizon, the records' expiry and one more
	for _, r := range []string{"r0", "r1", "r2"} {
		for _, kind := range steadyKinds {
			base := with.Keys[settled-1][r][kind]
			var line string
			for d := range with.Keys {
				line += fmt.Sprintf(" %d", with.Keys[d][r][kind])
				if d >= settled && float64(with.Keys[d][r][kind]) > 1.25*float64(base)+8 {
					t.Errorf("%s %s: %d keys on day %d, %d on day %d: not level", r, kind, with.Keys[d][r][kind], d+1, base, settled)
				}
			}
			t.Logf("%s %-12s per day:%s", r, kind, line)
		}
		last := len(with.Keys) - 1
		if w, wo := with.Keys[last][r]["log"], without.Keys[last][r]["log"]; 2*w > wo {
			t.Errorf("%s: log keys %d with retention, %d without: retention kept too much", r, w, wo)
		}
	}
	if with.Truncated == 0 {
		t.Fatal("nothing truncated")
	}
	t.Logf("%d requests, %d log events truncated", with.Requests, with.Truncated)
}

// TestSteadyPeerBehindHorizon: a region down for longer than its peers'
// retention horizon comes back to logs truncated past its cursors; its peers
// detect it (Sender.Behind), send it a snapshot of their state and then the
// log, and every region converges exactly (counts == LIKED edges, every edge
// equal everywhere), never by skipping events.
func TestSteadyPeerBehindHorizon(t *testing.T) {
	rph := 12
	if raceEnabled {
		rph = 6
	}
	rep, err := RunSteady(SteadyOptions{
		Seed: 2, Days: 8, RequestsPerHour: rph, Retention: 24 * time.Hour,
		Down: &SteadyDown{Region: 1, From: 2, Days: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Snapshots < 2 {
		t.Fatalf("%d snapshots, want one from each peer of the region that came back", rep.Snapshots)
	}
	t.Logf("%d requests, %d truncated, %d snapshots", rep.Requests, rep.Truncated, rep.Snapshots)
}

// TestSteadyRebuildFromPeers: a region loses its data folder and restarts on
// an empty one (--bootstrap-from-peers): it refuses writes while it rebuilds,
// each peer sends it a rebuild snapshot (their state, their copies of its
// cells, their cursor for its log), its log positions rise past every peer's
// cursor, and every day still ends with counts == LIKED edges and every edge
// equal everywhere, new writes included.
func TestSteadyRebuildFromPeers(t *testing.T) {
	rph := 12
	if raceEnabled {
		rph = 6
	}
	rep, err := RunSteady(SteadyOptions{
		Seed: 3, Days: 5, RequestsPerHour: rph, Retention: 24 * time.Hour,
		Lose: &SteadyDown{Region: 1, From: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rebuilds != 1 || rep.Snapshots < 2 {
		t.Fatalf("%d rebuilds, %d snapshots: want 1 and one per peer", rep.Rebuilds, rep.Snapshots)
	}
	t.Logf("%d requests, %d refused while rebuilding, %d snapshots", rep.Requests, rep.Refused, rep.Snapshots)
}

// TestSteadyRestoreFromBackup: a region is backed up (a consistent Pebble
// checkpoint), keeps taking load, loses its disk, and is restored from the
// backup: it folds its restored log, rebuilds from its peers (their state,
// their copies of its cells, their cursors for its streams, which its
// positions rise past), and every day ends with counts == LIKED edges and
// every edge equal everywhere.
func TestSteadyRestoreFromBackup(t *testing.T) {
	rph := 12
	if raceEnabled {
		rph = 6
	}
	rep, err := RunSteady(SteadyOptions{
		Seed: 4, Days: 6, RequestsPerHour: rph, Retention: 24 * time.Hour,
		Restore: &SteadyRestore{Region: 2, Backup: 1, Lose: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rebuilds != 1 || rep.Snapshots < 2 {
		t.Fatalf("%d rebuilds, %d snapshots", rep.Rebuilds, rep.Snapshots)
	}
	t.Logf("%d requests, %d refused while rebuilding, %d snapshots", rep.Requests, rep.Refused, rep.Snapshots)
}
