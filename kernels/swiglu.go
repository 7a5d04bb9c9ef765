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
			swigluFwdRow(o, g, u)
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
			swigluBwdRow(dg, du, dy, g, u)
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

// swigluFwdRow sets o[i] = g[i] / (1 + o[i]) · u[i], where o holds exp(−g):
// eight at a time with AVX where available, the same float32 operations in
// the same order as the loop below (no FMA: explicit roundings), so both
// give the same bits.
func swigluFwdRow(o, g, u []float32) {
	g, u = g[:len(o)], u[:len(o)]
	i := 0
	if useVecAttention && len(o) >= 8 {
		swigluFwdAVX2(&o[0], &g[0], &u[0], len(o))
		i = len(o) &^ 7
	}
	for ; i < len(o); i++ {
		o[i] = float32(g[i]/(1+o[i])) * u[i]
	}
}

// swigluBwdRow sets, where dg holds exp(−g), s = σ(g) = 1/(1 + dg[i]),
// du[i] = dy[i]·silu(g[i]) and dg[i] = dy[i]·u[i]·s·(1 + g[i]·(1 − s)); like
// swigluFwdRow, vector and scalar loops agree bit for bit.
func swigluBwdRow(dg, du, dy, g, u []float32) {
	du, dy, g, u = du[:len(dg)], dy[:len(dg)], g[:len(dg)], u[:len(dg)]
	i := 0
	if useVecAttention && len(dg) >= 8 {
		swigluBwdAVX2(&dg[0], &du[0], &dy[0], &g[0], &u[0], len(dg))
		i = len(dg) &^ 7
	}
	for ; i < len(dg); i++ {
		s := 1 / (1 + dg[i])
		du[i] = dy[i] * float32(g[i]*s)
		dg[i] = float32(float32(dy[i]*u[i])*s) * (1 + float32(g[i]*(1-s)))
	}
}
