package pipeline

// TestingKnobs are switches for tests only (the pattern of CockroachDB's
// testing knobs), out of Config's real fields. Never set them outside tests
// and the chaos suite's --unsafe-break.
type TestingKnobs struct {
	// NoFence disables both exactly-once guards (the hwm fence and the dedupe)
	// and restarts every aggregator from log position 0, as a consumer that
	// lost its offsets would, so the chaos suite can prove its checker catches
	// the double counts this causes.
	NoFence bool
}
