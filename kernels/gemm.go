package kernels

import "fmt"

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, with the
// same meaning as BLAS cblas_sgemm(CblasRowMajor, ...):
//
//	op(A) is m×k: A is m×k with leading dimension lda (transA=false) or k×m (transA=true)
//	op(B) is k×n: B is k×n with leading dimension ldb (transB=false) or n×k (transB=true)
//	C is m×n with leading dimension ldc
//
// When beta == 0, C is not read (NaNs in C do not propagate).
// Sgemm may use several goroutines; it returns when C is complete.
//
// Sgemm panics when a dimension is negative, a leading dimension is smaller
// than the row it describes, or a slice is too short for the matrix it holds:
// those are bugs of the caller, and the assembly kernels must never write
// outside C.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Workers(0).Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemm is the package's Sgemm on at most w goroutines. The result does not
// depend on w: threads split rows or columns of C, never the depth.
func (w Workers) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g := gemmArgs{transA: transA, transB: transB, m: m, n: n, k: k,
		alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc, workers: w}
	if err := g.check(); err != nil {
		panic(err)
	}
	sgemm(activeGemm, &g)
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

// gemmArgs holds the arguments of one Sgemm call.
type gemmArgs struct {
	transA, transB bool
	m, n, k        int
	alpha          float32
	a              []float32
	lda            int
	b              []float32
	ldb            int
	beta           float32
	c              []float32
	ldc            int
	workers        Workers // goroutines it may use
}

// check reports whether the dimensions, leading dimensions and slice lengths
// describe matrices that lie inside the given slices.
func (g *gemmArgs) check() error {
	if g.m < 0 || g.n < 0 || g.k < 0 {
		return fmt.Errorf("kernels: Sgemm: negative dimension m=%d n=%d k=%d", g.m, g.n, g.k)
	}
	if err := checkMatrix("C", g.c, g.m, g.n, g.ldc); err != nil {
		return err
	}
	if g.k == 0 || g.alpha == 0 || g.m == 0 || g.n == 0 {
		return nil // A and B are not referenced
	}
	ar, ac := g.m, g.k
	if g.transA {
		ar, ac = ac, ar
	}
	br, bc := g.k, g.n
	if g.transB {
		br, bc = bc, br
	}
	if err := checkMatrix("A", g.a, ar, ac, g.lda); err != nil {
		return err
	}
	return checkMatrix("B", g.b, br, bc, g.ldb)
}

// checkMatrix checks that a rows×cols row-major matrix with leading dimension
// ld fits in s.
func checkMatrix(name string, s []float32, rows, cols, ld int) error {
	if ld < max(1, cols) {
		return fmt.Errorf("kernels: Sgemm: ld%s=%d < max(1, %d columns)", name, ld, cols)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if need := (rows-1)*ld + cols; len(s) < need {
		return fmt.Errorf("kernels: Sgemm: %s is %d×%d with ld=%d: needs %d elements, has %d",
			name, rows, cols, ld, need, len(s))
	}
	return nil
}

// smallGemmWork is the m·n·k below which Sgemm skips packing and runs a plain
// loop: for tiny products, copying operands into panels costs more than it saves.
const smallGemmWork = 2048

// sgemm runs a checked call with the given micro-kernel.
func sgemm(kern *gemmKernel, g *gemmArgs) {
	if g.m == 0 || g.n == 0 {
		return
	}
	if g.k == 0 || g.alpha == 0 {
		scaleMatrix(g.c, g.m, g.n, g.ldc, g.beta)
		return
	}
	if g.m*g.n*g.k < smallGemmWork {
		sgemmSmall(g)
		return
	}
	sgemmPacked(kern, g)
}

// scaleMatrix sets C = beta·C, writing zeros without reading C when beta == 0.
func scaleMatrix(c []float32, m, n, ldc int, beta float32) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		if beta == 1 {
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// sgemmSmall computes a small product directly with dot products in float32,
// without packing or goroutines.
func sgemmSmall(g *gemmArgs) {
	sai, sap := g.lda, 1 // A(i,p) = a[i*sai + p*sap]
	if g.transA {
		sai, sap = 1, g.lda
	}
	sbp, sbj := g.ldb, 1 // B(p,j) = b[p*sbp + j*sbj]
	if g.transB {
		sbp, sbj = 1, g.ldb
	}
	for i := 0; i < g.m; i++ {
		row := g.c[i*g.ldc : i*g.ldc+g.n]
		for j := range row {
			var s float32
			ai, bj := i*sai, j*sbj
			for p := 0; p < g.k; p++ {
				s += g.a[ai+p*sap] * g.b[p*sbp+bj]
			}
			if g.beta == 0 {
				row[j] = g.alpha * s
			} else {
				row[j] = g.alpha*s + g.beta*row[j]
			}
		}
	}
}
