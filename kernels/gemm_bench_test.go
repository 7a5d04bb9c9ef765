package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// gemmShape is one benchmarked product.
type gemmShape struct {
	name           string
	transA, transB bool
	m, n, k        int
	beta           float32
}

// gemmShapes are the training shapes of a 4096×512 · 512×2048 layer,
// a square product, attention-sized tiles (kernels/attention.go calls Sgemm
// per tile of queries) and small squares.
var gemmShapes = []gemmShape{
	{"fwd", false, true, 4096, 2048, 512, 0}, // Y = X·Wᵀ
	{"dX", false, false, 4096, 512, 2048, 0}, // dX = dY·W
	{"dW", true, false, 2048, 512, 4096, 1},  // dW += dYᵀ·X
	{"sq1024", false, false, 1024, 1024, 1024, 0},
	// Attention tiles of the small preset (64 queries, 256 keys, head dim 64).
	{"att-S", false, true, 64, 256, 64, 0},  // S = Q·Kᵀ
	{"att-O", false, false, 64, 64, 256, 0}, // O = P·V
	{"att-dK", true, false, 256, 64, 64, 1}, // dK += dSᵀ·Q
	{"sq256", false, true, 256, 256, 256, 0},
	{"sq64", false, false, 64, 64, 64, 0},
	{"sq16", true, false, 16, 16, 16, 1},
}

func (s gemmShape) flops() float64 { return 2 * float64(s.m) * float64(s.n) * float64(s.k) }

// gemmImpl is one Sgemm implementation under benchmark.
type gemmImpl struct {
	name string
	call func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// kernelImpl runs Sgemm's checked path with one micro-kernel.
func kernelImpl(kern *gemmKernel) gemmImpl {
	return gemmImpl{name: kern.name, call: func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
		g := gemmArgs{transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0}
		if err := g.check(); err != nil {
			panic(err)
		}
		sgemm(kern, &g)
	}}
}

// gemmBaseline is the implementation the comparison table divides by: OpenBLAS
// when built with -tags openblas (gemm_openblas_test.go), else the AVX2
// kernel (or the portable one).
var gemmBaseline = func() gemmImpl {
	if k := gemmKernelByName("avx2"); k != nil && k != activeGemm {
		return kernelImpl(k)
	}
	return kernelImpl(goGemm)
}()

// gemmBenchData holds the operands of one shape.
type gemmBenchData struct {
	a, b, c       []float32
	lda, ldb, ldc int
}

func newGemmBenchData(s gemmShape) gemmBenchData {
	rng := rand.New(rand.NewPCG(11, 12))
	d := gemmBenchData{lda: s.k, ldb: s.n, ldc: s.n}
	if s.transA {
		d.lda = s.m
	}
	if s.transB {
		d.ldb = s.k
	}
	d.a, d.b = gemmRandSlice(rng, s.m*s.k), gemmRandSlice(rng, s.k*s.n)
	d.c = gemmRandSlice(rng, s.m*s.n)
	return d
}

func (d gemmBenchData) run(impl gemmImpl, s gemmShape) {
	impl.call(s.transA, s.transB, s.m, s.n, s.k, 1, d.a, d.lda, d.b, d.ldb, s.beta, d.c, d.ldc)
}

