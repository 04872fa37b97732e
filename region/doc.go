// Package region wires one region of likes together on the embedded default: the
// Pebble store, the aggregator group, the edge service and eraser, the count
// reader, the in-process overlay, cache and limiters, and the HTTP API.
//
// Lifecycle: Open starts every component; Close stops them in dependency order
// (API callers first, then the eraser, the aggregators, the count reader, and
// the store last) and is idempotent.
package region
