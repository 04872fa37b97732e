package sim

import (
	"testing"
	"time"
)

func TestTiming(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		st := time.Now()
		s, err := Run(Options{Seed: seed})
		t.Logf("seed %d: %v crashes=%d err=%v", seed, time.Since(st), s.Crashes, err != nil)
	}
}
