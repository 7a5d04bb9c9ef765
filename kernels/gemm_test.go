package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// gemmCase is one Sgemm call to check against SgemmRef.
type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	pad            int // extra columns in every leading dimension
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v,tB=%v,m=%d,n=%d,k=%d,alpha=%g,beta=%g,pad=%d",
		tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.pad)
}

// gemmOperands holds random inputs of one case; C's padding holds a sentinel.
type gemmOperands struct {
	a, b, c       []float32
	lda, ldb, ldc int
}

const gemmPadSentinel = -12345.5

func newGemmOperands(tc gemmCase, rng *rand.Rand) gemmOperands {
	var o gemmOperands
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = ac, ar
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = bc, br
	}
	o.lda, o.ldb, o.ldc = max(1, ac)+tc.pad, max(1, bc)+tc.pad, max(1, tc.n)+tc.pad
	o.a = gemmRandSlice(rng, ar*o.lda)
	o.b = gemmRandSlice(rng, br*o.ldb)
	o.c = gemmRandSlice(rng, tc.m*o.ldc)
	for i := 0; i < tc.m; i++ {
		for j := tc.n; j < o.ldc; j++ {
			o.c[i*o.ldc+j] = gemmPadSentinel
		}
	}
	return o
}

func gemmRandSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

// checkGemm runs Sgemm with kern and SgemmRef on the same inputs and fails
// when an element differs by more than the float32 accumulation bound
// (k+2)·eps·(|alpha|·Σ|a·b| + |beta·c|), or when padding was written.
func checkGemm(t *testing.T, kern *gemmKernel, tc gemmCase, rng *rand.Rand) {
	t.Helper()
	o := newGemmOperands(tc, rng)
	// got has a guard zone after its end: a kernel that stores a whole tile
	// or vector past the last row or column of C would write there.
	const guard = 64
	cLen := len(o.c)
	if tc.m > 0 {
		cLen = (tc.m-1)*o.ldc + tc.n // the last row has no padding
	}
	got := make([]float32, len(o.c)+guard)
	copy(got, o.c[:cLen])
	for i := cLen; i < len(got); i++ {
		got[i] = gemmPadSentinel
	}
	want := append([]float32(nil), o.c...)
	g := gemmArgs{tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, got[:cLen], o.ldc, 0}
	if err := g.check(); err != nil {
		t.Fatalf("%v: %v", tc, err)
	}
	sgemm(kern, &g)
	SgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, want, o.ldc)
	for i := cLen; i < len(got); i++ {
		if got[i] != gemmPadSentinel {
			t.Fatalf("%v: wrote C[%d], past its end %d", tc, i, cLen)
		}
	}
	const eps = 1.0 / (1 << 23)
	for i := 0; i < tc.m; i++ {
		for j := 0; j < o.ldc; j++ {
			idx := i*o.ldc + j
			if j >= tc.n {
				if got[idx] != gemmPadSentinel {
					t.Fatalf("%v: padding C[%d][%d] written: %g", tc, i, j, got[idx])
				}
				continue
			}
			bound := (float64(tc.k) + 2) * eps * gemmAbsBound(tc, o, i, j)
			if diff := math.Abs(float64(got[idx]) - float64(want[idx])); !(diff <= bound) {
				t.Fatalf("%v: C[%d][%d] = %g, want %g (diff %g > bound %g)", tc, i, j, got[idx], want[idx], diff, bound)
			}
		}
	}
}

// gemmAbsBound returns |alpha|·Σ_p |op(A)[i][p]·op(B)[p][j]| + |beta·C[i][j]| + tiny.
func gemmAbsBound(tc gemmCase, o gemmOperands, i, j int) float64 {
	var s float64
	for p := 0; p < tc.k; p++ {
		ai, bi := i*o.lda+p, p*o.ldb+j
		if tc.transA {
			ai = p*o.lda + i
		}
		if tc.transB {
			bi = j*o.ldb + p
		}
		av, bv := o.a[ai], o.b[bi]
		s += math.Abs(float64(av) * float64(bv))
	}
	s *= math.Abs(float64(tc.alpha))
	if tc.beta != 0 {
		s += math.Abs(float64(tc.beta) * float64(o.c[i*o.ldc+j]))
	}
	return s + 1e-30
}

