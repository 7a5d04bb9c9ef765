//go:build cuda

package gpu

var matchCases = []matchCase{
	{"tiny", 4, 64, "tc", 5}, {"tiny", 4, 64, "simple", 5}, {"small", 2, 96, "tc", 5}, {"small", 2, 96, "simple", 5},
}

// muonCase is TestMuonMatchesCPU's and TestMuonCheckpoint's configuration.
var muonCase = matchCase{preset: "tiny", batch: 4, seq: 64, attn: "tc", steps: 5}

// muonLayers overrides the preset's layers in the Muon tests (0: keep them).
const muonLayers = 0
