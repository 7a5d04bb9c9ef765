package kernels

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, with the
// same meaning as BLAS cblas_sgemm(CblasRowMajor, ...):
//
//	op(A) is m×k: A is m×k with leading dimension lda (transA=false) or k×m (transA=true)
//	op(B) is k×n: B is k×n with leading dimension ldb (transB=false) or n×k (transB=true)
//	C is m×n with leading dimension ldc
//
// When beta == 0, C is not read (NaNs in C do not propagate).
// Sgemm may use several goroutines; it returns when C is complete.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	SgemmRef(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmRef is the simple reference for Sgemm: a triple loop accumulating in
// float64. It is slow and exists to check the fast version.
func SgemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, p int) float32 {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) float32 {
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(at(i, p)) * float64(bt(p, j))
			}
			v := float32(float64(alpha) * s)
			if beta != 0 {
				v += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = v
		}
	}
}
