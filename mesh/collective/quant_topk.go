package collective

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Sparse top-k (CodecTopK): per block of B values the K of largest
// magnitude (ties to the lower index), kept as block-relative indices and
// b-bit codes of one table of 2^b bucket means per chunk (quantizeValues).

// sparse is one chunk's kept entries: chunk-relative indices in
// increasing order and their values.
type sparse struct {
	idx  []int32
	vals []float32
	cnt  []int32 // scratch: a counted message's block counts
}

func (s *sparse) reset(n int) {
	if cap(s.idx) < n {
		s.idx, s.vals = make([]int32, 0, n), make([]float32, 0, n)
	}
	s.idx, s.vals = s.idx[:0], s.vals[:0]
}

// topkQuant is the scratch space of the top-k encoder; one per goroutine.
type topkQuant struct {
	cand   []uint32 // one block's magnitudes that share the threshold's top digit
	kept   sparse
	sorted []float32 // the kept values, sorted
	dp     groupDP
	runEnd [maxGroupBins + 1]int // where each run of sorted ends
	thr    [maxLevels - 1]float32
	lev    [maxLevels]float32
	codes  []uint8
}

// selectTopK appends to tq.kept the keep entries of largest magnitude
// of the block x (offset off in the chunk), ties to the lower index, in
// increasing order: a radix selection of the keep-th largest magnitude T
// over the bits of |x| (three digits, the later ones over the candidates
// only), then one pass taking every value above T and the first ones equal
// to it.
func (tq *topkQuant) selectTopK(x []float32, off, keep int) {
	var h [1 << 11]int32
	mag := func(v float32) uint32 { return math.Float32bits(v) &^ (1 << 31) }
	for _, v := range x {
		h[mag(v)>>21]++
	}
	hi, need := topDigit(h[:1<<10], keep)
	tq.cand = tq.cand[:0]
	for _, v := range x {
		if m := mag(v); m>>21 == hi {
			tq.cand = append(tq.cand, m)
		}
	}
	prefix := hi
	for _, d := range [2]struct{ shift, width uint }{{11, 10}, {0, 11}} {
		clear(h[:1<<d.width])
		for _, m := range tq.cand {
			if m>>(d.shift+d.width) == prefix {
				h[m>>d.shift&(1<<d.width-1)]++
			}
		}
		var digit uint32
		digit, need = topDigit(h[:1<<d.width], need)
		prefix = prefix<<d.width | digit
	}
	for i, v := range x { // prefix is now T
		if m := mag(v); m > prefix || m == prefix && need > 0 {
			if m == prefix {
				need--
			}
			tq.kept.idx = append(tq.kept.idx, int32(off+i))
			tq.kept.vals = append(tq.kept.vals, v)
		}
	}
}

// topDigit returns the largest digit d with at least need values in
// digits ≥ d, and how many of those equal to d must still be taken.
func topDigit(h []int32, need int) (uint32, int) {
	d := len(h) - 1
	for ; d > 0 && int(h[d]) < need; d-- {
		need -= int(h[d])
	}
	return uint32(d), need
}

// selectChunk fills tq.kept with the entries a contribution x keeps.
func (tq *topkQuant) selectChunk(p codecParams, x []float32) {
	tq.kept.reset(p.entries(len(x)))
	for off := 0; off < len(x); off += p.block {
		blk := x[off:min(off+p.block, len(x))]
		tq.selectTopK(blk, off, p.blockKeep(len(blk)))
	}
}

