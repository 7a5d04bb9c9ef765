package kernels

import (
	"math/rand/v2"
	"testing"
)

func TestRMSNormForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sz := range [][2]int{{1, 3}, {3, 5}, {7, 13}, {33, 64}} {
		N, C := sz[0], sz[1]
		const eps = 1e-5
		inp, w, dout := randSlice(r, N*C, 1), randSlice(r, C, 1), randSlice(r, N*C, 1)
		out, rstd := make([]float32, N*C), make([]float32, N)
		RMSNormForward(out, rstd, inp, w, N, C, eps)
		x64, w64 := to64(inp), to64(w)
		ref := make([]float64, N*C)
		loss := func() float64 { RMSNormForwardRef(ref, x64, w64, N, C, eps); return dotWeights(ref, dout) }
		loss()
		checkClose(t, "rmsnorm forward", out, ref, 1e-6)

		dinp, dw := randSlice(r, N*C, 1), randSlice(r, C, 1) // accumulate onto non-zero
		dinp0, dw0 := append([]float32(nil), dinp...), append([]float32(nil), dw...)
		RMSNormBackward(dinp, dw, dout, inp, w, rstd, N, C)
		for i := range dinp {
			dinp[i] -= dinp0[i]
		}
		for i := range dw {
			dw[i] -= dw0[i]
		}
		checkClose(t, "rmsnorm dinp", dinp, numGrad(x64, 1e-6, loss), 1e-4)
		checkClose(t, "rmsnorm dweight", dw, numGrad(w64, 1e-6, loss), 1e-4)
	}
}
