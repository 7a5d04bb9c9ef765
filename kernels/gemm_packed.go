package kernels

import (
	"sync"
	"sync/atomic"
)

// parallelGemmWork is the m·n·k from which Sgemm splits the work over
// goroutines: below it, waking another thread costs more than it saves.
const parallelGemmWork = 1 << 20

// sgemmPacked computes a product with packed panels, cache blocking and, for
// large products, all GOMAXPROCS threads.
//
// With enough rows, the threads share each packed block of B (they pack it
// together) and take blocks of mc rows of A from a common counter, which
// keeps them balanced when the machine is shared. With fewer blocks of rows
// than threads (m ≤ mc) and many columns, each thread instead takes its own
// range of columns and packs the small A itself.
func sgemmPacked(kern *gemmKernel, g *gemmArgs) {
	workers := 1
	if g.m*g.n*g.k >= parallelGemmWork {
		workers = g.workers.count()
	}
	_, mc, _ := kern.blocks(g)
	rowBlocks := (g.m + mc - 1) / mc
	colPanels := (g.n + kern.nr - 1) / kern.nr
	if workers > 1 && rowBlocks < workers && colPanels >= 2*workers {
		splitColumns(kern, g, workers, colPanels)
		return
	}
	blockedGemm(kern, g, min(workers, rowBlocks))
}

// splitColumns runs workers independent blocked products on column ranges of C.
func splitColumns(kern *gemmKernel, g *gemmArgs, workers, colPanels int) {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		j0 := colPanels * w / workers * kern.nr
		j1 := min(g.n, colPanels*(w+1)/workers*kern.nr)
		sub := g.columns(j0, j1)
		if w == workers-1 {
			blockedGemm(kern, &sub, 1)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			blockedGemm(kern, &sub, 1)
		}()
	}
	wg.Wait()
}

// columns returns the sub-problem that computes columns [j0, j1) of C.
func (g *gemmArgs) columns(j0, j1 int) gemmArgs {
	s := *g
	s.n = j1 - j0
	if s.transB {
		s.b = s.b[j0*s.ldb:]
	} else {
		s.b = s.b[j0:]
	}
	s.c = s.c[j0:]
	return s
}

// gemmBuffers are the packing buffers of one blocked product.
type gemmBuffers struct {
	bp   []float32   // packed kc×nc block of B, shared by the workers
	ap   [][]float32 // packed mc×kc block of A, one per worker
	t    [][]float32 // one mr×nr tile per worker, for the edges of C
	pass gemmPass    // loop state, kept here to save an allocation per call
}

var gemmBufferPool sync.Pool // of *gemmBuffers

// getGemmBuffers returns buffers large enough for the blocks of g with kern
// and workers.
func getGemmBuffers(kern *gemmKernel, g *gemmArgs, workers int) *gemmBuffers {
	bufs, _ := gemmBufferPool.Get().(*gemmBuffers)
	if bufs == nil {
		bufs = new(gemmBuffers)
	}
	kc, mc, nc := kern.blocks(g)
	mc = roundUp(min(mc, g.m), kern.mr)
	nc = roundUp(min(nc, g.n), kern.nr)
	bufs.bp = grow(bufs.bp, kc*nc)
	for len(bufs.ap) < workers {
		bufs.ap = append(bufs.ap, nil)
		bufs.t = append(bufs.t, nil)
	}
	for w := 0; w < workers; w++ {
		bufs.ap[w] = grow(bufs.ap[w], mc*kc)
		bufs.t[w] = grow(bufs.t[w], kern.mr*kern.nr)
	}
	return bufs
}

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

// grow returns s with length n, reallocating when its capacity is too small.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// blockedGemm is the Goto/BLIS loop nest: for each kc×nc block of B, pack it
// (workers together), then let the workers take mc-row blocks of A, pack
// each and multiply it by the packed B block tile by tile.
func blockedGemm(kern *gemmKernel, g *gemmArgs, workers int) {
	bufs := getGemmBuffers(kern, g, workers)
	defer gemmBufferPool.Put(bufs)
	p := &bufs.pass
	p.kern, p.g, p.bufs, p.workers = kern, *g, bufs, workers
	g = &p.g // a copy in the pooled pass, so the caller's arguments stay on its stack
	kcStep, mcStep, ncStep := kern.blocks(g)
	// Cut the rows into a multiple of workers blocks of whole panels, as
	// equal as panels allow, so that the workers finish each pass together.
	p.rowPanels = (g.m + kern.mr - 1) / kern.mr
	p.rowBlocks = roundUp((g.m+mcStep-1)/mcStep, workers)
	p.rowBlocks = min(p.rowBlocks, p.rowPanels)
	defer func() { p.kern, p.g, p.bufs = nil, gemmArgs{}, nil }()
	for p.jc = 0; p.jc < g.n; p.jc += ncStep {
		p.nc = min(ncStep, g.n-p.jc)
		p.panels = (p.nc + kern.nr - 1) / kern.nr
		for p.pc = 0; p.pc < g.k; p.pc += kcStep {
			p.kc = min(kcStep, g.k-p.pc)
			p.beta = g.beta
			if p.pc > 0 {
				p.beta = 1 // later blocks of k accumulate onto the first
			}
			p.next.Store(0)
			p.nextB.Store(0)
			if workers == 1 {
				p.packB(0)
				p.multiply(0)
				continue
			}
			parallel(workers, p.packB)
			parallel(workers, p.multiply)
		}
	}
}