// quantizeValues sets tq.lev (2^b levels) and tq.codes for vals: the
// sorted values in at most maxGroupBins runs of equal counts, grouped
// optimally (quant_groups.go); the thresholds are the midpoints between
// neighbouring groups, and each level is the mean of the values its
// bucket holds (an empty bucket's is its lower threshold, or 0).
func (tq *topkQuant) quantizeValues(vals []float32, b int) {
	levels := 1 << b
	tq.sorted = append(tq.sorted[:0], vals...)
	slices.Sort(tq.sorted)
	nb := tq.sortedRuns()
	var cut [maxLevels + 1]int
	tq.dp.cuts(nb, levels, cut[:])
	thr := tq.thr[:levels-1]
	for g := range thr {
		thr[g] = midpoint32(tq.sorted, tq.runEnd[cut[g+1]])
	}
	if cap(tq.codes) < len(vals) {
		tq.codes = make([]uint8, len(vals))
	}
	tq.codes = tq.codes[:len(vals)]
	var sum [maxLevels]float64
	var cnt [maxLevels]int
	for i, v := range vals {
		c := bucketOf(v, thr, levels)
		tq.codes[i] = c
		sum[c] += float64(v)
		cnt[c]++
	}
	for c := range levels {
		switch {
		case cnt[c] > 0:
			tq.lev[c] = float32(sum[c] / float64(cnt[c]))
		case c > 0:
			tq.lev[c] = thr[c-1]
		default:
			tq.lev[c] = thr[0]
		}
	}
}

// sortedRuns cuts tq.sorted into at most maxGroupBins runs: the
// topkTail smallest and largest values alone (the tails, where heavy-
// tailed values are far apart and want levels of their own), the others
// in runs of nearly equal counts, the negative values apart from the rest
// (the kept values of a block leave a gap about 0 that no run may
// straddle). It sets the prefix sums of tq.dp and tq.runEnd and returns
// the number of runs.
func (tq *topkQuant) sortedRuns() int {
	s, k := tq.sorted, &tq.dp
	tail, per := len(s), 1
	if len(s) > maxGroupBins {
		tail = topkTail
		per = (len(s) - 2*tail + maxGroupBins - 2*tail - 2) / (maxGroupBins - 2*tail - 1)
	}
	neg := sort.Search(len(s), func(i int) bool { return s[i] >= 0 })
	nb := 0
	for lo := 0; lo < len(s); nb++ {
		hi := lo + 1
		if lo >= tail && lo < len(s)-tail {
			hi = min(lo+per, len(s)-tail)
		}
		if lo < neg && hi > neg {
			hi = neg
		}
		var sum float64
		for _, v := range s[lo:hi] {
			sum += float64(v)
		}
		k.ps[nb+1], k.pc[nb+1] = k.ps[nb]+sum, float64(hi)
		tq.runEnd[nb+1] = hi
		lo = hi
	}
	return nb
}

// topkTail is the values at each end of the sorted kept values that
// sortedRuns leaves alone.
const topkTail = 64

// midpoint32 is the midpoint of s[q−1] and s[q] (clamped to s's ends),
// or 0 for an empty s.
func midpoint32(s []float32, q int) float32 {
	if len(s) == 0 {
		return 0
	}
	a, b := s[max(q-1, 0)], s[min(q, len(s)-1)]
	return float32((float64(a) + float64(b)) / 2)
}

// encodeTopK writes the payload of contribution x (form 0) and, with res,
// stores there what the encoding lost: x outside the kept entries,
// x − decoded on them.
func (tq *topkQuant) encodeTopK(p codecParams, payload []byte, x, res []float32) error {
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return ErrNonFinite
		}
	}
	tq.selectChunk(p, x)
	tq.writeSparse(p, payload, len(x), &tq.kept, topkFixed)
	if res != nil {
		copy(res, x)
		for e, i := range tq.kept.idx {
			res[i] = x[i] - tq.lev[tq.codes[e]]
		}
	}
	return nil
}

// writeSparse quantizes the values of sp (entries of a chunk of n values)
// and writes the payload in the given form; it returns the payload's
// length. For topkFixed, sp must hold each block's fixed count.
func (tq *topkQuant) writeSparse(p codecParams, payload []byte, n int, sp *sparse, form int) int {
	tq.quantizeValues(sp.vals, p.bits)
	levels := p.levels()
	putTopkDesc(payload, topkDesc{bits: p.bits, form: form, block: p.block, entries: len(sp.idx)})
	writeTable(payload[topkDescSize:], tq.lev[:levels])
	bw := bitWriter{buf: payload[topkDescSize+4*levels:]}
	ib := indexBits(p.block)
	if form == topkCounted {
		e, cb := 0, countBits(p.block)
		for off := 0; off < n; off += p.block {
			end := e
			for end < len(sp.idx) && int(sp.idx[end]) < off+p.block {
				end++
			}
			bw.put(uint32(end-e), cb)
			e = end
		}
	}
	for _, i := range sp.idx {
		bw.put(uint32(int(i)%p.block), ib)
	}
	for _, c := range tq.codes {
		bw.put(uint32(c), p.bits)
	}
	return topkDescSize + 4*levels + bw.flush()
}

