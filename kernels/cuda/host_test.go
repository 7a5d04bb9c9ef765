package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Ref rounds to bfloat16 through float64 arithmetic: the nearest of the
// two neighbouring representable values, ties to the even mantissa.
func bf16Ref(f float32) float32 {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return f
	}
	b := math.Float32bits(f)
	lo := math.Float32frombits(b &^ 0xffff)
	hi := math.Float32frombits((b &^ 0xffff) + 0x10000)
	hv := float64(hi)
	if math.IsInf(hv, 0) { // rounding up past the largest finite value: measure against 2^128
		hv = math.Copysign(math.Ldexp(1, 128), hv)
	}
	dl, dh := math.Abs(float64(f)-float64(lo)), math.Abs(hv-float64(f))
	switch {
	case dl < dh:
		return lo
	case dh < dl:
		return hi
	case (b>>16)&1 == 0:
		return lo
	}
	return hi
}

func TestToBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []float32{0, -0, 1, -1, 1.00390625, 1.0078125, 3.14159, 65504, 1e-38, -2.5e-39,
		math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1))}
	for i := 0; i < 100000; i++ {
		cases = append(cases, math.Float32frombits(r.Uint32()))
	}
	for _, f := range cases {
		if math.IsNaN(float64(f)) {
			if g := ToBF16(f).Float32(); !math.IsNaN(float64(g)) {
				t.Fatalf("ToBF16(NaN %08x) = %v, want NaN", math.Float32bits(f), g)
			}
			continue
		}
		got, want := ToBF16(f).Float32(), bf16Ref(f)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("ToBF16(%g = %08x) = %g, want %g", f, math.Float32bits(f), got, want)
		}
	}
}

func TestToBF16TiesToEven(t *testing.T) {
	// 1 + 2^-8 lies exactly between 1 and 1 + 2^-7: the even mantissa (1) wins.
	if got := ToBF16(1 + 1.0/256).Float32(); got != 1 {
		t.Errorf("ToBF16(1+2^-8) = %v, want 1", got)
	}
	// 1 + 3·2^-8 lies between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
	if got := ToBF16(1 + 3.0/256).Float32(); got != 1+1.0/64 {
		t.Errorf("ToBF16(1+3·2^-8) = %v, want %v", got, 1+1.0/64)
	}
}

func TestGrid1D(t *testing.T) {
	for _, c := range []struct {
		n          int64
		block, max int
		want       int
	}{{0, 256, 100, 1}, {1, 256, 100, 1}, {256, 256, 100, 1}, {257, 256, 100, 2}, {1 << 40, 256, 4096, 4096}} {
		if got := Grid1D(c.n, c.block, c.max); got != c.want {
			t.Errorf("Grid1D(%d, %d, %d) = %d, want %d", c.n, c.block, c.max, got, c.want)
		}
	}
}

func TestMFU(t *testing.T) {
	if got := MFU(790e12*0.5, 1, 790); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("MFU = %v, want 0.5", got)
	}
	if MFU(1, 0, 790) != 0 {
		t.Error("MFU with zero time must be 0")
	}
}

// colmajorGemm is what cuBLAS computes: C (m×n, column-major, ldc) =
// op(A)·op(B), A and B column-major; trans means the stored matrix is the
// transpose of the operand.
func colmajorGemm(transa, transb bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float64
				if transa {
					av = a[i*lda+p] // A stored k×m: element (p, i)
				} else {
					av = a[p*lda+i] // A stored m×k: element (i, p)
				}
				if transb {
					bv = b[p*ldb+j]
				} else {
					bv = b[j*ldb+p]
				}
				s += av * bv
			}
			c[j*ldc+i] = s
		}
	}
}

// TestColmajorMapping checks that GemmShape.Colmajor, fed the row-major
// operands swapped as Blas.Gemm does, makes a column-major GEMM produce the
// row-major product, for all four transpose combinations and padded leading
// dimensions. This is the host-side half of the cuBLAS call; the device half
// is checked on a GPU (docs/cuda.md).
func TestColmajorMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 5, 7, 3
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			// row-major storage with padding
			ar, ac := m, k
			if ta {
				ar, ac = k, m
			}
			br, bc := k, n
			if tb {
				br, bc = n, k
			}
			lda, ldb, ldc := ac+2, bc+1, n+3
			a := make([]float64, ar*lda)
			b := make([]float64, br*ldb)
			for i := range a {
				a[i] = r.NormFloat64()
			}
			for i := range b {
				b[i] = r.NormFloat64()
			}
			cta, ctb, cm, cn, ck := GemmShape{ta, tb, m, n, k}.Colmajor()
			c := make([]float64, m*ldc)
			colmajorGemm(cta, ctb, cm, cn, ck, b, ldb, a, lda, c, ldc)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var want float64
					for p := 0; p < k; p++ {
						var av, bv float64
						if ta {
							av = a[p*lda+i]
						} else {
							av = a[i*lda+p]
						}
						if tb {
							bv = b[j*ldb+p]
						} else {
							bv = b[p*ldb+j]
						}
						want += av * bv
					}
					if d := math.Abs(c[i*ldc+j] - want); d > 1e-12 {
						t.Fatalf("transA=%v transB=%v: C[%d,%d] = %v, want %v", ta, tb, i, j, c[i*ldc+j], want)
					}
				}
			}
		}
	}
}
