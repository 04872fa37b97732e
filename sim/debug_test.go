package sim

import (
	"fmt"
	"testing"
)

func TestDebugChains(t *testing.T) {
	for seed := uint64(10000); seed < 10004; seed++ {
		opts := Options{Seed: seed, Fixed: func(k *Knobs) {
			k.WUnplanned = 6
			k.WPlanned = 1
			k.PUnplannedIsolate = 0.8
		}}
		s := newSim(opts)
		func() {
			defer func() { recover(); s.closeAll() }()
			s.start()
			for s.step = 1; s.step <= 400; s.step++ {
				s.act()
			}
		}()
		for g, ps := range s.pins {
			line := fmt.Sprintf("seed %d range %d:", seed, g)
			for _, p := range ps {
				line += fmt.Sprintf(" [%s e%d pl=%v w=%d]", p.pin.Region, p.pin.Epoch, p.planned, p.writes)
			}
			t.Log(line)
		}
		t.Logf("%+v", s.stats)
	}
}
