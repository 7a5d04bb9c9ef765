//go:build cuda

package cuda

// NormBlocks is the fixed grid of sumsq_partial: the gradient norm is the
// sum of that many per-block partial sums, added in a fixed order, so it is
// the same on every run.
const NormBlocks = 1024
