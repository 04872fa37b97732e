package edge

// TestingKnobs are switches for tests only (the pattern of CockroachDB's
// testing knobs): kept out of ServiceConfig's real fields so a deployment's
// configuration cannot carry them by accident. Never set them outside tests
// and the chaos suite's --unsafe-break.
type TestingKnobs struct {
	// NoIdempotency ignores idempotency keys, so the chaos suite can prove its
	// checker catches the double counts this causes.
	NoIdempotency bool
}
