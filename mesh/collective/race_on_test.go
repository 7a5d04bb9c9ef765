//go:build race

package collective

// raceEnabled: the race detector slows these tests ≈ 10×; the longest
// numeric ones cut their sizes or do not run.
const raceEnabled = true
