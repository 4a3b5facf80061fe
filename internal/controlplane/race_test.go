//go:build race

package controlplane

// raceEnabled reports a build with the race detector, under which the simulated week runs too slowly
// (scripts/test.sh runs it once more without).
const raceEnabled = true
