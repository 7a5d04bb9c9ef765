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
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			r := float32(1 / math.Sqrt(ss/float64(C)+float64(eps)))
			rstd[n] = r
			o := out[n*C : (n+1)*C]
			for i, v := range x {
				o[i] = v * r * weight[i]
			}
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
			var s float32
			for i := range x {
				s += dy[i] * weight[i] * x[i]
			}
			k := r * r * r * s / float32(C)
			for i := range x {
				dx[i] += r*weight[i]*dy[i] - k*x[i]
			}
		}
	})
	// dweight: columns in parallel so no two goroutines write the same element.
	w.par(C, 64, func(lo, hi int) {
		for n := 0; n < N; n++ {
			r := rstd[n]
			x, dy := inp[n*C+lo:n*C+hi], dout[n*C+lo:n*C+hi]
			dw := dweight[lo:hi]
			for i := range dw {
				dw[i] += dy[i] * x[i] * r
			}
		}
	})
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
