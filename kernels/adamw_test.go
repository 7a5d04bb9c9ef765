package kernels

import (
	"math"
	"math/rand/v2"
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
		AdamW(p, g, m, v, 1e-2, 0.9, 0.95, 1e-8, 0.1, step)
		AdamWRef(p64, to64(g), m64, v64, 1e-2, 0.9, 0.95, 1e-8, 0.1, step)
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