// gemmSmallBlocking returns a copy of kern with tiny cache blocks, so that cheap
// sizes cross every block boundary (kc, mc, nc) of the loop nest.
func gemmSmallBlocking(kern *gemmKernel) *gemmKernel {
	k := *kern
	k.kc, k.mc, k.nc = 7, 2*k.mr, 2*k.nr
	k.name += "-smallblocks"
	return &k
}

func gemmTestKernels() []*gemmKernel {
	var ks []*gemmKernel
	for _, k := range gemmKernels {
		ks = append(ks, k, gemmSmallBlocking(k))
	}
	return ks
}

func TestSgemmAwkwardSizes(t *testing.T) {
	sizes := []int{1, 7, 13, 31, 33, 65}
	if testing.Short() {
		sizes = []int{1, 7, 33}
	}
	for _, kern := range gemmTestKernels() {
		t.Run(kern.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, m := range sizes {
						for _, n := range sizes {
							k := sizes[(m+n)%len(sizes)]
							checkGemm(t, kern, gemmCase{tA, tB, m, n, k, 1, 0, 0}, rng)
						}
					}
				}
			}
		})
	}
}

func TestSgemmAlphaBetaPadding(t *testing.T) {
	// Bottom edges of 13, 1, 1, 1, 5, 8 and 4 rows for the 14-row kernel: its
	// 4-, 8- and 14-row edge kernels with every alpha and beta.
	shapes := [][3]int{{13, 31, 33}, {29, 47, 300}, {127, 65, 257}, {15, 33, 1}, {19, 40, 17}, {22, 33, 9}, {4, 31, 70},
		{29, 64, 300}, {14, 32, 5}, {127, 96, 257}} // whole column panels: A read in place (directTile)
	scalars := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {2.5, -1}, {1, float32(math.Copysign(0, -1))}}
	for _, kern := range gemmTestKernels() {
		t.Run(kern.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			for _, sh := range shapes {
				for i, ab := range scalars {
					tA, tB := i&1 == 1, i&2 == 2
					for _, pad := range []int{0, 3} {
						checkGemm(t, kern, gemmCase{tA, tB, sh[0], sh[1], sh[2], ab[0], ab[1], pad}, rng)
					}
				}
			}
		})
	}
}

// TestSgemmParallel covers the sizes that run on several goroutines: row
// blocks with a shared packed B, and the column split for few rows.
func TestSgemmParallel(t *testing.T) {
	cases := []gemmCase{
		{false, true, 257, 131, 65, 1, 0, 1},   // fwd-like, several row blocks
		{false, false, 130, 127, 129, 1, 0, 0}, // dX-like
		{true, false, 127, 129, 131, -1, 1, 2}, // dW-like, accumulate
		{true, true, 31, 1100, 64, 0.5, 0.25, 0},
		{false, false, 7, 2100, 80, 1, 0, 0}, // column split, crosses nc
	}
	for _, kern := range gemmKernels {
		t.Run(kern.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			for _, tc := range cases {
				if tc.m*tc.n*tc.k < parallelGemmWork {
					t.Fatalf("%v is below parallelGemmWork", tc)
				}
				checkGemm(t, kern, tc, rng)
			}
		})
	}
}

func TestSgemmBetaZeroIgnoresNaN(t *testing.T) {
	for _, kern := range gemmKernels {
		for _, sz := range [][3]int{{3, 5, 7}, {40, 70, 300}} {
			m, n, k := sz[0], sz[1], sz[2]
			rng := rand.New(rand.NewPCG(7, 8))
			a, b := gemmRandSlice(rng, m*k), gemmRandSlice(rng, k*n)
			c := make([]float32, m*n)
			for i := range c {
				c[i] = float32(math.NaN())
			}
			g := gemmArgs{false, false, m, n, k, 1, a, k, b, n, 0, c, n, 0}
			sgemm(kern, &g)
			for i, v := range c {
				if v != v {
					t.Fatalf("%s %v: C[%d] is NaN with beta=0", kern.name, sz, i)
				}
			}
		}
	}
}

