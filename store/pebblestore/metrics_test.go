package pebblestore_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/likes-dev/likes/store/pebblestore"
)

// TestCollectorExportsPebbleMetrics: every gauge and counter of the collector
// has a sample, and the disk usage is that of a real database.
func TestCollectorExportsPebbleMetrics(t *testing.T) {
	s, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Region: "r1", Partitions: 4, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(pebblestore.NewCollector(s))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	for _, name := range []string{
		"likes_pebble_disk_usage_bytes", "likes_pebble_compaction_debt_bytes", "likes_pebble_wal_bytes",
		"likes_pebble_wal_written_bytes_total", "likes_pebble_l0_files", "likes_pebble_l0_sublevels",
		"likes_pebble_read_amplification", "likes_pebble_compactions_total", "likes_pebble_compactions_in_progress",
		"likes_pebble_flushes_total", "likes_pebble_tables",
	} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
	if got["likes_pebble_disk_usage_bytes"] <= 0 {
		t.Errorf("disk usage %v of an open database", got["likes_pebble_disk_usage_bytes"])
	}
}
