// Package deptest states the layering of likes and enforces it (the pattern
// of tailscale's tstest/deptest): its test lists every package's transitive
// imports (go list, non-test code) and fails on a forbidden one, naming the
// rule and its reason. To change the layering, change the rule here, with
// its reason, and ARCHITECTURE.md.
package deptest
