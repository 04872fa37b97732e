package sim

import (
	"testing"
)

func TestDebugIssued(t *testing.T) {
	seeds := []uint64{}
	for i := 0; i < 200; i++ {
		seeds = append(seeds, uint64(50000+i))
	}
	_, errs := runSeeds(seeds, func(seed uint64) Options {
		return Options{Seed: seed, Fixed: func(k *Knobs) {
			k.WCrash = 6
			k.WStep = 20
			k.WClock = 3
			k.WSync = 3
			k.RestartAdvance = 0
		}}
	})
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
			if n < 4 {
				t.Log(err)
			}
		}
	}
	t.Logf("%d failed", n)
}
