package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScalarFallbacks runs the layer tests again with the AVX2 loops switched
// off, so the portable paths that other architectures use are checked too.
func TestScalarFallbacks(t *testing.T) {
	if !useVecAttention {
		t.Skip("no AVX2 here: the scalar paths are what the other tests ran")
	}
	useVecAttention = false
	defer func() { useVecAttention = true }()
	t.Run("attention", TestAttentionForwardBackward)
	t.Run("swiglu", TestSwiGLUForwardBackward)
	t.Run("xent", TestXEntForwardBackward)
	t.Run("adamw", TestAdamWMatchesRef)
	t.Run("exp", TestExpAffine)
}

// TestSumSquaresVectorBitIdentical: the AVX2 and Go paths give the same bits.
func TestSumSquaresVectorBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, n := range []int{8, 13, 1000, 16389} {
		x := randSlice(r, n, 3)
		vec := sumSquaresBlock(x)
		useVecAttention = false
		scalar := sumSquaresBlock(x)
		useVecAttention = cpu.avx2FMA
		if math.Float64bits(vec) != math.Float64bits(scalar) {
			t.Fatalf("n=%d: vector %v, scalar %v", n, vec, scalar)
		}
	}
}