// BenchmarkGemm measures each shape with each micro-kernel this CPU runs
// (the portable one only on small shapes), the baseline, and SgemmRef (small
// shapes only), in GFLOP/s.
func BenchmarkGemm(b *testing.B) {
	impls := []gemmImpl{}
	for _, k := range gemmKernels {
		impls = append(impls, kernelImpl(k))
	}
	if !slices.ContainsFunc(impls, func(i gemmImpl) bool { return i.name == gemmBaseline.name }) {
		impls = append(impls, gemmBaseline)
	}
	impls = append(impls, gemmImpl{name: "ref", call: SgemmRef})
	for _, s := range gemmShapes {
		d := newGemmBenchData(s)
		for _, impl := range impls {
			if (impl.name == "go" && s.flops() > 1e9) || (impl.name == "ref" && s.flops() > 1e8) {
				continue // seconds to minutes per op
			}
			b.Run(s.name+"/"+impl.name, func(b *testing.B) {
				for b.Loop() {
					d.run(impl, s)
				}
				b.ReportMetric(s.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGemmTable prints, per shape, the median GFLOP/s of Sgemm and of
// the baseline over interleaved rounds (the machine is shared, so the two
// are measured side by side), and their ratio; then the same per CPU-second
// of the process, which other load on the machine disturbs less (but which
// charges a library for threads that spin while they wait).
// Rounds: GEMM_ROUNDS (7); shapes: GEMM_SHAPES (comma-separated names, all).
// Run it once: -run XXX -bench GemmTable -benchtime 1x.
func BenchmarkGemmTable(b *testing.B) {
	rounds := 7
	if v, err := strconv.Atoi(os.Getenv("GEMM_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	ours := gemmImpl{name: "Sgemm", call: Sgemm}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "shape\tm×n×k\tSgemm (%s) GFLOP/s\t%s GFLOP/s\tratio\tSgemm GFLOP/cpu-s\t%s GFLOP/cpu-s\tcpu ratio\t\n",
		activeGemm.name, gemmBaseline.name, gemmBaseline.name)
	only := map[string]bool{}
	for _, name := range strings.Split(os.Getenv("GEMM_SHAPES"), ",") {
		if name != "" {
			only[name] = true
		}
	}
	for range b.N {
		for _, s := range gemmShapes {
			if len(only) > 0 && !only[s.name] {
				continue
			}
			d := newGemmBenchData(s)
			o, base := interleavedMedians(d, s, ours, gemmBaseline, rounds)
			fmt.Fprintf(tw, "%s\t%d×%d×%d\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%.3f\t\n",
				s.name, s.m, s.n, s.k, o.wall, base.wall, o.wall/base.wall, o.cpu, base.cpu, o.cpu/base.cpu)
			b.ReportMetric(o.wall/base.wall, s.name+"-ratio")
		}
	}
	tw.Flush()
}

// gemmTiming is the median speed of one implementation over interleaved rounds.
type gemmTiming struct {
	wall float64 // GFLOP per second of wall time
	cpu  float64 // GFLOP per CPU-second of the whole process (0 if unknown)
}

// interleavedMedians times x and y alternately (order swapped every round)
// and returns the median speeds of each.
func interleavedMedians(d gemmBenchData, s gemmShape, x, y gemmImpl, rounds int) (gemmTiming, gemmTiming) {
	reps := max(1, int(0.02e9/s.flops()*200)) // ≈ 20 ms of work at 200 GFLOP/s
	measure := func(impl gemmImpl) (float64, float64) {
		d.run(impl, s) // warm caches and buffer pools
		start, cpu0 := time.Now(), processCPUTime()
		for range reps {
			d.run(impl, s)
		}
		work := s.flops() * float64(reps) / 1e9
		wall, cpu := time.Since(start).Seconds(), (processCPUTime() - cpu0).Seconds()
		if cpu <= 0 {
			return work / wall, 0
		}
		return work / wall, work / cpu
	}
	var xw, xc, yw, yc []float64
	for r := range rounds {
		for i := range 2 {
			impl, w, c := x, &xw, &xc
			if (r+i)%2 == 1 {
				impl, w, c = y, &yw, &yc
			}
			a, b := measure(impl)
			*w, *c = append(*w, a), append(*c, b)
		}
	}
	return gemmTiming{median(xw), median(xc)}, gemmTiming{median(yw), median(yc)}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkGemmMicroKernel measures each micro-kernel alone on packed panels
// that stay in L1 (kc = its block depth): the ceiling of the blocked product.
func BenchmarkGemmMicroKernel(b *testing.B) {
	for _, kern := range gemmKernels {
		b.Run(kern.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(13, 14))
			ap, bp := gemmRandSlice(rng, kern.mr*kern.kc), gemmRandSlice(rng, kern.nr*kern.kc)
			c := make([]float32, kern.mr*kern.nr)
			flops := 2 * float64(kern.mr*kern.nr*kern.kc)
			reportCPU(b, flops, func() { kern.tile(kern.kc, ap, bp, c, kern.nr, 1, 1) })
		})
	}
}

// BenchmarkGemmPack measures packing one mc×kc block of A and one kc×nc
// block of B for both orientations, in GB of packed output per second.
func BenchmarkGemmPack(b *testing.B) {
	kern := activeGemm
	rng := rand.New(rand.NewPCG(15, 16))
	const rows, depth = 4096, 512
	src := gemmRandSlice(rng, rows*depth)
	for _, trans := range []bool{false, true} {
		// A is m×k (ld k) or k×m (ld m); B is k×n (ld n) or n×k (ld k).
		g := gemmArgs{transA: trans, transB: trans, m: rows, n: rows, k: depth, a: src, b: src, lda: depth, ldb: rows}
		if trans {
			g.lda, g.ldb = rows, depth
		}
		dst := make([]float32, max(kern.mc, kern.nc)*kern.kc)
		b.Run(fmt.Sprintf("A/trans=%v", trans), func(b *testing.B) {
			reportWork(b, float64(4*kern.mc*kern.kc), "GB", func() { packA(dst, &g, kern, 0, kern.mc, 0, kern.kc) })
		})
		b.Run(fmt.Sprintf("B/trans=%v", trans), func(b *testing.B) {
			reportWork(b, float64(4*kern.nc*kern.kc), "GB", func() { packB(dst, &g, kern, 0, kern.kc, 0, kern.nc) })
		})
	}
}

// reportCPU runs f b.N times on one locked OS thread and reports GFLOP/s by
// wall time and by the thread's CPU time (robust to other load on the box).
func reportCPU(b *testing.B, flops float64, f func()) {
	reportWork(b, flops, "GFLOP", f)
}

// reportWork runs f b.N times on one locked OS thread and reports
// giga-units of work per second of wall time and per second of the
// thread's CPU time.
func reportWork(b *testing.B, work float64, unit string, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPUTime()
	for b.Loop() {
		f()
	}
	b.ReportMetric(work*float64(b.N)/b.Elapsed().Seconds()/1e9, unit+"/s")
	if cpu := threadCPUTime() - start; cpu > 0 {
		b.ReportMetric(work*float64(b.N)/cpu.Seconds()/1e9, unit+"/cpu-s")
	}
}

// BenchmarkLaneProducts runs, on one goroutine, the 51 products one training
// lane does per step on the training-step benchmark shape (128 tokens per lane,
// C=256, FFN 704, vocab 512, 4 layers: forward, dX and dW of every weight)
// and reports their GFLOP/s and that rate over the single-core FMA peak
// measured in the same run (x-fma-peak): the ceiling of the trainer's products.
func BenchmarkLaneProducts(b *testing.B) {
	const M, layers = 128, 4
	type weight struct{ out, in int }
	var ws []weight
	for l := 0; l < layers; l++ {
		ws = append(ws, weight{768, 256}, weight{256, 256}, weight{1408, 256}, weight{256, 704})
	}
	ws = append(ws, weight{512, 256}) // output head
	rng := rand.New(rand.NewPCG(23, 24))
	type bufs struct{ w, dw, x, y, dy, dx []float32 }
	var bs []bufs
	var flops float64
	for _, w := range ws {
		bs = append(bs, bufs{w: gemmRandSlice(rng, w.out*w.in), dw: make([]float32, w.out*w.in),
			x: gemmRandSlice(rng, M*w.in), y: make([]float32, M*w.out),
			dy: gemmRandSlice(rng, M*w.out), dx: make([]float32, M*w.in)})
		flops += 3 * 2 * float64(M*w.out*w.in)
	}
	one := Workers(1)
	run := func() {
		for i, w := range ws { // forward, in layer order
			s := bs[i]
			one.Sgemm(false, true, M, w.out, w.in, 1, s.x, w.in, s.w, w.in, 0, s.y, w.out)
		}
		for i := len(ws) - 1; i >= 0; i-- { // backward: dX, then dW
			w, s := ws[i], bs[i]
			one.Sgemm(false, false, M, w.in, w.out, 1, s.dy, w.out, s.w, w.in, 0, s.dx, w.in)
			one.Sgemm(true, false, w.out, w.in, M, 1, s.dy, w.out, s.x, w.in, 0, s.dw, w.in)
		}
	}
	peak := FMAPeak(1)
	reportCPU(b, flops, run)
	if peak > 0 {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9/peak, "x-fma-peak")
	}
}
