//go:build race

package sim

// raceEnabled: the race detector makes a seed ~10x slower, so the default
// seed counts shrink (LIKES_SIM_SEEDS still sets them).
const raceEnabled = true
