package kernels

import (
	"math/rand/v2"
	"testing"
)

func TestSwiGLUForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sz := range [][2]int{{1, 1}, {5, 7}, {19, 31}} {
		N, F := sz[0], sz[1]
		gu, dout := randSlice(r, N*2*F, 2), randSlice(r, N*F, 1)
		out := make([]float32, N*F)
		SwiGLUForward(out, gu, N, F)
		gu64 := to64(gu)
		ref := make([]float64, N*F)
		loss := func() float64 { SwiGLUForwardRef(ref, gu64, N, F); return dotWeights(ref, dout) }
		loss()
		checkClose(t, "swiglu forward", out, ref, 1e-6)
		dgu := randSlice(r, N*2*F, 1) // overwritten, so garbage must not leak
		SwiGLUBackward(dgu, dout, gu, N, F)
		checkClose(t, "swiglu dgu", dgu, numGrad(gu64, 1e-6, loss), 1e-5)
	}
}
