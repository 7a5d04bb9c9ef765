//go:build cudaemu && !cuda

package cuda

// NormBlocks is the fixed grid of sumsq_partial; small under the emulator,
// where every block costs thread wake-ups (the kernels work for any grid).
const NormBlocks = 8
