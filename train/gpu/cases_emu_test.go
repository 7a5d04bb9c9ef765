//go:build cudaemu && !cuda

package gpu

// Under the emulator (go test -tags cudaemu): tiny only, short sequences, two
// steps — a step takes minutes on a loaded 2-core machine.
var matchCases = []matchCase{{"tiny", 2, 32, "tc", 2}, {"tiny", 2, 32, "simple", 2}}

// muonCase is TestMuonMatchesCPU's and TestMuonCheckpoint's configuration:
// under the emulator, tiny cut to one layer (its seven hidden matrices, both
// Newton–Schulz orientations) on 2 × 16 tokens, three steps.
var muonCase = matchCase{preset: "tiny", batch: 2, seq: 16, attn: "tc", steps: 3}

// muonLayers overrides the preset's layers in the Muon tests (0: keep them).
const muonLayers = 1
