package collective

import (
	"math"
	"sync"
)

// The robust rule straight from int8 chunks (robustMeanCoded): the same
// operations as robustMean in the same order, so the same bits, without
// decoding the contributions into k float32 rows first. A contribution is
// its 256-entry table and its codes; what robustMean does to every value
// it does to the table entries once:
//   - the norm clip scales the table (float32(x·s) is elementwise);
//   - the coordinate median compares sortable int32 keys looked up in a
//     table of keys, 256 coordinates at a time, with a comparator network
//     pruned to the lower median (robust_median.go, generated);
//   - the norms, the distances and the CenteredClip step look values up
//     in a float64 copy of the table.
//
// In the honest case (every member with a weight admitted, none clipped)
// the norms come with the median and the distances in one pass; otherwise
// that pass runs again on what the rule really takes.
//
// Each member's sums run over its values in order as in robustMean; the
// kernels only interleave independent sums: four members' in the Go loops,
// in the lanes of a register in their AVX2 twins (robust_kernels_amd64.s,
// robust_median_amd64.s), which TestRobustMeanCodedMatches, TestMedianKernels
// and FuzzRobustCoded hold to the Go loops and to robustMean, bit for bit.

// medianBlock is the number of coordinates the coordinate median takes at a
// time.
const medianBlock = 256

// codedWork is robustMeanCoded's scratch space.
type codedWork struct {
	tabs  [][256]float32 // (k) each contribution's table, clipped in place
	codes [][]byte       // (k) each contribution's codes, views of its message
	sq    [256]float64
	spec  []int          // members with a weight: the active ones if all are admitted
	t64   [][256]float64 // (active) the clipped tables in float64, active order
	keys  []int32        // (active, 256) the clipped tables as sortable keys
	cb    []byte         // (active, medianBlock) one block's codes
	cptr  []*byte        // (active) where the AVX2 median reads each one's codes
	rows  []int32        // (active, medianBlock) keys of one block (medianRows, medianNetAVX2)
	v     []float64      // (m rounded up to medianBlock) the estimate
	sums  []float64      // (active) the distances' sums of squares
	nsums []float64      // (active) the norms' sums of squares
	coefs []float64      // (active) step coefficients in active order
	acc   [medianBlock]float64
}

// robustMeanCoded is robustMean with RuleCenteredClip over k int8 chunk
// messages of m = len(out) values each (header, table, m codes; a table
// entry may be anything, the contributions using a non-finite one are
// rejected). It produces the same bits and verdicts as decoding the
// messages (decodeRaw) and calling robustMean.
func robustMeanCoded(ws *robustWork, rc *RobustConfig, weights []float32, msgs [][]byte, out []float32, rep []Verdict) (chunkStats, bool) {
	k, m := len(msgs), len(out)
	ws.reset(k, 0)
	cw := &ws.coded
	defer cw.forget()
	cw.load(msgs, m)
	// First the honest case: every member with a weight is admitted and
	// none is clipped, so their norms come with the median and the
	// distances, in one pass. If that was wrong, the pass runs again.
	cw.spec = cw.spec[:0]
	for i, w := range weights[:k] {
		if capWeight(rc, w) > 0 {
			cw.spec = append(cw.spec, i)
		}
	}
	if len(cw.spec) > 0 {
		cw.prepare(cw.spec, m)
		ws.medianDistances(cw.spec, m, true)
	}
	cw.norms(ws.norms, cw.spec)
	ws.admit(rc, weights, rep)
	if len(ws.active) == 0 {
		clear(out)
		return chunkStats{}, false // scanChunk(out): +0 all
	}
	clipped := ws.clipScales(rc, rep)
	if len(clipped) > 0 || len(ws.active) != len(cw.spec) {
		for _, i := range clipped {
			scaleTable(&cw.tabs[i], rep[i].Clip)
		}
		cw.prepare(ws.active, m)
		ws.medianDistances(ws.active, m, false)
	}
	ws.medianDots(cw.v[:m], rep)
	tau := rc.Tau * ws.lowerMedian(ws.dist)
	total := ws.totalWeight()
	var st chunkStats
	for it := range rc.Iters {
		if it > 0 {
			ws.distancesCoded(m)
		}
		st = ws.stepCoded(ws.coefs(tau, total), out)
	}
	ws.flag(rc, rep)
	return st, true
}