// gemmPass is the state of one blockedGemm call that its workers share: the
// current kc×nc block of B and the counter of row blocks handed out.
type gemmPass struct {
	kern           *gemmKernel
	g              gemmArgs
	bufs           *gemmBuffers
	workers        int
	jc, nc, panels int // current block of columns and its panel count
	pc, kc         int // current block of depths
	rowPanels      int // mr-row panels of C
	rowBlocks      int // blocks of consecutive panels handed out per pass
	beta           float32
	next           atomic.Int64 // next row block to take
	nextB          atomic.Int64 // next chunk of B panels to pack
}

// packChunk is how many panels of B a worker packs per turn.
const packChunk = 4

// packB takes chunks of panels of the current block of B from a common
// counter until none is left and packs them: whichever workers the scheduler
// runs share the packing, so one descheduled thread does not hold it up.
func (p *gemmPass) packB(int) {
	nr := p.kern.nr
	for {
		lo := (int(p.nextB.Add(1)) - 1) * packChunk
		if lo >= p.panels {
			return
		}
		hi := min(lo+packChunk, p.panels)
		packB(p.bufs.bp[lo*p.kc*nr:], &p.g, p.kern, p.pc, p.kc, p.jc+lo*nr, min(p.nc, hi*nr)-lo*nr)
	}
}

// multiply takes row blocks until none is left, packs each into worker w's
// buffer and multiplies it by the packed block of B.
func (p *gemmPass) multiply(w int) {
	for {
		blk := int(p.next.Add(1)) - 1
		if blk >= p.rowBlocks {
			return
		}
		mr := p.kern.mr
		ic := blk * p.rowPanels / p.rowBlocks * mr
		mc := min((blk+1)*p.rowPanels/p.rowBlocks*mr, p.g.m) - ic
		direct, lo := p.direct(), 0
		if direct {
			lo = mc / mr * mr // full panels read A in place: pack only a partial last one
		}
		if lo < mc {
			packA(p.bufs.ap[w], &p.g, p.kern, ic+lo, mc-lo, p.pc, p.kc)
		}
		macroGemm(p.kern, &p.g, p.bufs.ap[w], p.bufs.bp, p.bufs.t[w], ic, mc, p.jc, p.nc, p.pc, p.kc, p.beta, direct)
	}
}

// direct reports whether the full panels of A are read in place by the
// kernel's directTile: A is row-major and no column panel is partial (a
// partial one needs the edge kernel, which reads packed A).
func (p *gemmPass) direct() bool {
	return p.kern.directTile != nil && !p.g.transA && p.g.n%p.kern.nr == 0
}

// parallel runs f(0..workers-1), the last on the calling goroutine, and
// returns when all have returned.
func parallel(workers int, f func(w int)) {
	if workers == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for w := 0; w < workers-1; w++ {
		go func() {
			defer wg.Done()
			f(w)
		}()
	}
	f(workers - 1)
	wg.Wait()
}

// macroGemm multiplies a packed mc×kc block of A by a packed kc×nc block of
// B into C[ic:ic+mc, jc:jc+nc], one mr×nr tile at a time. Full tiles are
// written in place; edge tiles go through t and are merged. With direct,
// full-row panels read A in place (rows ic.., depths pc..) and ap holds only
// the partial last panel.
func macroGemm(kern *gemmKernel, g *gemmArgs, ap, bp, t []float32, ic, mc, jc, nc, pc, kc int, beta float32, direct bool) {
	mr, nr := kern.mr, kern.nr
	full := mc / mr * mr
	for jr := 0; jr < nc; jr += nr {
		bpanel := bp[jr*kc : (jr+nr)*kc]
		cols := min(nr, nc-jr)
		for ir := 0; ir < mc; ir += mr {
			rows := min(mr, mc-ir)
			off := (ic+ir)*g.ldc + jc + jr
			if direct && rows == mr && cols == nr {
				kern.directTile(kc, g.a[(ic+ir)*g.lda+pc:], g.lda, bpanel, g.c[off:], g.ldc, g.alpha, beta)
				continue
			}
			q := ir
			if direct {
				q = ir - full // the packed partial panel is the first of ap
			}
			apanel := ap[q*kc : (q+mr)*kc]
			if rows == mr && cols == nr {
				kern.tile(kc, apanel, bpanel, g.c[off:], g.ldc, g.alpha, beta)
				continue
			}
			if kern.edgeTile != nil {
				kern.edgeTile(kc, apanel, bpanel, g.c[off:], g.ldc, g.alpha, beta, rows, cols)
				continue
			}
			kern.tile(kc, apanel, bpanel, t, nr, g.alpha, 0)
			mergeTile(g.c[off:], g.ldc, t, nr, rows, cols, beta)
		}
	}
}

