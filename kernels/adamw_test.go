package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestAdamWMatchesRef(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	n := 70001 // several parallel chunks, odd tail
	p, m, v := randSlice(r, n, 1), randSlice(r, n, 0.1), randSlice(r, n, 0.1)
	for i := range v {
		v[i] *= v[i]
	}
	p64, m64, v64 := to64(p), to64(m), to64(v)
	for step := 1; step <= 3; step++ {
		g := randSlice(r, n, 1)
		AdamW(p, g, m, v, 1e-2, 0.9, 0.95, 1e-8, 0.1, 0.5, step)
		g64 := to64(g)
		for i := range g64 {
			g64[i] *= 0.5
		}
		AdamWRef(p64, g64, m64, v64, 1e-2, 0.9, 0.95, 1e-8, 0.1, step)
	}
	checkClose(t, "adamw p", p, p64, 1e-5)
	checkClose(t, "adamw m", m, m64, 1e-5)
	checkClose(t, "adamw v", v, v64, 1e-5)
}

func TestSumSquares(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	x := randSlice(r, 100003, 1)
	var want float64
	for _, v := range x {
		want += float64(v) * float64(v)
	}
	if got := SumSquares(x); math.Abs(got-want) > 1e-9*want {
		t.Fatalf("SumSquares = %v, want %v", got, want)
	}
	Scale(x, 2)
	if got := SumSquares(x); math.Abs(got-4*want) > 1e-9*want {
		t.Fatalf("after Scale(2): %v, want %v", got, 4*want)
	}
}

// TestAdamWVectorBitIdentical: the AVX2 loop and the Go loop give the same bits.
func TestAdamWVectorBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	n := 1000
	p, g, m, v := randSlice(r, n, 1), randSlice(r, n, 1), randSlice(r, n, 0.1), randSlice(r, n, 0.1)
	for i := range v {
		v[i] *= v[i]
	}
	p2, m2, v2 := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
	AdamW(p, g, m, v, 3e-3, 0.9, 0.95, 1e-8, 0.1, 0.7, 5)
	h := adamwHyper{beta1: 0.9, c1: 1 - float32(0.9), beta2: 0.95, c2: 1 - float32(0.95),
		ib1: 1 / float32(1-math.Pow(float64(float32(0.9)), 5)), ib2: 1 / float32(1-math.Pow(float64(float32(0.95)), 5)),
		eps: 1e-8, lr: 3e-3, wd: 0.1, gscale: 0.7}
	adamwGo(p2, g, m2, v2, &h)
	for i := range p {
		if math.Float32bits(p[i]) != math.Float32bits(p2[i]) || m[i] != m2[i] || v[i] != v2[i] {
			t.Fatalf("element %d: vector %v/%v/%v, Go %v/%v/%v", i, p[i], m[i], v[i], p2[i], m2[i], v2[i])
		}
	}
}

// TestAdd: dst gets exactly dst+src (one float32 addition each, on the
// vector and the scalar tails alike); src is not changed.
func TestAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, n := range []int{0, 1, 7, 9, 100003} {
		dst, src := randSlice(r, n, 1), randSlice(r, n, 1)
		want := make([]float32, n)
		for i := range want {
			want[i] = dst[i] + src[i]
		}
		src0 := append([]float32(nil), src...)
		Add(dst, src)
		for i := range want {
			if dst[i] != want[i] || src[i] != src0[i] {
				t.Fatalf("n=%d i=%d: dst %v src %v, want %v and %v", n, i, dst[i], src[i], want[i], src0[i])
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Add with different lengths did not panic")
		}
	}()
	Add(make([]float32, 3), make([]float32, 4))
}

// TestAddSumSquares: the fused pass gives the bits of Add then SumSquares,
// whatever its goroutine budget.
func TestAddSumSquares(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	for _, n := range []int{1, 9, 100003, 300001} {
		dst, src := randSlice(r, n, 1), randSlice(r, n, 1)
		want := append([]float32(nil), dst...)
		Add(want, src)
		wantSS := SumSquares(want)
		for _, w := range []Workers{0, 1, 2, 3} { // the same bits on any number of goroutines
			d := append([]float32(nil), dst...)
			ss := w.AddSumSquares(d, src)
			if ss != wantSS || !slices.Equal(d, want) {
				t.Fatalf("n=%d workers=%d: AddSumSquares %v, Add+SumSquares %v (or dst differs)", n, w, ss, wantSS)
			}
		}
	}
}
