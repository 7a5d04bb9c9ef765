package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Shared helpers of the layer-kernel tests: random inputs, float64 copies and
// a finite-difference gradient check against the float64 references.

func randSlice(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// relErr returns max_i |got_i − want_i| / max(max_i |want_i|, 1e-12).
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-want[i]))
		den = math.Max(den, math.Abs(want[i]))
	}
	return num / math.Max(den, 1e-12)
}

// checkClose fails when relErr(got, want) > tol.
func checkClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	if e := relErr(got, want); e > tol || math.IsNaN(e) {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// numGrad returns the central finite-difference gradient of f at x (float64,
// step h), x being restored afterwards.
func numGrad(x []float64, h float64, f func() float64) []float64 {
	g := make([]float64, len(x))
	for i := range x {
		old := x[i]
		x[i] = old + h
		fp := f()
		x[i] = old - h
		fm := f()
		x[i] = old
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

// dotWeights returns Σ out[i]·w[i]: the scalar loss whose gradient with
// respect to out is w.
func dotWeights(out []float64, w []float32) float64 {
	var s float64
	for i, v := range out {
		s += v * float64(w[i])
	}
	return s
}

func TestSoftmaxRowsMatchesRef(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][2]int{{1, 1}, {3, 7}, {17, 33}, {5, 257}} {
		N, V := sz[0], sz[1]
		x := randSlice(r, N*V, 3)
		want := make([]float64, N*V)
		SoftmaxRowsRef(want, to64(x), N, V)
		SoftmaxRows(x, N, V)
		checkClose(t, "softmax", x, want, 1e-6)
	}
}

func TestLayerParCoversRange(t *testing.T) {
	for _, n := range []int{0, 1, 5, 1000} {
		seen := make([]int32, n)
		layerPar(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		layerJobs(n, func(i int) { seen[i]++ })
		for i, c := range seen {
			if c != 2 {
				t.Fatalf("n=%d: index %d visited %d times, want 2", n, i, c)
			}
		}
	}
}