func TestSgemmDegenerate(t *testing.T) {
	c := []float32{1, 2, 3, 4, 5, 6}
	// k = 0: C = beta·C, A and B not read (nil).
	Sgemm(false, false, 2, 3, 0, 1, nil, 1, nil, 3, 2, c, 3)
	if want := []float32{2, 4, 6, 8, 10, 12}; !gemmEqual(c, want) {
		t.Fatalf("k=0: C = %v, want %v", c, want)
	}
	// alpha = 0, beta = 0: C = 0 even over NaN.
	c[4] = float32(math.NaN())
	Sgemm(true, true, 2, 3, 4, 0, nil, 1, nil, 1, 0, c, 3)
	if want := make([]float32, 6); !gemmEqual(c, want) {
		t.Fatalf("alpha=0: C = %v, want zeros", c)
	}
	// m = 0 or n = 0: nothing happens.
	Sgemm(false, false, 0, 3, 2, 1, nil, 2, nil, 3, 1, nil, 3)
	Sgemm(false, false, 2, 0, 2, 1, nil, 2, nil, 1, 1, c, 1)
}

func gemmEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSgemmRejectsBadArguments(t *testing.T) {
	a, b, c := make([]float32, 12), make([]float32, 12), make([]float32, 12)
	cases := []struct {
		name string
		call func()
		want string
	}{
		{"negative m", func() { Sgemm(false, false, -1, 3, 4, 1, a, 4, b, 3, 0, c, 3) }, "negative"},
		{"short C", func() { Sgemm(false, false, 5, 3, 2, 1, a, 2, b, 3, 0, c, 3) }, "C is 5×3"},
		{"short A", func() { Sgemm(false, false, 3, 3, 5, 1, a, 5, b[:0], 3, 0, c, 3) }, "A is 3×5"},
		{"short B transB", func() { Sgemm(false, true, 3, 4, 4, 1, a, 4, b, 4, 0, c, 4) }, "B is 4×4"},
		{"small lda", func() { Sgemm(true, false, 3, 3, 2, 1, a, 2, b, 3, 0, c, 3) }, "ldA=2"},
		{"small ldc", func() { Sgemm(false, false, 2, 3, 2, 1, a, 2, b, 3, 0, c, 2) }, "ldC=2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("panic %v, want an error containing %q", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

// TestCPUFeaturesMatchOS compares the CPUID reading with the flags Linux reports.
func TestCPUFeaturesMatchOS(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	var flags map[string]bool
	for _, line := range strings.Split(string(info), "\n") {
		if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			flags = map[string]bool{}
			for _, f := range strings.Fields(val) {
				flags[f] = true
			}
			break
		}
	}
	if flags == nil {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	if want := flags["avx2"] && flags["fma"]; cpu.avx2FMA != want {
		t.Errorf("avx2FMA = %v, /proc/cpuinfo says %v", cpu.avx2FMA, want)
	}
	if want := flags["avx512f"] && flags["avx2"] && flags["fma"]; cpu.avx512F != want {
		t.Errorf("avx512F = %v, /proc/cpuinfo says %v", cpu.avx512F, want)
	}
	t.Logf("gemm kernels: %v", gemmKernelNames())
}

func gemmKernelNames() []string {
	var names []string
	for _, k := range gemmKernels {
		names = append(names, k.name)
	}
	return names
}

// TestGemmPackersMatchPortable checks each kernel's assembly packers against
// the portable packing loops, including the zero padding of partial panels.
func TestGemmPackersMatchPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, kern := range gemmKernels {
		plain := *kern
		plain.packRowsA, plain.packRowsB, plain.packDepthA, plain.packDepthB = nil, nil, nil, nil
		for _, trans := range []bool{false, true} {
			for _, sz := range [][3]int{{1, 1, 1}, {13, 31, 17}, {29, 65, 40}, {42, 96, 33}} {
				m, n, k := sz[0], sz[1], sz[2]
				g := gemmArgs{transA: trans, transB: trans, m: m, n: n, k: k, lda: k + 1, ldb: n + 2}
				if trans {
					g.lda, g.ldb = m+1, k+2
				}
				g.a, g.b = gemmRandSlice(rng, (m+k)*g.lda), gemmRandSlice(rng, (n+k)*g.ldb)
				mcp, ncp := roundUp(m, kern.mr), roundUp(n, kern.nr)
				for _, kc := range []int{k, k / 2} {
					kc = max(kc, 1)
					got, want := make([]float32, mcp*kc), make([]float32, mcp*kc)
					for i := range got {
						got[i], want[i] = 7, 7 // packing must overwrite everything
					}
					packA(got, &g, kern, 0, m, k-kc, kc)
					packA(want, &g, &plain, 0, m, k-kc, kc)
					if !gemmEqual(got, want) {
						t.Fatalf("%s: packA trans=%v %v kc=%d differs", kern.name, trans, sz, kc)
					}
					got, want = make([]float32, ncp*kc), make([]float32, ncp*kc)
					packB(got, &g, kern, k-kc, kc, 0, n)
					packB(want, &g, &plain, k-kc, kc, 0, n)
					if !gemmEqual(got, want) {
						t.Fatalf("%s: packB trans=%v %v kc=%d differs", kern.name, trans, sz, kc)
					}
				}
			}
		}
	}
}

// TestSgemmConcurrentCalls runs products of several sizes from several
// goroutines at once: each call must use its own packing buffers.
func TestSgemmConcurrentCalls(t *testing.T) {
	cases := []gemmCase{
		{false, true, 130, 97, 80, 1, 0, 0},
		{true, false, 45, 200, 130, 1, 1, 1},
		{false, false, 7, 1100, 140, 2, 0, 0},
		{true, true, 29, 33, 65, 1, 0.5, 0},
	}
	errs := make(chan error, len(cases))
	for i, tc := range cases {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			o := newGemmOperands(tc, rng)
			got, want := append([]float32(nil), o.c...), append([]float32(nil), o.c...)
			for range 3 {
				copy(got, o.c)
				Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, got, o.ldc)
			}
			SgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, want, o.ldc)
			for j := range got {
				if d := math.Abs(float64(got[j] - want[j])); d > 1e-3*(1+math.Abs(float64(want[j]))) {
					errs <- fmt.Errorf("%v: C[%d] = %g, want %g", tc, j, got[j], want[j])
					return
				}
			}
			errs <- nil
		}()
	}
	for range cases {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// FuzzSgemm checks every kernel against SgemmRef on fuzzer-chosen shapes,
// transpositions, scalars and padding (sizes bounded to keep each input fast).
func FuzzSgemm(f *testing.F) {
	f.Add(uint8(13), uint8(31), uint8(33), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(1), uint8(1), uint8(1), uint8(3), uint8(2), uint64(2))
	f.Add(uint8(29), uint8(65), uint8(17), uint8(1), uint8(5), uint64(3))
	f.Add(uint8(70), uint8(7), uint8(0), uint8(2), uint8(1), uint64(4))
	f.Fuzz(func(t *testing.T, m, n, k, flags, pad uint8, seed uint64) {
		tc := gemmCase{
			transA: flags&1 != 0, transB: flags&2 != 0,
			m: int(m % 72), n: int(n % 72), k: int(k % 72),
			alpha: []float32{1, -0.5, 0, 2}[flags>>2&3],
			beta:  []float32{0, 1, 0.5, -2}[flags>>4&3],
			pad:   int(pad % 8),
		}
		if tc.m == 0 || tc.n == 0 {
			return // C is empty: nothing to compare
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		for _, kern := range gemmTestKernels() {
			checkGemm(t, kern, tc, rng)
		}
	})
}

// TestWorkersSameBits: a product big enough to be split over goroutines, and
// the attention kernels, give the same bits on one goroutine as on several
// (threads split rows, columns or heads, never a sum).
func TestWorkersSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	m, n, k := 301, 257, 129 // above parallelGemmWork, awkward edges
	a, b := randSlice(r, m*k, 1), randSlice(r, k*n, 1)
	c1, c3 := make([]float32, m*n), make([]float32, m*n)
	Workers(1).Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c1, n)
	Workers(3).Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c3, n)
	if !slices.Equal(c1, c3) {
		t.Fatal("Sgemm: one worker and three differ")
	}
	B, T, H, KVH, hd := 2, 37, 4, 2, 16
	W := (H + 2*KVH) * hd
	qkv, dout := randSlice(r, B*T*W, 1), randSlice(r, B*T*H*hd, 1)
	out := [2][]float32{make([]float32, B*T*H*hd), make([]float32, B*T*H*hd)}
	lse := [2][]float32{make([]float32, B*H*T), make([]float32, B*H*T)}
	dqkv := [2][]float32{make([]float32, B*T*W), make([]float32, B*T*W)}
	for i, w := range []Workers{1, 3} {
		w.AttentionForward(out[i], lse[i], qkv, B, T, H, KVH, hd)
		w.AttentionBackward(dqkv[i], dout, out[i], lse[i], qkv, B, T, H, KVH, hd)
	}
	if !slices.Equal(out[0], out[1]) || !slices.Equal(lse[0], lse[1]) || !slices.Equal(dqkv[0], dqkv[1]) {
		t.Fatal("attention: one worker and three differ")
	}
}
