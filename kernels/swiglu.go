package kernels

import "math"

// SwiGLUForward computes the gated MLP activation out = silu(gate) ⊙ up, where
// each row of gu holds gate then up side by side (the output of the fused
// gate_proj/up_proj matmul). silu(x) = x·σ(x). Rows run in parallel.
//
//	out (N, F)   written
//	gu  (N, 2F)  [gate | up]
func SwiGLUForward(out, gu []float32, N, F int) {
	layerPar(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			g, u := gu[n*2*F:n*2*F+F], gu[n*2*F+F:(n+1)*2*F]
			o := out[n*F : (n+1)*F]
			for i := range o {
				s := sigmoid32(g[i])
				o[i] = g[i] * s * u[i]
			}
		}
	})
}

// SwiGLUBackward writes the gradient of SwiGLUForward with respect to gu
// given dout: dgate = dout·up·σ(g)·(1 + g·(1−σ(g))), dup = dout·silu(g).
//
//	dgu  (N, 2F)  written (overwritten)
//	dout (N, F)
//	gu   (N, 2F)  from the forward pass
func SwiGLUBackward(dgu, dout, gu []float32, N, F int) {
	layerPar(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			g, u := gu[n*2*F:n*2*F+F], gu[n*2*F+F:(n+1)*2*F]
			dg, du := dgu[n*2*F:n*2*F+F], dgu[n*2*F+F:(n+1)*2*F]
			dy := dout[n*F : (n+1)*F]
			for i := range dy {
				s := sigmoid32(g[i])
				silu := g[i] * s
				du[i] = dy[i] * silu
				dg[i] = dy[i] * u[i] * s * (1 + g[i]*(1-s))
			}
		}
	})
}

func sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SwiGLUForwardRef is the float64 reference of SwiGLUForward.
func SwiGLUForwardRef(out, gu []float64, N, F int) {
	for n := 0; n < N; n++ {
		for i := 0; i < F; i++ {
			g, u := gu[n*2*F+i], gu[n*2*F+F+i]
			out[n*F+i] = g / (1 + math.Exp(-g)) * u
		}
	}
}
