package cuda

import "math"

// BF16 is a bfloat16 value: the top 16 bits of an IEEE float32.
type BF16 uint16

// ToBF16 rounds f to the nearest bfloat16, ties to even, as the device's
// __float2bfloat16_rn does; NaN stays a (quiet) NaN.
func ToBF16(f float32) BF16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet mantissa bit
		return BF16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BF16(b >> 16)
}

// Float32 returns the float32 value of h (exact).
func (h BF16) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }

// ToBF16Slice converts src into dst (len(dst) ≥ len(src)).
func ToBF16Slice(dst []BF16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = ToBF16(f)
	}
}

// Grid1D returns the number of blocks of size block that a grid-stride
// element-wise kernel over n elements should launch: enough to cover n once,
// capped at maxBlocks (the kernels loop over the rest). n ≤ 0 gives 1 block.
func Grid1D(n int64, block, maxBlocks int) int {
	if n <= 0 {
		return 1
	}
	g := (n + int64(block) - 1) / int64(block)
	return int(min(g, int64(maxBlocks)))
}

// CeilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func CeilDiv(a, b int) int { return (a + b - 1) / b }

// MFU returns the model FLOP utilization of a step that did flops model FLOPs
// in seconds, against a peak of peakTFLOPs (dense bf16, e.g. ≈ 790 measured on
// H100/H200 for an 8192³ matmul).
func MFU(flops, seconds, peakTFLOPs float64) float64 {
	if seconds <= 0 || peakTFLOPs <= 0 {
		return 0
	}
	return flops / seconds / (peakTFLOPs * 1e12)
}

// GemmShape is one matmul of the training step in BLAS terms: C (M×N) =
// op(A) (M×K) · op(B) (K×N), row-major, with the Sgemm meaning of the flags.
type GemmShape struct {
	TransA, TransB bool
	M, N, K        int
}

// Colmajor maps a row-major product C = op(A)·op(B) (Sgemm semantics) onto
// the column-major call cuBLAS expects: C is Cᵀ in column-major, so the call
// computes Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. swaps the operands and M with N. It
// returns the cuBLAS transa/transb flags (true = CUBLAS_OP_T) and m, n, k for
// cublasGemmEx(handle, transa, transb, m, n, k, alpha, B, ldb, A, lda, beta, C, ldc).
func (g GemmShape) Colmajor() (transa, transb bool, m, n, k int) {
	return g.TransB, g.TransA, g.N, g.M, g.K
}
