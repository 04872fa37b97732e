// Package counts serves item counts: a cache with stale-while-revalidate in front
// of the summed cells, every answer labelled with the asOf it can prove.
//
// asOf honesty: the watermarks are read BEFORE the cells are summed, so the count
// includes at least every event with event time <= asOf. A cached entry keeps the
// asOf it was computed with; staleness is measured at read time, so a cache can
// make a count older but never make it claim more freshness.
//
// Reads never fail because a cache does: a cache error falls through to the
// store. One refresh per item runs at a time (Cache.TryRefresh).
//
// Concurrency: Reader is safe for concurrent use; background refreshes are
// tracked and Close waits for them.
package counts
