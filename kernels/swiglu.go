package kernels

import "math"

// SwiGLUForward computes the gated MLP activation out = silu(gate) ⊙ up, where
// each row of gu holds gate then up side by side (the output of the fused
// gate_proj/up_proj matmul). silu(x) = x·σ(x). Rows run in parallel.
//
//	out (N, F)   written
//	gu  (N, 2F)  [gate | up]
func SwiGLUForward(out, gu []float32, N, F int) { Workers(0).SwiGLUForward(out, gu, N, F) }

// SwiGLUForward is the package's SwiGLUForward on at most w goroutines.
func (w Workers) SwiGLUForward(out, gu []float32, N, F int) {
	w.par(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			g, u := gu[n*2*F:n*2*F+F], gu[n*2*F+F:(n+1)*2*F]
			o := out[n*F : (n+1)*F]
			expAffine(o, g, -1, 0) // o = exp(−g), then silu(g)·u = g/(1+exp(−g))·u
			for i, e := range o {
				o[i] = g[i] / (1 + e) * u[i]
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
	Workers(0).SwiGLUBackward(dgu, dout, gu, N, F)
}

// SwiGLUBackward is the package's SwiGLUBackward on at most w goroutines.
func (w Workers) SwiGLUBackward(dgu, dout, gu []float32, N, F int) {
	w.par(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			g, u := gu[n*2*F:n*2*F+F], gu[n*2*F+F:(n+1)*2*F]
			dg, du := dgu[n*2*F:n*2*F+F], dgu[n*2*F+F:(n+1)*2*F]
			dy := dout[n*F : (n+1)*F]
			expAffine(dg, g, -1, 0) // dg = exp(−g) until overwritten below
			for i := range dy {
				s := 1 / (1 + dg[i])
				silu := g[i] * s
				du[i] = dy[i] * silu
				dg[i] = dy[i] * u[i] * s * (1 + g[i]*(1-s))
			}
		}
	})
}

// SwiGLUForwardRef is the float64 reference of SwiGLUForward.
func SwiGLUForwardRef(out, gu []float64, N, F int) {
	for n := 0; n < N; n++ {
		for i := 0; i < F; i++ {
			g, u := gu[n*2*F+i], gu[n*2*F+F+i]
			out[n*F+i] = g / (1 + math.Exp(-g)) * u
		}
	}
}
