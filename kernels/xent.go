package kernels

import "math"

// XEntForwardBackward is the fused loss layer: for each row n of logits it
// computes the cross-entropy against targets[n] plus the max-z-loss
// zcoef·(max_v logits[n,v])² (Baichuan 2 / INTELLECT-1), and, when dlogits is
// not nil, the gradient of scale·(that sum) with respect to the logits:
//
//	dlogits[n,v] = scale·(softmax[n,v] − [v = target] + 2·zcoef·max·[v = argmax])
//
// dlogits may alias logits (the logits are then overwritten). Rows run in
// parallel. A target outside [0, V) is a caller bug and panics.
//
//	losses  (N)     written: cross-entropy + z-loss per row
//	ce      (N)     written when not nil: cross-entropy alone
//	dlogits (N, V)  written when not nil
//	logits  (N, V)
//	targets (N)
func XEntForwardBackward(dlogits, losses, ce, logits []float32, targets []int32, N, V int, zcoef, scale float32) {
	Workers(0).XEntForwardBackward(dlogits, losses, ce, logits, targets, N, V, zcoef, scale)
}

// XEntForwardBackward is the package's XEntForwardBackward on at most w goroutines.
func (w Workers) XEntForwardBackward(dlogits, losses, ce, logits []float32, targets []int32, N, V int, zcoef, scale float32) {
	w.par(N, 4, func(lo, hi int) {
		var scratch []float32
		if dlogits == nil {
			scratch = make([]float32, V)
		}
		for n := lo; n < hi; n++ {
			row := logits[n*V : (n+1)*V]
			tgt := int(targets[n])
			lt := row[tgt] // read before dlogits (which may alias row) is written
			maxv, arg := row[0], 0
			for i, v := range row {
				if v > maxv {
					maxv, arg = v, i
				}
			}
			e := scratch
			if dlogits != nil {
				e = dlogits[n*V : (n+1)*V]
			}
			expAffine(e, row, 1, -maxv)
			var sum float64
			for _, v := range e {
				sum += float64(v)
			}
			c := float32(float64(maxv) + math.Log(sum) - float64(lt))
			losses[n] = c + zcoef*maxv*maxv
			if ce != nil {
				ce[n] = c
			}
			if dlogits == nil {
				continue
			}
			k := scale * float32(1/sum)
			for i := range e {
				e[i] *= k
			}
			e[tgt] -= scale
			e[arg] += scale * 2 * zcoef * maxv
		}
	})
}

// XEntRef is the float64 reference of the loss in XEntForwardBackward: it
// returns Σ_n (cross-entropy + zcoef·max²) over the N rows of logits (N, V).
func XEntRef(logits []float64, targets []int32, N, V int, zcoef float64) float64 {
	var total float64
	for n := 0; n < N; n++ {
		row := logits[n*V : (n+1)*V]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		total += m + math.Log(s) - row[targets[n]] + zcoef*m*m
	}
	return total
}
