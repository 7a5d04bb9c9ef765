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

func TestExpf32(t *testing.T) {
	var worst float64
	for x := float32(expFlush); x <= 88; x += 0.0137 { // the accurate range
		got, want := float64(expf32(x)), math.Exp(float64(x))
		if e := math.Abs(got-want) / want; e > worst {
			worst = e
		}
	}
	if worst > 4e-7 {
		t.Fatalf("expf32 relative error %.3g", worst)
	}
	if !math.IsNaN(float64(expf32(float32(math.NaN())))) || expf32(float32(math.Inf(-1))) != 0 || !math.IsInf(float64(expf32(float32(math.Inf(1)))), 1) {
		t.Fatal("expf32 special values")
	}
}

// TestExpUnderflowsToZero checks that both exp paths give exactly 0 below
// expFlush (no subnormal or clamped tiny results) and stay accurate above it.
func TestExpUnderflowsToZero(t *testing.T) {
	for _, n := range []int{5, 8, 16, 21} { // scalar only, vector, vector + tail
		src := make([]float32, n)
		for i := range src {
			src[i] = expFlush - 0.5 - float32(i)*13 // a·src+b with a=1, b=0
		}
		src[n-1] = expFlush + 0.5
		dst := make([]float32, n)
		expAffine(dst, src, 1, 0)
		for i, v := range dst[:n-1] {
			if v != 0 {
				t.Fatalf("n=%d: exp(%v) = %g, want 0", n, src[i], v)
			}
		}
		if want := math.Exp(expFlush + 0.5); math.Abs(float64(dst[n-1])-want) > 4e-7*want {
			t.Fatalf("n=%d: exp(%v) = %g, want %g", n, expFlush+0.5, dst[n-1], want)
		}
	}
}

func TestDotAxpyVectorMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 64, 100, 129} {
		a, b := randSlice(r, n, 1), randSlice(r, n+3, 1)
		var want float64
		for i := 0; i < n; i++ {
			want += float64(a[i]) * float64(b[i])
		}
		if got := dot32(a, b); math.Abs(float64(got)-want) > 1e-5*float64(n) {
			t.Fatalf("n=%d: dot32 %v, want %v", n, got, want)
		}
		y, y2 := randSlice(r, n+2, 1), make([]float32, n+2)
		copy(y2, y)
		axpy32(0.75, a, y)
		axpyGo(0.75, a, y2)
		for i := range y {
			if math.Abs(float64(y[i]-y2[i])) > 1e-6 {
				t.Fatalf("n=%d: axpy32[%d] = %v, want %v", n, i, y[i], y2[i])
			}
		}
	}
}

func TestExpAffine(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, n := range []int{1, 7, 8, 9, 33, 100} {
		src := randSlice(r, n, 10)
		dst := make([]float32, n)
		expAffine(dst, src, -1.5, 0.25)
		for i, v := range src {
			arg := -1.5*float64(v) + 0.25
			want := math.Exp(arg) // the float32 argument's rounding costs |arg|·6e-8 relative
			if math.Abs(float64(dst[i])-want) > (4e-7+1.2e-7*math.Abs(arg))*want {
				t.Fatalf("n=%d: exp(%v) = %v, want %v", n, -1.5*v+0.25, dst[i], want)
			}
		}
	}
}
