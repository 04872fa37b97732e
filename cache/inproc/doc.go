// Package inproc holds the in-process implementations of the embedded default:
// the session overlay, the count cache and the rate limiter. They are bounded
// (entries expire, maps are swept) and safe for concurrent use. Production swaps
// them for Redis through the same interfaces.
package inproc
