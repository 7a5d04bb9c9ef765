package kernels

import (
	"math"
	"runtime"
	"sync"
)

// This file holds the row softmax and the small helpers shared by the layer
// kernels (rmsnorm, rope, attention, xent, swiglu, adamw): a goroutine
// fan-out over index ranges and unrolled float32 dot/axpy loops.

// Workers is the number of goroutines a kernel call may use: 0 means
// GOMAXPROCS, 1 runs it on the calling goroutine alone. The package-level
// kernels (Sgemm, RMSNormForward, …) are Workers(0)'s methods; a caller that
// runs several kernel streams side by side, like the trainer's batch lanes,
// gives each its share so that the streams do not wake threads for each
// other. The results do not depend on it.
type Workers int

// count returns the number of goroutines w stands for (at least 1).
func (w Workers) count() int {
	if w <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return int(w)
}

// layerPar runs f over [0, n) split into at most GOMAXPROCS contiguous ranges,
// one goroutine each, and returns when all are done. Small n runs inline.
// minPer is the least number of items worth a goroutine.
func layerPar(n, minPer int, f func(lo, hi int)) { Workers(0).par(n, minPer, f) }

// par is layerPar with at most w goroutines.
func (w Workers) par(n, minPer int, f func(lo, hi int)) {
	workers := w.count()
	if minPer < 1 {
		minPer = 1
	}
	if w := n / minPer; w < workers {
		workers = w
	}
	if workers <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// layerJobs runs f(i) for i in [0, n) on up to GOMAXPROCS goroutines that pull
// indices from a shared counter, so uneven jobs balance. f must not write
// memory another job writes.
func layerJobs(n int, f func(i int)) { Workers(0).jobs(n, f) }

// jobs is layerJobs with at most w goroutines.
func (w Workers) jobs(n int, f func(i int)) {
	workers := min(w.count(), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// dot32 returns Σ a[i]·b[i] over len(a) (b at least as long). On amd64 with
// AVX2+FMA it runs a vector loop (attention_amd64.s); elsewhere dotGo.
func dot32(a, b []float32) float32 {
	b = b[:len(a)]
	if useVecAttention && len(a) >= 8 {
		return dotVec(a, b)
	}
	return dotGo(a, b)
}

func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy32 computes y[i] += alpha·x[i] over len(x) (vectorised like dot32).
func axpy32(alpha float32, x, y []float32) {
	y = y[:len(x)]
	if useVecAttention && len(x) >= 8 {
		axpyVec(alpha, x, y)
		return
	}
	axpyGo(alpha, x, y)
}

func axpyGo(alpha float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(x); i++ {
		y[i] += alpha * x[i]
	}
}

// max8, sum8 and scale32 are row loops of the attention softmax, eight at a
// time with AVX where available; the scalar loops keep the same eight lanes
// (element i in lane i mod 8, combined in a fixed tree), so both paths give
// the same bits.

// max8 returns the largest element of x (len ≥ 1). A NaN never wins a
// comparison, so max8 ignores it (the softmax's sum still turns NaN).
func max8(x []float32) float32 {
	var l [8]float32
	for j := range l {
		l[j] = float32(math.Inf(-1))
	}
	i := 0
	if useVecAttention && len(x) >= 8 {
		maxLanesAVX2(&x[0], len(x), &l)
		i = len(x) &^ 7
	}
	for ; i < len(x); i++ {
		if x[i] > l[i&7] {
			l[i&7] = x[i]
		}
	}
	m := l[0]
	for _, v := range l[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

// sum8 returns Σ x[i] in float32, in eight partial sums added in a fixed tree.
func sum8(x []float32) float32 {
	var l [8]float32
	i := 0
	if useVecAttention && len(x) >= 8 {
		sumLanesAVX2(&x[0], len(x), &l)
		i = len(x) &^ 7
	}
	for ; i < len(x); i++ {
		l[i&7] += x[i]
	}
	return tree8(&l)
}

// tree8 adds eight float32 partial sums in the fixed tree both the vector and
// the scalar loops end with.
func tree8(l *[8]float32) float32 {
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

// scale32 multiplies x by a in place.
func scale32(x []float32, a float32) {
	i := 0
	if useVecAttention && len(x) >= 8 {
		scaleAVX2(&x[0], len(x), a)
		i = len(x) &^ 7
	}
	for ; i < len(x); i++ {
		x[i] *= a
	}
}

// expFlush is where exp gives 0 instead of e^x < 1.7e-28 (both paths).
// Softmax weights that small vanish in every sum they enter, 21 orders of
// magnitude below float32 resolution; kept, they make subnormal score
// gradients (p·(dp − D) underflows), whose every multiply in the products
// downstream takes a microcode assist on x86: training steps slowed 1.7×
// as attention sharpened over the first 150 steps of the benchmark.
const expFlush = -64

// expf32 returns e^x in float32 arithmetic: range reduction x = k·ln2 + r,
// |r| ≤ ln2/2, a degree-6 Taylor polynomial for e^r (error < 2e-7 relative)
// and 2^k put into the exponent bits. About 5× faster than math.Exp; the
// same bits on every amd64 machine. Below expFlush it returns 0; x > 86 and
// NaN go through math.Exp.
func expf32(x float32) float32 {
	if x < expFlush {
		return 0
	}
	if !(x <= 86) {
		return float32(math.Exp(float64(x)))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125 // ln 2 split so k·ln2hi is exact
		ln2lo = 1.42860682030941723212e-6
	)
	kf := x * log2e
	var k int32
	if kf >= 0 {
		k = int32(kf + 0.5)
	} else {
		k = int32(kf - 0.5)
	}
	fk := float32(k)
	r := x - fk*ln2hi
	r -= fk * ln2lo
	p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return math.Float32frombits(math.Float32bits(p) + uint32(k)<<23)
}

// SoftmaxRows replaces each of the N rows of x (N, V) by its softmax, in place.
// Rows run in parallel.
func SoftmaxRows(x []float32, N, V int) {
	layerPar(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			softmaxRow(x[n*V : (n+1)*V])
		}
	})
}

// softmaxRow replaces row by its softmax and returns max and log Σ exp(row−max).
func softmaxRow(row []float32) (maxv, logSum float32) {
	maxv = float32(math.Inf(-1))
	for _, v := range row {
		maxv = max(maxv, v)
	}
	expAffine(row, row, 1, -maxv)
	var sum float64
	for _, e := range row {
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range row {
		row[i] *= inv
	}
	return maxv, float32(math.Log(sum))
}

// SoftmaxRowsRef is the float64 reference of SoftmaxRows: out (N, V) = softmax of x (N, V).
func SoftmaxRowsRef(out, x []float64, N, V int) {
	for n := 0; n < N; n++ {
		row := x[n*V : (n+1)*V]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for i, v := range row {
			out[n*V+i] = math.Exp(v-m) / s
		}
	}
}
