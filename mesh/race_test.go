//go:build race

package mesh

// raceEnabled: the race detector runs (about 10x slower): the
// simulations at tens of members are left to the plain run.
const raceEnabled = true
