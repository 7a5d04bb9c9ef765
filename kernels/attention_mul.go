package kernels

import "sync"

// attMul runs the small products of causal attention on the micro-kernels
// directly, block of mr query rows by block: a block of rows multiplies only
// the columns and depths its queries can see. A query at position t sees keys
// 0..t, so of a 64×64 score tile the row blocks need 1–2 of the 2 column
// panels, and P·V, dS·K, dSᵀ·Q and Pᵀ·dO need on average about two thirds of
// the depth — Sgemm would multiply the masked zeros too. Each operand is
// packed once per job (K, Kᵀ, V, Vᵀ for all keys; Q and dO per query tile)
// instead of once per product.
//
// The products are bit for bit those of Sgemm over the full extents: the
// kernels accumulate each entry in depth order, and the depths skipped hold
// exact zeros (masked probabilities and score gradients).
type attMul struct {
	kern *gemmKernel
	ap   []float32   // one packed panel of A (mr × depth)
	t    []float32   // an mr×nr tile for kernels without an edge kernel
	bufs [][]float32 // scratch, reused by the next job that takes m from the pool
	used int         // bufs handed out by scratch since newAttMul
}

// attMulPool recycles attMuls with their scratch, so a training step does not
// allocate.
var attMulPool sync.Pool // of *attMul

// newAttMul returns an attMul for kern whose A panels hold up to maxDepth depths.
func newAttMul(kern *gemmKernel, maxDepth int) *attMul {
	m, _ := attMulPool.Get().(*attMul)
	if m == nil {
		m = &attMul{}
	}
	m.kern, m.used = kern, 0
	m.ap = grow(m.ap, kern.mr*maxDepth)
	m.t = grow(m.t, kern.mr*kern.nr)
	return m
}

// free returns m and its scratch to the pool.
func (m *attMul) free() { attMulPool.Put(m) }

// scratch returns n floats with arbitrary contents, owned by m until free.
func (m *attMul) scratch(n int) []float32 {
	if m.used == len(m.bufs) {
		m.bufs = append(m.bufs, nil)
	}
	m.bufs[m.used] = grow(m.bufs[m.used], n)
	m.used++
	return m.bufs[m.used-1]
}

func (m *attMul) mr() int { return m.kern.mr }

// roundCols is n rounded up to whole column panels.
func (m *attMul) roundCols(n int) int { return roundUp(n, m.kern.nr) }

// cols is how many columns a row block whose last query sees keys [0, kend)
// computes: whole panels, up to the row width w. The extra keys are masked
// afterwards.
func (m *attMul) cols(kend, w int) int { return min(m.roundCols(kend), w) }

// packB packs op(B) (k×n; B is b with rows ldb floats apart, transposed when
// transB) into new scratch: panels of nr columns, each k depths deep.
func (m *attMul) packB(b []float32, ldb int, transB bool, k, n int) []float32 {
	dst := m.scratch(k * m.roundCols(n))
	m.packBInto(dst, b, ldb, transB, k, n)
	return dst
}

// packBInto is packB into dst.
func (m *attMul) packBInto(dst, b []float32, ldb int, transB bool, k, n int) {
	g := gemmArgs{transB: transB, b: b, ldb: ldb, k: k, n: n}
	packB(dst, &g, m.kern, 0, k, 0, n)
}

// rows sets C[i0:i0+rows, 0:n] = alpha·op(A)[i0:i0+rows, d0:d1]·op(B)[d0:d1, 0:n]
// + beta·C, where bp holds op(B) packed by packB with depth kb ≥ d1 and at
// least n columns; op(A) is a (rows lda floats apart), transposed when transA.
// Depths outside [d0, d1) are taken as zero.
func (m *attMul) rows(a []float32, lda int, transA bool, i0, rows, d0, d1 int, bp []float32, kb, n int, c []float32, ldc int, alpha, beta float32) {
	kern := m.kern
	mr, nr := kern.mr, kern.nr
	kc := d1 - d0
	direct := kern.directTile != nil && !transA && rows == mr
	packed := false
	for j := 0; j < n; j += nr {
		cols := min(nr, n-j)
		bpanel := bp[j*kb+d0*nr : j*kb+d1*nr]
		off := i0*ldc + j
		if direct && cols == nr {
			kern.directTile(kc, a[i0*lda+d0:], lda, bpanel, c[off:], ldc, alpha, beta)
			continue
		}
		if !packed {
			g := gemmArgs{transA: transA, a: a, lda: lda}
			packA(m.ap, &g, kern, i0, rows, d0, kc)
			packed = true
		}
		switch {
		case rows == mr && cols == nr:
			kern.tile(kc, m.ap, bpanel, c[off:], ldc, alpha, beta)
		case kern.edgeTile != nil:
			kern.edgeTile(kc, m.ap, bpanel, c[off:], ldc, alpha, beta, rows, cols)
		default:
			kern.tile(kc, m.ap, bpanel, m.t, nr, alpha, 0)
			mergeTile(c[off:], ldc, m.t, nr, rows, cols, beta)
		}
	}
}
