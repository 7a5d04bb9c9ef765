package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowLoopsVectorBitIdentical runs every row loop of RMSNorm, SwiGLU, RoPE
// and the attention softmax with the AVX loops and with the scalar loops alone
// (useVecAttention off) on awkward lengths, and requires the same bits.
func TestRowLoopsVectorBitIdentical(t *testing.T) {
	if !useVecAttention {
		t.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(53, 54))
	for _, n := range []int{8, 13, 64, 203} {
		a, b, c, d := randSlice(r, n, 3), randSlice(r, n, 1), randSlice(r, n, 1), randSlice(r, n, 1)
		e := make([]float32, n) // exp(−a), once: expAffine's two paths may differ in the last bit
		expAffine(e, a, -1, 0)
		run := func() (out [][]float32, dot float32) {
			o := make([]float32, n)
			rmsScaleRow(o, a, b, 0.7)
			dx := append([]float32(nil), c...)
			rmsDxRow(dx, b, c, a, 0.7, 0.03)
			dw := append([]float32(nil), d...)
			rmsDwRow(dw, c, a, 0.7)
			f := append([]float32(nil), e...)
			swigluFwdRow(f, a, b)
			dg, du := append([]float32(nil), e...), make([]float32, n)
			swigluBwdRow(dg, du, c, a, b)
			sc := append([]float32(nil), a...)
			scale32(sc, 0.37)
			ra, rb := append([]float32(nil), a...), append([]float32(nil), b...)
			ropeRow(ra, rb, c, d, 1)
			ropeRow(rb, ra, d, c, -1)
			return [][]float32{o, dx, dw, f, dg, du, sc, ra, rb, {max8(a), sum8(a)}}, rmsDot3(c, b, a)
		}
		vec, vdot := run()
		useVecAttention = false
		ref, rdot := run()
		useVecAttention = true
		if math.Float32bits(vdot) != math.Float32bits(rdot) {
			t.Fatalf("n=%d: rmsDot3 %v (vector) vs %v", n, vdot, rdot)
		}
		for k := range vec {
			for i := range vec[k] {
				if math.Float32bits(vec[k][i]) != math.Float32bits(ref[k][i]) {
					t.Fatalf("n=%d loop %d element %d: %v (vector) vs %v", n, k, i, vec[k][i], ref[k][i])
				}
			}
		}
	}
}
