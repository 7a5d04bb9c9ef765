package kernels

// gemmKernel is one register-blocked micro-kernel with the cache blocking
// that suits it (Goto/BLIS: a kc×nr panel of B stays in L1, an mc×kc block of
// A in L2, a kc×nc block of B in L2/L3).
type gemmKernel struct {
	name   string // "avx512", "avx2" or "go"
	mr, nr int    // tile: rows of A per panel, columns of B per panel
	kc     int    // most depths per packed block (k is split into equal blocks)
	mc     int    // most rows of A per packed block; a multiple of mr
	aBlock int    // target floats of one packed mc×kc block of A (L2)
	nc     int    // columns of B per packed block; a multiple of nr
	// tile computes the mr×nr tile C = alpha·Ap·Bp + beta·C over kc ≥ 1
	// steps, where Ap holds mr floats per step and Bp nr floats per step.
	// C rows are ldc floats apart; when beta == 0, C is not read.
	tile func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32)
	// packRowsA, when set, packs one panel of a row-major A whose first
	// width ≤ mr rows are valid: dst[p*mr+r] = src[r*ld+p], zero for
	// r ≥ width. It returns false when it cannot (then the portable loop
	// packs). packRowsB does the same for nr rows of Bᵀ.
	packRowsA, packRowsB func(kc int, src []float32, ld, width int, dst []float32) bool
	// packDepthA, when set, packs kc depths of one panel of a transposed A:
	// dst[p*mr+r] = src[p*ld+r] for r < width ≤ mr, zero beyond. packDepthB
	// does the same for nr columns of a row-major B.
	packDepthA, packDepthB func(kc int, src []float32, ld, width int, dst []float32)
	// edgeTile, when set, is tile for a partial tile: it writes only the
	// first rows (≤ mr) rows and cols (≤ nr) columns of C. Without it, edge
	// tiles go through a scratch tile.
	edgeTile func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32, rows, cols int)
	// directTile, when set, is tile reading A unpacked: mr rows of kc floats
	// starting at a, lda floats apart. Products with a row-major A use it
	// for full tiles and pack only their partial last panel.
	directTile func(kc int, a []float32, lda int, bp, c []float32, ldc int, alpha, beta float32)
}

// blocks returns the block sizes for g: the depth k split into equal blocks
// of at most kern.kc, and as many rows per A block (a multiple of mr, at most
// kern.mc) as fit kern.aBlock floats.
func (kern *gemmKernel) blocks(g *gemmArgs) (kc, mc, nc int) {
	nk := (g.k + kern.kc - 1) / kern.kc
	kc = (g.k + nk - 1) / nk
	mc = max(kern.mr, min(kern.mc, kern.aBlock/kc/kern.mr*kern.mr))
	return kc, mc, kern.nc
}

// goGemm is the portable micro-kernel: a 4×4 tile of scalar accumulators,
// few enough to stay in the 16 floating-point registers of amd64.
var goGemm = &gemmKernel{name: "go", mr: 4, nr: 4, kc: 256, mc: 128, aBlock: 128 * 256, nc: 1024, tile: tileGo}

// gemmKernels lists the micro-kernels this machine can run, fastest first.
var gemmKernels = append(archGemmKernels(cpu), goGemm)

// activeGemm is the micro-kernel Sgemm uses. Tests swap it to cover every path.
var activeGemm = gemmKernels[0]

// gemmKernelByName returns the runnable micro-kernel with the given name, or nil.
func gemmKernelByName(name string) *gemmKernel {
	for _, k := range gemmKernels {
		if k.name == name {
			return k
		}
	}
	return nil
}

// tileGo is the portable 4×4 micro-kernel.
func tileGo(kc int, ap, bp, c []float32, ldc int, alpha, beta float32) {
	ap, bp = ap[:4*kc], bp[:4*kc]
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	for p := 0; p < 4*kc; p += 4 {
		a := ap[p : p+4 : p+4]
		b := bp[p : p+4 : p+4]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00, c01, c02, c03 = c00+a0*b0, c01+a0*b1, c02+a0*b2, c03+a0*b3
		c10, c11, c12, c13 = c10+a1*b0, c11+a1*b1, c12+a1*b2, c13+a1*b3
		c20, c21, c22, c23 = c20+a2*b0, c21+a2*b1, c22+a2*b2, c23+a2*b3
		c30, c31, c32, c33 = c30+a3*b0, c31+a3*b1, c32+a3*b2, c33+a3*b3
	}
	storeRow4(c[0*ldc:], alpha, beta, c00, c01, c02, c03)
	storeRow4(c[1*ldc:], alpha, beta, c10, c11, c12, c13)
	storeRow4(c[2*ldc:], alpha, beta, c20, c21, c22, c23)
	storeRow4(c[3*ldc:], alpha, beta, c30, c31, c32, c33)
}

// storeRow4 writes alpha·(s0..s3) + beta·row[0:4] into row, not reading row
// when beta == 0.
func storeRow4(row []float32, alpha, beta, s0, s1, s2, s3 float32) {
	row = row[:4:4]
	if beta == 0 {
		row[0], row[1], row[2], row[3] = alpha*s0, alpha*s1, alpha*s2, alpha*s3
		return
	}
	row[0] = alpha*s0 + beta*row[0]
	row[1] = alpha*s1 + beta*row[1]
	row[2] = alpha*s2 + beta*row[2]
	row[3] = alpha*s3 + beta*row[3]
}
