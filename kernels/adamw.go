package kernels

import "math"

// AdamW applies one decoupled-weight-decay Adam step (Loshchilov & Hutter, as
// PyTorch's AdamW) to p in place, given its gradient gscale·g (gscale carries
// gradient clipping; 1 for none) and moments m, v (updated in place); step
// counts from 1 for the bias correction:
//
//	g ← gscale·g ; m ← β1·m + (1−β1)·g ;  v ← β2·v + (1−β2)·g²
//	p ← p − lr·( m/(1−β1^step) / (sqrt(v/(1−β2^step)) + eps) + wd·p )
//
// Element-wise, in parallel chunks, with an AVX2 loop where available that
// performs the same float32 operations in the same order (no FMA) as the Go
// loop: the result is the same bits on every machine and any GOMAXPROCS.
func AdamW(p, g, m, v []float32, lr, beta1, beta2, eps, wd, gscale float32, step int) {
	h := adamwHyper{
		beta1: beta1, c1: 1 - beta1, beta2: beta2, c2: 1 - beta2,
		ib1: 1 / float32(1-math.Pow(float64(beta1), float64(step))),
		ib2: 1 / float32(1-math.Pow(float64(beta2), float64(step))),
		eps: eps, lr: lr, wd: wd, gscale: gscale,
	}
	layerPar(len(p), 1<<14, func(lo, hi int) {
		p, g, m, v := p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]
		g, m, v = g[:len(p)], m[:len(p)], v[:len(p)] // one bounds check, not four per element
		i := 0
		if useVecAttention && len(p) >= 8 {
			adamwAVX2(&p[0], &g[0], &m[0], &v[0], len(p), &h)
			i = len(p) &^ 7
		}
		adamwGo(p[i:], g[i:], m[i:], v[i:], &h)
	})
}

// adamwHyper is the per-step constants of AdamW, laid out for adamwAVX2.
type adamwHyper struct {
	beta1, c1, beta2, c2, ib1, ib2, eps, lr, wd, gscale float32
}

func adamwGo(p, g, m, v []float32, h *adamwHyper) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	// The float32() conversions are explicit roundings: they forbid fused
	// multiply-add (Go spec), so this loop and adamwAVX2 agree bit for bit
	// whatever GOAMD64/GOARCH the binary is built for.
	for i := range p {
		gi := g[i] * h.gscale
		mi := float32(h.beta1*m[i]) + float32(h.c1*gi)
		vi := float32(h.beta2*v[i]) + float32(float32(h.c2*gi)*gi)
		m[i], v[i] = mi, vi
		den := float32(math.Sqrt(float64(vi*h.ib2))) + h.eps
		p[i] -= float32(h.lr * (float32(mi*h.ib1)/den + float32(h.wd*p[i])))
	}
}

// AdamWRef is the float64 reference of AdamW on float64 slices.
func AdamWRef(p, g, m, v []float64, lr, beta1, beta2, eps, wd float64, step int) {
	bc1 := 1 - math.Pow(beta1, float64(step))
	bc2 := 1 - math.Pow(beta2, float64(step))
	for i := range p {
		m[i] = beta1*m[i] + (1-beta1)*g[i]
		v[i] = beta2*v[i] + (1-beta2)*g[i]*g[i]
		p[i] -= lr * ((m[i]/bc1)/(math.Sqrt(v[i]/bc2)+eps) + wd*p[i])
	}
}

// adamwChunk is the fixed block size of SumSquares: its partial sums are
// combined in block order, so the result is the same for any GOMAXPROCS.
const adamwChunk = 1 << 14

// SumSquares returns Σ x[i]² accumulated in float64, computed in parallel over
// fixed blocks whose partial sums are added in order: deterministic.
func SumSquares(x []float32) float64 {
	nb := (len(x) + adamwChunk - 1) / adamwChunk
	parts := make([]float64, nb)
	layerPar(nb, 4, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			parts[b] = sumSquaresBlock(x[b*adamwChunk : min((b+1)*adamwChunk, len(x))])
		}
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}

// sumSquaresBlock sums x[i]² in float64 over eight lanes (lane j takes the
// elements i ≡ j mod 8), added in a fixed tree at the end. The AVX2 loop does
// exactly the same multiplications and additions (no FMA), so both paths give
// the same bits.
func sumSquaresBlock(x []float32) float64 {
	var s [8]float64
	i := 0
	if useVecAttention && len(x) >= 8 {
		sumSquaresAVX2(&x[0], len(x), &s)
		i = len(x) &^ 7
	}
	for ; i+8 <= len(x); i += 8 {
		for j, v := range x[i : i+8] {
			f := float64(v)
			s[j] += float64(f * f) // explicit rounding: no FMA even with GOAMD64=v3
		}
	}
	for j := 0; i < len(x); i, j = i+1, j+1 {
		f := float64(x[i])
		s[j] += float64(f * f)
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// Add sets dst[i] += src[i], in parallel chunks: the trainer's reduction of
// its batch lanes' gradients. Each element is one float32 addition, so the
// result is the same bits on every machine and any GOMAXPROCS. It panics
// when the lengths differ.
func Add(dst, src []float32) { Workers(0).Add(dst, src) }

// Add is the package's Add on at most w goroutines.
func (w Workers) Add(dst, src []float32) {
	if len(dst) != len(src) {
		panic("kernels: Add: lengths differ")
	}
	w.par(len(dst), 1<<14, func(lo, hi int) { axpy32(1, src[lo:hi], dst[lo:hi]) })
}

// AddSumSquares is Add followed by SumSquares of dst, in one pass over
// memory: the same bits as the two calls (the same fixed blocks, added in
// order).
func AddSumSquares(dst, src []float32) float64 { return Workers(0).AddSumSquares(dst, src) }

// AddSumSquares is the package's AddSumSquares on at most w goroutines; the
// result does not depend on w.
func (w Workers) AddSumSquares(dst, src []float32) float64 {
	if len(dst) != len(src) {
		panic("kernels: AddSumSquares: lengths differ")
	}
	nb := (len(dst) + adamwChunk - 1) / adamwChunk
	block := func(b int) float64 {
		d, s := dst[b*adamwChunk:min((b+1)*adamwChunk, len(dst))], src[b*adamwChunk:min((b+1)*adamwChunk, len(dst))]
		axpy32(1, s, d)
		return sumSquaresBlock(d)
	}
	var ss float64
	if w.count() == 1 || nb < 8 {
		for b := 0; b < nb; b++ {
			ss += block(b)
		}
		return ss
	}
	parts := make([]float64, nb)
	w.par(nb, 4, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			parts[b] = block(b)
		}
	})
	for _, p := range parts {
		ss += p
	}
	return ss
}

// Scale multiplies x by a in place, in parallel.
func Scale(x []float32, a float32) {
	layerPar(len(x), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] *= a
		}
	})
}