// forget drops the views of the messages (they belong to the transport).
func (cw *codedWork) forget() {
	clear(cw.codes)
	clear(cw.cptr)
}

// load reads the tables of the messages and points codes at their codes.
func (cw *codedWork) load(msgs [][]byte, m int) {
	k := len(msgs)
	if cap(cw.tabs) < k {
		cw.tabs = make([][256]float32, k)
		cw.codes = make([][]byte, k)
	}
	cw.tabs, cw.codes = cw.tabs[:k], cw.codes[:k]
	for i, msg := range msgs {
		p := msg[chunkHeaderSize : chunkHeaderSize+int8TableSize+m]
		rawTable(&cw.tabs[i], p)
		cw.codes[i] = p[int8TableSize:]
	}
}

// scaleTable is robustMean's norm clip, x ← float32(x·s), on a table.
func scaleTable(t *[256]float32, s float32) {
	for b, x := range t {
		t[b] = float32(x * s)
	}
}

// squares sets sq to the squares of t's entries, as norm computes them.
func squares(sq *[256]float64, t *[256]float32) {
	for b, x := range t {
		sq[b] = float64(float64(x) * float64(x))
	}
}

// norms sets norms[i] to the L2 norm of contribution i (norm's sum, in
// order) for the members not in done.
func (cw *codedWork) norms(norms []float64, done []int) {
	for i := range cw.codes {
		if len(done) > 0 && done[0] == i {
			done = done[1:]
			continue
		}
		norms[i] = codedNorm(&cw.sq, &cw.tabs[i], cw.codes[i])
	}
}

// codedNorm is norm of the values the codes decode to with table t (sq is
// scratch): the norm an owner's verdict states (Verdict.Norm, MessageNorm).
func codedNorm(sq *[256]float64, t *[256]float32, codes []byte) float64 {
	squares(sq, t)
	return math.Sqrt(sumSquares(sq, codes))
}

// sumSquares returns Σ sq[c] over the codes c, in order.
func sumSquares(sq *[256]float64, c []byte) float64 {
	var s float64
	for _, b := range c {
		s += sq[b]
	}
	return s
}

// prepare makes the float64 tables and the key tables of the active
// members and room for m coordinates.
func (cw *codedWork) prepare(active []int, m int) {
	a := len(active)
	if cap(cw.t64) < a {
		cw.t64 = make([][256]float64, a)
		cw.keys = make([]int32, a*256)
		cw.cb = make([]byte, a*medianBlock)
		cw.cptr = make([]*byte, a)
	}
	cw.t64, cw.keys, cw.cb, cw.cptr = cw.t64[:a], cw.keys[:a*256], cw.cb[:a*medianBlock], cw.cptr[:a]
	if n := (m + medianBlock - 1) / medianBlock * medianBlock; len(cw.v) < n {
		cw.v = make([]float64, n)
	}
	for r, i := range active {
		t64, keys := &cw.t64[r], (*[256]int32)(cw.keys[r*256:])
		for b, x := range &cw.tabs[i] {
			t64[b] = float64(x)
			keys[b] = sortKey(x)
		}
	}
}

// sortKey maps float32 values to int32 keys in the same order, −0 before
// +0 as Go's min and max take them (NaN never reaches it).
func sortKey(x float32) int32 {
	b := int32(math.Float32bits(x))
	return b ^ int32(uint32(b>>31)>>1)
}

// keyFloat is sortKey's inverse.
func keyFloat(k int32) float32 {
	return math.Float32frombits(uint32(k ^ int32(uint32(k>>31)>>1)))
}

