package kernels

// useVecAttention selects the AVX2+FMA dot/axpy loops of attention_amd64.s.
var useVecAttention = cpu.avx2FMA

// dotVec returns Σ a[i]·b[i]; len(b) ≥ len(a) ≥ 8. Defined in attention_amd64.s.
//
//go:noescape
func dotAVX2(a, b *float32, n int) float32

// axpyAVX2 computes y[i] += alpha·x[i] for i < n. Defined in attention_amd64.s.
//
//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

func dotVec(a, b []float32) float32         { return dotAVX2(&a[0], &b[0], len(a)) }
func axpyVec(alpha float32, x, y []float32) { axpyAVX2(alpha, &x[0], &y[0], len(x)) }
