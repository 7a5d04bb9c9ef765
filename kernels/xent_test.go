package kernels

import (
	"math/rand/v2"
	"testing"
)

func TestXEntForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, sz := range [][2]int{{1, 2}, {5, 7}, {9, 130}} {
		N, V := sz[0], sz[1]
		for _, z := range []float32{0, 1e-2} {
			logits := randSlice(r, N*V, 2)
			targets := make([]int32, N)
			for i := range targets {
				targets[i] = int32(r.IntN(V))
			}
			const scale = 0.37
			losses, ce, d := make([]float32, N), make([]float32, N), make([]float32, N*V)
			XEntForwardBackward(d, losses, ce, logits, targets, N, V, z, scale)
			l64 := to64(logits)
			var sum float64
			for _, v := range losses {
				sum += float64(v)
			}
			want := XEntRef(l64, targets, N, V, float64(z))
			checkClose(t, "xent loss", []float32{float32(sum)}, []float64{want}, 1e-5)
			g := numGrad(l64, 1e-6, func() float64 { return scale * XEntRef(l64, targets, N, V, float64(z)) })
			checkClose(t, "xent dlogits", d, g, 1e-4)
			// in place: dlogits aliasing logits gives the same gradient
			XEntForwardBackward(logits, losses, nil, logits, targets, N, V, z, scale)
			checkClose(t, "xent dlogits in place", logits, g, 1e-4)
		}
	}
}