// medianDistances sets cw.v to the coordinate-wise lower median of the
// active contributions and ws.dist to their distances to it, a block at a
// time; withNorms, ws.norms to their norms too.
func (ws *robustWork) medianDistances(active []int, m int, withNorms bool) {
	cw := &ws.coded
	sums := zeroed(&cw.sums, len(active))
	nsums := zeroed(&cw.nsums, len(active))
	for lo := 0; lo < m; lo += medianBlock {
		hi := min(lo+medianBlock, m)
		cw.medianBlock(active, lo, hi)
		if withNorms {
			cw.distNorms(active, sums, nsums, lo, hi)
		} else {
			cw.distances(active, sums, lo, hi)
		}
	}
	for r, i := range active {
		ws.dist[i] = math.Sqrt(sums[r])
		if withNorms {
			ws.norms[i] = math.Sqrt(nsums[r])
		}
	}
}

// distancesCoded sets ws.dist to the distances of the active
// contributions to cw.v.
func (ws *robustWork) distancesCoded(m int) {
	cw := &ws.coded
	sums := zeroed(&cw.sums, len(ws.active))
	cw.distances(ws.active, sums, 0, m)
	for r, i := range ws.active {
		ws.dist[i] = math.Sqrt(sums[r])
	}
}

// zeroed returns *s resized to n zeros.
func zeroed(s *[]float64, n int) []float64 {
	if cap(*s) < n {
		*s = make([]float64, n)
	}
	*s = (*s)[:n]
	clear(*s)
	return *s
}

// distances adds to sums[r] the squared distances of active member r to
// cw.v over coordinates lo..hi, four members at a time.
func (cw *codedWork) distances(active []int, sums []float64, lo, hi int) {
	v := cw.v[lo:hi]
	r := 0
	for ; r+4 <= len(active); r += 4 {
		i0, i1, i2, i3 := active[r], active[r+1], active[r+2], active[r+3]
		distances4((*[4]float64)(sums[r:]), v, &cw.t64[r], &cw.t64[r+1], &cw.t64[r+2], &cw.t64[r+3],
			cw.codes[i0][lo:hi], cw.codes[i1][lo:hi], cw.codes[i2][lo:hi], cw.codes[i3][lo:hi])
	}
	for ; r < len(active); r++ {
		sums[r] = distances1(sums[r], v, &cw.t64[r], cw.codes[active[r]][lo:hi])
	}
}

// distNorms is distances that also adds the squares of the values to
// nsums (norm's sums: float64(x)² is exact, so it equals the table of
// squares' entry).
func (cw *codedWork) distNorms(active []int, sums, nsums []float64, lo, hi int) {
	v := cw.v[lo:hi]
	r := 0
	for ; r+4 <= len(active); r += 4 {
		i0, i1, i2, i3 := active[r], active[r+1], active[r+2], active[r+3]
		c0, c1, c2, c3 := cw.codes[i0][lo:hi], cw.codes[i1][lo:hi], cw.codes[i2][lo:hi], cw.codes[i3][lo:hi]
		s, q := (*[4]float64)(sums[r:]), (*[4]float64)(nsums[r:])
		if useAVX2 {
			c1, c2, c3 = c1[:len(v)], c2[:len(v)], c3[:len(v)]
			distNorms4AVX2(s, q, &v[0], &cw.t64[r], &c0[0], &c1[0], &c2[0], &c3[0], len(v))
			continue
		}
		distNorms4(s, q, v, &cw.t64[r], &cw.t64[r+1], &cw.t64[r+2], &cw.t64[r+3], c0, c1, c2, c3)
	}
	for ; r < len(active); r++ {
		sums[r], nsums[r] = distNorms1(sums[r], nsums[r], v, &cw.t64[r], cw.codes[active[r]][lo:hi])
	}
}

