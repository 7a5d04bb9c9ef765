package kernels

import "testing"

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
