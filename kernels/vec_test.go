package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotAxpy compares Dot and Axpy with float64 references on lengths
// around the vector width.
func TestDotAxpy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 100, 1000} {
		a, b, y := randVec(r, n), randVec(r, n+3), randVec(r, n)
		var want, norm float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			norm += math.Abs(float64(a[i]) * float64(b[i]))
		}
		if got := float64(Dot(a, b)); math.Abs(got-want) > 1e-6*(norm+1) {
			t.Errorf("n=%d: Dot %v, want %v", n, got, want)
		}
		y0 := append([]float32(nil), y...)
		Axpy(0.75, a, y)
		for i := range y {
			if want := float64(y0[i]) + 0.75*float64(a[i]); math.Abs(float64(y[i])-want) > 1e-6*(math.Abs(want)+1) {
				t.Fatalf("n=%d: Axpy[%d] = %v, want %v", n, i, y[i], want)
			}
		}
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}