// distNorms4 is distances4 that also adds Σ t_j[c]² to q[j].
func distNorms4(s, q *[4]float64, v []float64, t0, t1, t2, t3 *[256]float64, c0, c1, c2, c3 []byte) {
	c0, c1, c2, c3 = c0[:len(v)], c1[:len(v)], c2[:len(v)], c3[:len(v)]
	_, _, _, _ = t0[0], t1[0], t2[0], t3[0]
	s0, s1, s2, s3 := s[0], s[1], s[2], s[3]
	q0, q1, q2, q3 := q[0], q[1], q[2], q[3]
	for t, vt := range v {
		x0, x1, x2, x3 := t0[c0[t]], t1[c1[t]], t2[c2[t]], t3[c3[t]]
		q0 += float64(x0 * x0)
		q1 += float64(x1 * x1)
		q2 += float64(x2 * x2)
		q3 += float64(x3 * x3)
		d0, d1, d2, d3 := x0-vt, x1-vt, x2-vt, x3-vt
		s0 += float64(d0 * d0)
		s1 += float64(d1 * d1)
		s2 += float64(d2 * d2)
		s3 += float64(d3 * d3)
	}
	*s = [4]float64{s0, s1, s2, s3}
	*q = [4]float64{q0, q1, q2, q3}
}

func distNorms1(s, q float64, v []float64, t *[256]float64, c []byte) (float64, float64) {
	c = c[:len(v)]
	for j, vt := range v {
		x := t[c[j]]
		q += float64(x * x)
		d := x - vt
		s += float64(d * d)
	}
	return s, q
}

// distances4 adds Σ (t_j[c] − v)² over the codes c of c_j, in order, to
// s[j], j = 0..3 (robustWork.distances' sums).
func distances4(s *[4]float64, v []float64, t0, t1, t2, t3 *[256]float64, c0, c1, c2, c3 []byte) {
	c0, c1, c2, c3 = c0[:len(v)], c1[:len(v)], c2[:len(v)], c3[:len(v)]
	_, _, _, _ = t0[0], t1[0], t2[0], t3[0]
	s0, s1, s2, s3 := s[0], s[1], s[2], s[3]
	for t, vt := range v {
		d0 := t0[c0[t]] - vt
		d1 := t1[c1[t]] - vt
		d2 := t2[c2[t]] - vt
		d3 := t3[c3[t]] - vt
		s0 += float64(d0 * d0)
		s1 += float64(d1 * d1)
		s2 += float64(d2 * d2)
		s3 += float64(d3 * d3)
	}
	*s = [4]float64{s0, s1, s2, s3}
}

func distances1(s float64, v []float64, t *[256]float64, c []byte) float64 {
	c = c[:len(v)]
	for j, vt := range v {
		d := t[c[j]] - vt
		s += float64(d * d)
	}
	return s
}

// medianBlock sets cw.v[lo:hi] (hi − lo ≤ medianBlock) to the lower median
// of the active contributions per coordinate.
func (cw *codedWork) medianBlock(active []int, lo, hi int) {
	a := len(active)
	v := (*[medianBlock]float64)(cw.v[lo:]) // prepare rounded its length up
	if useAVX2 {
		if hi-lo == medianBlock {
			for r, i := range active {
				cw.cptr[r] = &cw.codes[i][lo]
			}
		} else {
			cb := cw.copyBlock(active, lo, hi)
			for r := range active {
				cw.cptr[r] = &cb[r*medianBlock]
			}
		}
		cw.medianAVX2(a, v)
		return
	}
	cb := cw.copyBlock(active, lo, hi)
	if a < len(medianKernels) {
		medianKernels[a](v, cw.keys[:a*256], cb)
	} else {
		cw.medianRows(a, v)
	}
}

// copyBlock copies the codes of coordinates lo..hi of the active
// contributions into cw.cb, a row of medianBlock per member, zero-padded.
func (cw *codedWork) copyBlock(active []int, lo, hi int) []byte {
	cb := cw.cb[:len(active)*medianBlock]
	for r, i := range active {
		row := cb[r*medianBlock : (r+1)*medianBlock]
		clear(row[copy(row, cw.codes[i][lo:hi]):])
	}
	return cb
}

// medianAVX2 runs the AVX2 median of a members whose codes cw.cptr
// points at: the unrolled kernel if there is one, else medianNetAVX2.
func (cw *codedWork) medianAVX2(a int, v *[medianBlock]float64) {
	if a < len(medianAVX2) && medianAVX2[a] != nil {
		medianAVX2[a](v, &cw.keys[0], &cw.cptr[0])
		return
	}
	cs := medianOffsets(a)
	if cap(cw.rows) < a*8 {
		cw.rows = make([]int32, a*8)
	}
	medianNetAVX2(v, &cw.keys[0], &cw.cptr[0], a, first32(cs), len(cs)/2, (a-1)/2, &cw.rows[:a*8][0])
}

