//go:build openblas && cgo

package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/intellect-node/intellect-node/kernels/internal/openblas"
)

func init() {
	gemmBaseline = gemmImpl{name: "OpenBLAS-" + openblas.CoreName(), call: openblas.Sgemm}
	fmt.Printf("OpenBLAS core %s, %d threads\n", openblas.CoreName(), openblas.Threads())
}

// TestSgemmMatchesOpenBLAS checks Sgemm against OpenBLAS on the training shapes.
func TestSgemmMatchesOpenBLAS(t *testing.T) {
	for _, s := range gemmShapes {
		d := newGemmBenchData(s)
		want := append([]float32(nil), d.c...)
		openblas.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, d.a, d.lda, d.b, d.ldb, s.beta, want, d.ldc)
		d.run(gemmImpl{call: Sgemm}, s)
		var worst float64
		for i := range want {
			worst = max(worst, math.Abs(float64(d.c[i]-want[i])))
		}
		// Entries are sums of k products of N(0,1) values: |C| ~ √k.
		if bound := 1e-5 * float64(s.k); !(worst <= bound) {
			t.Errorf("%s: max |Sgemm − OpenBLAS| = %g > %g", s.name, worst, bound)
		}
	}
}

// stepProducts are the products of one optimizer step of train's
// BenchmarkTrainStep shape (L=4, C=256, 4 heads of 64, FFN 704, vocab 512,
// B=4 × T=64 = 256 tokens), done on the whole batch: per layer the forward
// X·Wᵀ, dX = dY·W and dW += dYᵀ·X of q|k|v, o, gate|up and down, plus the
// output head once. Attention's own small products are left out.
var stepProducts = func() (ps []struct {
	s     gemmShape
	count int
}) {
	const N, C, F, V, L = 256, 256, 704, 512, 4
	add := func(name string, out, in, count int) {
		ps = append(ps,
			struct {
				s     gemmShape
				count int
			}{gemmShape{name + "-fwd", false, true, N, out, in, 0}, count},
			struct {
				s     gemmShape
				count int
			}{gemmShape{name + "-dX", false, false, N, in, out, 0}, count},
			struct {
				s     gemmShape
				count int
			}{gemmShape{name + "-dW", true, false, out, in, N, 1}, count})
	}
	add("qkv", 3*C, C, L)
	add("o", C, C, L)
	add("gu", 2*F, C, L)
	add("down", C, F, L)
	add("lm", V, C, 1)
	return ps
}()

// BenchmarkStepProductsBound times the products of one training step
// (stepProducts) with OpenBLAS and with Sgemm on all threads, in the same run,
// and reports the model GFLOP/s the whole step could reach if everything
// but these products were free: the step's FLOPs (products + causal
// attention, as train.Config.StepFLOPs) / their time. That bounds what any
// trainer built on either GEMM can print in BenchmarkTrainStep on this
// machine (docs/results.md).
func BenchmarkStepProductsBound(b *testing.B) {
	const T, heads, hd, L, tokens = 64, 4, 64, 4, 256
	var prodFlops float64
	for _, p := range stepProducts {
		prodFlops += float64(p.count) * p.s.flops()
	}
	stepFlops := prodFlops + 6*float64(L*4*heads*hd)*T*(T+1)
	for _, impl := range []gemmImpl{gemmBaseline, {name: "Sgemm", call: Sgemm}} {
		b.Run(impl.name, func(b *testing.B) {
			data := make([]gemmBenchData, len(stepProducts))
			for i, p := range stepProducts {
				data[i] = newGemmBenchData(p.s)
			}
			for b.Loop() {
				for i, p := range stepProducts {
					for range p.count {
						data[i].run(impl, p.s)
					}
				}
			}
			per := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(per*1e3, "ms/step-products")
			b.ReportMetric(prodFlops/per/1e9, "products-GFLOP/s")
			b.ReportMetric(stepFlops/per/1e9, "step-bound-GFLOP/s")
		})
	}
}
