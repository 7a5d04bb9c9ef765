package kernels

import "math"

// RMSNormForward normalizes each row of inp by its root mean square and scales
// it by weight: out[n,i] = inp[n,i] · rstd[n] · weight[i], with
// rstd[n] = 1/sqrt(mean_i inp[n,i]² + eps). Rows run in parallel.
//
//	out    (N, C)  written
//	rstd   (N)     written, kept for the backward pass
//	inp    (N, C)
//	weight (C)
func RMSNormForward(out, rstd, inp, weight []float32, N, C int, eps float32) {
	Workers(0).RMSNormForward(out, rstd, inp, weight, N, C, eps)
}

// RMSNormForward is the package's RMSNormForward on at most w goroutines.
func (w Workers) RMSNormForward(out, rstd, inp, weight []float32, N, C int, eps float32) {
	w.par(N, 16, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x := inp[n*C : (n+1)*C]
			ss := sumSquaresBlock(x)
			r := float32(1 / math.Sqrt(ss/float64(C)+float64(eps)))
			rstd[n] = r
			rmsScaleRow(out[n*C:(n+1)*C], x, weight, r)
		}
	})
}

// RMSNormBackward accumulates the gradients of RMSNormForward:
// dinp += ∂L/∂inp and dweight += ∂L/∂weight given dout = ∂L/∂out.
//
//	dinp    (N, C)  accumulated
//	dweight (C)     accumulated
//	dout    (N, C)
//	inp     (N, C)
//	weight  (C)
//	rstd    (N)     from the forward pass
func RMSNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, N, C int) {
	Workers(0).RMSNormBackward(dinp, dweight, dout, inp, weight, rstd, N, C)
}

// RMSNormBackward is the package's RMSNormBackward on at most w goroutines.
func (w Workers) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, N, C int) {
	// dinp: rows in parallel. dx_i = r·w_i·dy_i − r³/C · x_i · Σ_j dy_j·w_j·x_j
	w.par(N, 16, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x, dy, dx := inp[n*C:(n+1)*C], dout[n*C:(n+1)*C], dinp[n*C:(n+1)*C]
			r := rstd[n]
			s := rmsDot3(dy, weight, x)
			k := r * r * r * s / float32(C)
			rmsDxRow(dx, weight, dy, x, r, k)
		}
	})
	// dweight: columns in parallel so no two goroutines write the same element.
	w.par(C, 64, func(lo, hi int) {
		for n := 0; n < N; n++ {
			r := rstd[n]
			x, dy := inp[n*C+lo:n*C+hi], dout[n*C+lo:n*C+hi]
			rmsDwRow(dweight[lo:hi], dy, x, r)
		}
	})
}

// The row loops of RMSNorm: eight at a time with AVX where available, the
// scalar loops doing the same float32 operations in the same order (explicit
// roundings forbid FMA), so both give the same bits.

// rmsScaleRow sets o[i] = (x[i]·r)·w[i].
func rmsScaleRow(o, x, w []float32, r float32) {
	x, w = x[:len(o)], w[:len(o)]
	i := 0
	if useVecAttention && len(o) >= 8 {
		rmsScaleAVX2(&o[0], &x[0], &w[0], len(o), r)
		i = len(o) &^ 7
	}
	for ; i < len(o); i++ {
		o[i] = float32(x[i]*r) * w[i]
	}
}

// rmsDot3 returns Σ (dy[i]·w[i])·x[i] in float32, in eight partial sums (sum j
// takes the elements i ≡ j mod 8) added in a fixed tree.
func rmsDot3(dy, w, x []float32) float32 {
	w, x = w[:len(dy)], x[:len(dy)]
	var l [8]float32
	i := 0
	if useVecAttention && len(dy) >= 8 {
		rmsDotAVX2(&dy[0], &w[0], &x[0], len(dy), &l)
		i = len(dy) &^ 7
	}
	for ; i < len(dy); i++ {
		l[i&7] = l[i&7] + float32(float32(dy[i]*w[i])*x[i])
	}
	return tree8(&l)
}

// rmsDxRow adds ((r·w[i])·dy[i]) − k·x[i] to dx[i].
func rmsDxRow(dx, w, dy, x []float32, r, k float32) {
	w, dy, x = w[:len(dx)], dy[:len(dx)], x[:len(dx)]
	i := 0
	if useVecAttention && len(dx) >= 8 {
		rmsDxAVX2(&dx[0], &w[0], &dy[0], &x[0], len(dx), r, k)
		i = len(dx) &^ 7
	}
	for ; i < len(dx); i++ {
		dx[i] += float32(float32(r*w[i])*dy[i]) - float32(k*x[i])
	}
}

// rmsDwRow adds (dy[i]·x[i])·r to dw[i].
func rmsDwRow(dw, dy, x []float32, r float32) {
	dy, x = dy[:len(dw)], x[:len(dw)]
	i := 0
	if useVecAttention && len(dw) >= 8 {
		rmsDwAVX2(&dw[0], &dy[0], &x[0], len(dw), r)
		i = len(dw) &^ 7
	}
	for ; i < len(dw); i++ {
		dw[i] += float32(float32(dy[i]*x[i]) * r)
	}
}

// RMSNormForwardRef is the float64 reference of RMSNormForward: out (N, C)
// from inp (N, C) and weight (C).
func RMSNormForwardRef(out, inp, weight []float64, N, C int, eps float64) {
	for n := 0; n < N; n++ {
		var ss float64
		for i := 0; i < C; i++ {
			ss += inp[n*C+i] * inp[n*C+i]
		}
		r := 1 / math.Sqrt(ss/float64(C)+eps)
		for i := 0; i < C; i++ {
			out[n*C+i] = inp[n*C+i] * r * weight[i]
		}
	}
}
