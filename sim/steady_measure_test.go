package sim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/store/pebblestore"
)

// TestMeasureSteadyDisk (LIKES_MEASURE=1) measures bytes on disk per region
// after 1, 7 and 30 simulated days of a constant like/unlike load, with the
// default 7-day retention and, as the reference in the same run, without
// retention. Bytes are Pebble's disk space usage after a full compaction (the
// live data; before it, Pebble's own lag in dropping deleted keys is added).
func TestMeasureSteadyDisk(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 to measure")
	}
	const rph = 200
	type sample struct {
		disk, raw pebblestore.DiskBytes
		keys      map[string]int
		kinds     map[string]uint64
	}
	run := func(retention time.Duration) map[int]map[string]sample {
		out := map[int]map[string]sample{}
		_, err := RunSteady(SteadyOptions{
			Seed: 1, Days: 30, RequestsPerHour: rph, Items: 100, Users: 400, Retention: retention, CountsOnly: true,
			Day: func(day int, stores map[string]*pebblestore.Store) error {
				if day != 1 && day != 7 && day != 30 {
					return nil
				}
				out[day] = map[string]sample{}
				for name, st := range stores {
					raw, err := st.DiskUsage()
					if err != nil {
						return err
					}
					if err := st.CompactAll(context.Background()); err != nil {
						return err
					}
					b, err := st.DiskUsage()
					if err != nil {
						return err
					}
					kc, err := st.KeyCounts()
					if err != nil {
						return err
					}
					kinds, err := st.DiskUsageByKind()
					if err != nil {
						return err
					}
					out[day][name] = sample{disk: b, raw: raw, keys: kc, kinds: kinds}
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	start := time.Now()
	with := run(pebblestore.DefaultRetention)
	without := run(0)
	var b strings.Builder
	fmt.Fprintf(&b, "constant load %d requests/simulated hour over 3 regions (100 items x 400 users: the edges saturate their key space within the month), 4 partitions; per region (r0):\n", rph)
	fmt.Fprintf(&b, "| day | sstable bytes, 7 d retention | no retention | ratio | all files (WAL incl.), ret / none | retention-bounded kinds (log+outbox+dedupe+idempotency), ret / none | state (edges, cells, indexes), ret / none | log keys, ret / none | dedupe keys | idempotency keys |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range []int{1, 7, 30} {
		w, wo := with[d]["r0"], without[d]["r0"]
		bounded := func(s sample) uint64 {
			return s.kinds["log"] + s.kinds["outbox"] + s.kinds["dedupe"] + s.kinds["idempotency"]
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %.2f | %d / %d | %d / %d | %d / %d | %d / %d | %d / %d | %d / %d |\n", d, w.disk.Tables, wo.disk.Tables,
			float64(w.disk.Tables)/float64(wo.disk.Tables), w.disk.Total, wo.disk.Total, bounded(w), bounded(wo), w.kinds["state"], wo.kinds["state"],
			w.keys["log"], wo.keys["log"], w.keys["dedupe"], wo.keys["dedupe"], w.keys["idempotency"], wo.keys["idempotency"])
	}
	fmt.Fprintf(&b, "elapsed %v\n", time.Since(start).Round(time.Second))
	t.Log("\n" + b.String())
}
