package kernels

import (
	"math/rand/v2"
	"testing"
)

func TestRoPEForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct{ B, T, nh, hd, extra int }{{1, 1, 1, 2, 0}, {2, 5, 3, 6, 4}, {3, 17, 2, 16, 1}} {
		stride := c.nh*c.hd + c.extra
		const theta = 500000.0
		x, dout := randSlice(r, c.B*c.T*stride, 1), randSlice(r, c.B*c.T*stride, 1)
		half := c.hd / 2
		cos, sin := make([]float32, c.T*half), make([]float32, c.T*half)
		RoPETables(cos, sin, c.T, c.hd, theta)
		got := append([]float32(nil), x...)
		RoPEForward(got, cos, sin, c.B, c.T, c.nh, c.hd, stride)
		x64 := to64(x)
		ref := make([]float64, len(x))
		loss := func() float64 {
			RoPEForwardRef(ref, x64, c.B, c.T, c.nh, c.hd, stride, theta)
			return dotWeights(ref, dout)
		}
		loss()
		checkClose(t, "rope forward", got, ref, 1e-6)
		dx := append([]float32(nil), dout...)
		RoPEBackward(dx, cos, sin, c.B, c.T, c.nh, c.hd, stride)
		checkClose(t, "rope backward", dx, numGrad(x64, 1e-6, loss), 1e-5)
	}
}
