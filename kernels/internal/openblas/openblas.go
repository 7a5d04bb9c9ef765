//go:build openblas && cgo

package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>

char* openblas_get_corename(void);
int openblas_get_num_threads(void);
*/
import "C"

import "fmt"

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices with
// cblas_sgemm(CblasRowMajor, ...), with the same arguments as kernels.Sgemm.
// It panics when a slice is too short for the matrix it holds, since OpenBLAS
// would read or write outside it.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	ar, ac, br, bc := m, k, k, n
	if transA {
		ar, ac = ac, ar
	}
	if transB {
		br, bc = bc, br
	}
	need := func(name string, s []float32, rows, cols, ld int) {
		if rows > 0 && cols > 0 && (ld < cols || len(s) < (rows-1)*ld+cols) {
			panic(fmt.Sprintf("openblas: Sgemm: %s is %d×%d with ld=%d, has %d elements", name, rows, cols, ld, len(s)))
		}
	}
	need("A", a, ar, ac, lda)
	need("B", b, br, bc, ldb)
	need("C", c, m, n, ldc)
	ta, tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	var pa, pb *C.float
	if k > 0 {
		pa, pb = (*C.float)(&a[0]), (*C.float)(&b[0])
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), pa, C.blasint(lda), pb, C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

// CoreName reports the CPU kernel family OpenBLAS chose, e.g. "SkylakeX" or "Haswell".
func CoreName() string { return C.GoString(C.openblas_get_corename()) }

// Threads reports how many threads OpenBLAS uses.
func Threads() int { return int(C.openblas_get_num_threads()) }