// mergeTile sets the rows×cols corner of C to t + beta·C, not reading C when
// beta == 0.
func mergeTile(c []float32, ldc int, t []float32, ldt, rows, cols int, beta float32) {
	for r := 0; r < rows; r++ {
		dst, src := c[r*ldc:r*ldc+cols], t[r*ldt:r*ldt+cols]
		if beta == 0 {
			copy(dst, src)
			continue
		}
		for j, v := range src {
			dst[j] = v + beta*dst[j]
		}
	}
}

// packA copies rows [ic, ic+mc) and depths [pc, pc+kc) of op(A) into panels
// of mr rows: panel q holds, for each depth p, the mr values
// op(A)[ic+q·mr+r][pc+p], zero past the last row.
func packA(dst []float32, g *gemmArgs, kern *gemmKernel, ic, mc, pc, kc int) {
	mr := kern.mr
	if g.transA { // op(A)[i][p] = a[p*lda+i]: each depth is contiguous
		packDepthMajor(dst, g.a[pc*g.lda+ic:], g.lda, kc, mc, mr, kern.packDepthA)
		return
	}
	for q := 0; q < mc; q += mr {
		rows := min(mr, mc-q)
		panel := dst[q*kc : (q+mr)*kc]
		first := (ic+q)*g.lda + pc
		if kern.packRowsA != nil && kern.packRowsA(kc, g.a[first:], g.lda, rows, panel) {
			continue
		}
		for r := 0; r < rows; r++ { // op(A)[i][p] = a[i*lda+p]: each row is contiguous
			src := g.a[first+r*g.lda:][:kc]
			for p, v := range src {
				panel[p*mr+r] = v
			}
		}
		for p := 0; rows < mr && p < kc; p++ {
			clear(panel[p*mr+rows : p*mr+mr])
		}
	}
}

// packB copies depths [pc, pc+kc) and columns [jc, jc+nc) of op(B) into
// panels of nr columns: panel q holds, for each depth p, the nr values
// op(B)[pc+p][jc+q·nr+j], zero past the last column.
func packB(dst []float32, g *gemmArgs, kern *gemmKernel, pc, kc, jc, nc int) {
	nr := kern.nr
	if !g.transB { // op(B)[p][j] = b[p*ldb+j]: each depth is contiguous
		packDepthMajor(dst, g.b[pc*g.ldb+jc:], g.ldb, kc, nc, nr, kern.packDepthB)
		return
	}
	for q := 0; q < nc; q += nr {
		cols := min(nr, nc-q)
		panel := dst[q*kc : (q+nr)*kc]
		first := (jc+q)*g.ldb + pc
		if kern.packRowsB != nil && kern.packRowsB(kc, g.b[first:], g.ldb, cols, panel) {
			continue
		}
		for j := 0; j < cols; j++ { // op(B)[p][j] = b[j*ldb+p]: each column is contiguous
			src := g.b[first+j*g.ldb:][:kc]
			for p, v := range src {
				panel[p*nr+j] = v
			}
		}
		for p := 0; cols < nr && p < kc; p++ {
			clear(panel[p*nr+cols : p*nr+nr])
		}
	}
}

// packDepthMajor packs a matrix whose depths are contiguous (src[p*ld+x] for
// depth p < kc and x < width) into panels of w values per depth, zero past
// width. It walks a few depths across all panels at a time, so that the
// source rows and the written panel stay in L1 and the TLB. fast, when not
// nil, packs a run of depths of one panel.
func packDepthMajor(dst, src []float32, ld, kc, width, w int, fast func(kc int, src []float32, ld, width int, dst []float32)) {
	const depthBlock = 16
	for p0 := 0; p0 < kc; p0 += depthBlock {
		p1 := min(kc, p0+depthBlock)
		for q := 0; q < width; q += w {
			cols := min(w, width-q)
			panel := dst[q*kc : (q+w)*kc]
			if fast != nil {
				fast(p1-p0, src[p0*ld+q:], ld, cols, panel[p0*w:])
				continue
			}
			for p := p0; p < p1; p++ {
				d := panel[p*w : p*w+w]
				copy(d, src[p*ld+q:][:cols])
				clear(d[cols:])
			}
		}
	}
}
