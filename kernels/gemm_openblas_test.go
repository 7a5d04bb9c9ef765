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
