package pebblestore

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a few of Pebble's own metrics (db.Metrics()) at each
// scrape: disk usage, compaction debt, WAL size and bytes written, L0 files
// and sublevels, read amplification, compactions and flushes. While the store
// is reopening its database nothing is reported (no sentinel value).
type Collector struct {
	s *Store

	disk, debt, walBytes, walWritten, l0Files, l0Sub, readAmp, compactions, compactionsInProgress, flushes, tables *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the unregistered collector of s.
func NewCollector(s *Store) *Collector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &Collector{
		s:                     s,
		disk:                  d("likes_pebble_disk_usage_bytes", "Disk space used by the Pebble database (tables, WAL, manifests, blobs)."),
		debt:                  d("likes_pebble_compaction_debt_bytes", "Pebble's estimate of the bytes to compact for the LSM to reach a stable shape."),
		walBytes:              d("likes_pebble_wal_bytes", "Physical size of the live WAL files."),
		walWritten:            d("likes_pebble_wal_written_bytes_total", "Bytes written to the WAL since the database was opened."),
		l0Files:               d("likes_pebble_l0_files", "Tables in level 0 (many: compactions fall behind, reads slow down, writes stall)."),
		l0Sub:                 d("likes_pebble_l0_sublevels", "Sublevels of level 0."),
		readAmp:               d("likes_pebble_read_amplification", "Read amplification: L0 sublevels plus the non-empty lower levels."),
		compactions:           d("likes_pebble_compactions_total", "Compactions since the database was opened."),
		compactionsInProgress: d("likes_pebble_compactions_in_progress", "Compactions running now."),
		flushes:               d("likes_pebble_flushes_total", "Memtable flushes since the database was opened."),
		tables:                d("likes_pebble_tables", "Live tables over all levels."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.disk, c.debt, c.walBytes, c.walWritten, c.l0Files, c.l0Sub, c.readAmp, c.compactions, c.compactionsInProgress, c.flushes, c.tables} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	g, err := c.s.db.acquire()
	if err != nil {
		return // reopening: report nothing rather than a made-up value
	}
	m := g.db.Metrics()
	g.refs.Done()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.disk, float64(m.DiskSpaceUsage()))
	gauge(c.debt, float64(m.Compact.EstimatedDebt))
	gauge(c.walBytes, float64(m.WAL.PhysicalSize))
	counter(c.walWritten, float64(m.WAL.BytesWritten))
	gauge(c.l0Files, float64(m.Levels[0].TablesCount))
	gauge(c.l0Sub, float64(m.Levels[0].Sublevels))
	gauge(c.readAmp, float64(m.ReadAmp()))
	counter(c.compactions, float64(m.Compact.Count))
	gauge(c.compactionsInProgress, float64(m.Compact.NumInProgress))
	counter(c.flushes, float64(m.Flush.Count))
	gauge(c.tables, float64(m.Total().TablesCount))
}
