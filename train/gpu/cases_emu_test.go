//go:build cudaemu && !cuda

package gpu

// Under the emulator (go test -tags cudaemu): tiny only, short sequences, two
// steps — a step takes minutes on a loaded 2-core machine.
var matchCases = []matchCase{{"tiny", 2, 32, "tc", 2}, {"tiny", 2, 32, "simple", 2}}
