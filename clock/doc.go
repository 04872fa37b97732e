// Package clock injects time. Production code takes a Clock; tests pass a Fake
// and move it by hand, so nothing waits on wall time to make progress.
//
// Concurrency: Real is stateless; Fake is safe for concurrent use.
package clock