// fixedCounts reports whether sp keeps exactly each block's fixed count
// (then it encodes in form 0, without counts).
func (p codecParams) fixedCounts(sp *sparse, n int) bool {
	if len(sp.idx) != p.entries(n) {
		return false
	}
	e := 0
	for off := 0; off < n; off += p.block {
		end := min(off+p.block, n)
		keep := p.blockKeep(end - off)
		if e+keep > len(sp.idx) || int(sp.idx[e+keep-1]) >= end || (e+keep < len(sp.idx) && int(sp.idx[e+keep]) < end) {
			return false
		}
		e += keep
	}
	return true
}

// readTopK parses a top-k payload (after the header, its length checked
// against its descriptor) of n values into sp and t (the levels, checked
// for finiteness when check is set). Form 1 is accepted only when counted
// is set (an owner's result). Errors wrap ErrBadChunk or ErrNonFinite.
func (p codecParams) readTopK(payload []byte, n int, counted, check bool, t []float32, sp *sparse) error {
	d, _, ok := readTopkDesc(payload, n)
	switch {
	case !ok || d.bits != p.bits || d.block != p.block:
		return fmt.Errorf("%w: top-k descriptor %+v", ErrBadChunk, d)
	case d.form == topkCounted && !counted:
		return fmt.Errorf("%w: counted top-k contribution", ErrBadChunk)
	case d.form == topkFixed && d.entries != p.entries(n):
		return fmt.Errorf("%w: %d top-k entries for %d values", ErrBadChunk, d.entries, n)
	}
	levels := p.levels()
	if err := loadTable(t[:levels], payload[topkDescSize:], check); err != nil {
		return err
	}
	br := bitReader{buf: payload[topkDescSize+4*levels:]}
	sp.reset(d.entries)
	if err := p.readIndices(&br, n, d, sp); err != nil {
		return err
	}
	sp.vals = sp.vals[:d.entries]
	for e := range sp.vals {
		sp.vals[e] = t[br.get(p.bits)]
	}
	if !br.padClean() {
		return fmt.Errorf("%w: top-k padding", ErrBadChunk)
	}
	return nil
}

// readIndices reads the block counts (form 1) and the indices of a top-k
// bit stream into sp.idx, checking that they are strictly increasing
// within their block and that the counts add up to the entries.
func (p codecParams) readIndices(br *bitReader, n int, d topkDesc, sp *sparse) error {
	sp.cnt = sp.cnt[:0]
	if d.form == topkCounted {
		cb := countBits(p.block)
		for off := 0; off < n; off += p.block {
			sp.cnt = append(sp.cnt, int32(br.get(cb)))
		}
	}
	ib, e := indexBits(p.block), 0
	for b, off := 0, 0; off < n; b, off = b+1, off+p.block {
		m := min(p.block, n-off)
		keep := p.blockKeep(m)
		if d.form == topkCounted {
			keep = int(sp.cnt[b])
		}
		if keep > m || e+keep > d.entries {
			return fmt.Errorf("%w: top-k block %d keeps %d of %d values", ErrBadChunk, b, keep, m)
		}
		prev := -1
		for range keep {
			i := int(br.get(ib))
			if i <= prev || i >= m {
				return fmt.Errorf("%w: top-k index %d after %d in a block of %d", ErrBadChunk, i, prev, m)
			}
			sp.idx = append(sp.idx, int32(off+i))
			prev = i
		}
		e += keep
	}
	if e != d.entries {
		return fmt.Errorf("%w: top-k blocks keep %d entries, descriptor %d", ErrBadChunk, e, d.entries)
	}
	return nil
}