func first32(s []int32) *int32 {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// medianOffsets is medianNetwork(n) for medianNetAVX2: per comparator the
// byte offsets of its lines' 8 keys.
func medianOffsets(n int) []int32 {
	if c, ok := medianOffsetLists.Load(n); ok {
		return c.([]int32)
	}
	var cs []int32
	for _, c := range medianNetwork(n) {
		cs = append(cs, int32(c.lo)*32, int32(c.hi)*32)
	}
	medianOffsetLists.Store(n, cs)
	return cs
}

var medianOffsetLists sync.Map // int → []int32

// medianRows is medianBlock's kernel for any number of members: the keys
// of each member in a row, then medianNetwork's comparators row by row.
func (cw *codedWork) medianRows(a int, v *[medianBlock]float64) {
	const n = medianBlock
	if cap(cw.rows) < a*n {
		cw.rows = make([]int32, a*n)
	}
	rows := cw.rows[:a*n]
	for r := range a {
		keys, row := (*[256]int32)(cw.keys[r*256:]), (*[n]int32)(rows[r*n:])
		for t, c := range (*[n]byte)(cw.cb[r*n:]) {
			row[t] = keys[c]
		}
	}
	for _, c := range medianNetwork(a) {
		lo, hi := (*[n]int32)(rows[int(c.lo)*n:]), (*[n]int32)(rows[int(c.hi)*n:])
		switch c.out {
		case outBoth:
			for t, x := range lo {
				y := hi[t]
				lo[t], hi[t] = min(x, y), max(x, y)
			}
		case outLo:
			for t, x := range lo {
				lo[t] = min(x, hi[t])
			}
		case outHi:
			for t, x := range lo {
				hi[t] = max(x, hi[t])
			}
		}
	}
	for t, x := range (*[n]int32)(rows[(a-1)/2*n:]) {
		v[t] = float64(keyFloat(x))
	}
}

// stepCoded is robustWork.step on the coded contributions, writing the
// new estimate to out too; it returns scanChunk(out).
func (ws *robustWork) stepCoded(c []float64, out []float32) chunkStats {
	cw := &ws.coded
	act := ws.active
	if len(out) == 0 {
		return chunkStats{}
	}
	if useAVX2 && len(out) >= 4 {
		cw.coefs = cw.coefs[:0]
		for r, i := range act {
			cw.cptr[r] = &cw.codes[i][0]
			cw.coefs = append(cw.coefs, c[i])
		}
		var sc stepScan
		n4 := len(out) &^ 3
		stepAVX2(&cw.v[0], &out[0], &cw.t64[0], &cw.cptr[0], &cw.coefs[0], len(act), n4, &sc)
		ws.stepGo(c, out, n4)
		return sc.stats(out, n4)
	}
	ws.stepGo(c, out, 0)
	return scanChunk(out)
}

// stepScan is what stepAVX2 learns of out for the encoder: scanChunk's
// four sums (s[j] over the values at j mod 4), and per lane the least and
// greatest value.
type stepScan struct {
	s      [4]float64
	mn, mx [4]float32
}

// stats completes scanChunk(out) from stepScan over out[:n4], n4 =
// len(out) &^ 3. The sums are scanChunk's: the values after n4 go to s[0].
// scanChunk's least value is the first of the least, by <: its bits are
// those of any least value unless it is zero (−0 and +0 are equal), and
// then a pass in order finds which zero it is; the same for the greatest.
func (sc *stepScan) stats(out []float32, n4 int) chunkStats {
	s0 := sc.s[0]
	for _, x := range out[n4:] {
		s0 += float64(x)
	}
	st := chunkStats{min: sc.mn[0], max: sc.mx[0], sum: s0 + sc.s[1] + sc.s[2] + sc.s[3]}
	for _, x := range sc.mn[1:] {
		st.min = min32(st.min, x)
	}
	for _, x := range sc.mx[1:] {
		st.max = max32(st.max, x)
	}
	for _, x := range out[n4:] {
		st.min, st.max = min32(st.min, x), max32(st.max, x)
	}
	if st.min == 0 || st.max == 0 {
		full := scanChunk(out)
		st.min, st.max = full.min, full.max
	}
	return st
}

// stepGo is stepCoded's Go loop, from coordinate done on.
func (ws *robustWork) stepGo(c []float64, out []float32, done int) {
	cw := &ws.coded
	act := ws.active
	for lo := done; lo < len(out); lo += medianBlock {
		hi := min(lo+medianBlock, len(out))
		acc, v := cw.acc[:hi-lo], cw.v[lo:hi]
		clear(acc)
		r := 0
		for ; r+4 <= len(act); r += 4 {
			i0, i1, i2, i3 := act[r], act[r+1], act[r+2], act[r+3]
			step4(acc, v, &cw.t64[r], &cw.t64[r+1], &cw.t64[r+2], &cw.t64[r+3],
				cw.codes[i0][lo:hi], cw.codes[i1][lo:hi], cw.codes[i2][lo:hi], cw.codes[i3][lo:hi],
				c[i0], c[i1], c[i2], c[i3])
		}
		for ; r < len(act); r++ {
			i := act[r]
			step1(acc, v, &cw.t64[r], cw.codes[i][lo:hi], c[i])
		}
		o := out[lo:hi]
		for t, x := range acc {
			v[t] += x
			o[t] = float32(v[t])
		}
	}
}

// step4 adds c_j·(t_j[c] − v) for j = 0..3, in that order, to acc.
func step4(acc, v []float64, t0, t1, t2, t3 *[256]float64, c0, c1, c2, c3 []byte, k0, k1, k2, k3 float64) {
	v = v[:len(acc)]
	c0, c1, c2, c3 = c0[:len(acc)], c1[:len(acc)], c2[:len(acc)], c3[:len(acc)]
	_, _, _, _ = t0[0], t1[0], t2[0], t3[0]
	for t, a := range acc {
		vt := v[t]
		acc[t] = a + float64(k0*(t0[c0[t]]-vt)) + float64(k1*(t1[c1[t]]-vt)) +
			float64(k2*(t2[c2[t]]-vt)) + float64(k3*(t3[c3[t]]-vt))
	}
}

func step1(acc, v []float64, t0 *[256]float64, c0 []byte, k0 float64) {
	v = v[:len(acc)]
	c0 = c0[:len(acc)]
	for t, a := range acc {
		acc[t] = a + float64(k0*(t0[c0[t]]-v[t]))
	}
}

// comparator is one compare-exchange of a selection network: line lo gets
// the smaller key, hi the larger, or only the one out says is needed.
type comparator struct {
	lo, hi uint16
	out    uint8
}

// Outputs of a comparator.
const (
	outBoth uint8 = iota
	outLo
	outHi
)

// medianNetworks caches medianNetwork by size.
var medianNetworks sync.Map // int → []comparator

// medianNetwork returns the comparators of sortNetwork(n) that the lower
// median, line (n−1)/2, depends on, each with the outputs needed later.
func medianNetwork(n int) []comparator {
	if c, ok := medianNetworks.Load(n); ok {
		return c.([]comparator)
	}
	sorted := sortNetwork(n)
	need := make([]bool, n)
	need[(n-1)/2] = true
	var rev []comparator
	for j := len(sorted) - 1; j >= 0; j-- {
		lo, hi := sorted[j][0], sorted[j][1]
		switch {
		case need[lo] && need[hi]:
			rev = append(rev, comparator{lo, hi, outBoth})
		case need[lo]:
			rev = append(rev, comparator{lo, hi, outLo})
		case need[hi]:
			rev = append(rev, comparator{lo, hi, outHi})
		default:
			continue
		}
		need[lo], need[hi] = true, true
	}
	cs := make([]comparator, len(rev))
	for j, c := range rev {
		cs[len(rev)-1-j] = c
	}
	medianNetworks.Store(n, cs)
	return cs
}
