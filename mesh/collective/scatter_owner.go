package collective

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// ownerWork is an owner's scratch space for one chunk at a time.
type ownerWork struct {
	p   codecParams
	dec [][]float32 // (k, ChunkElems) decoded contributions (all but int8's CenteredClip)
	res []float32   // (ChunkElems) the combined values
	out []byte      // the result message
	ws  robustWork
	qz  quantizer
	t   [256]float32
	pk  packer   // the compressed codecs' and fp32's decoder and encoder
	sps []sparse // (k) the top-k contributions' entries
	syn [][]byte // (k) dense contributions as int8 messages
	tk  topkUnion
	// gain is Σ weights used / the owner's own weight, 0 if unused.
	gain float64
}

// ownerWorks keeps owner scratch space between attempts: it is k chunks
// of float32 and more, and an attempt runs Shards owners.
var ownerWorks sync.Pool

// newOwnerWork returns scratch space for codec p, k members and chunks of
// up to chunkElems values; putOwnerWork gives it back.
func newOwnerWork(p codecParams, k, chunkElems int) *ownerWork {
	ow, _ := ownerWorks.Get().(*ownerWork)
	if ow == nil {
		ow = &ownerWork{}
	}
	ow.p, ow.pk.p = p, p
	ow.grow(chunkElems)
	return ow
}

// grow makes room for chunks of chunkElems values.
func (ow *ownerWork) grow(chunkElems int) {
	if len(ow.res) < chunkElems {
		ow.res = make([]float32, chunkElems)
		ow.dec = ow.dec[:0]
	}
	if m := ow.p.maxMsgSize(chunkElems); len(ow.out) < m {
		ow.out = make([]byte, m)
	}
}

func putOwnerWork(ow *ownerWork) { ownerWorks.Put(ow) }

// rows returns k rows of m decoded values.
func (ow *ownerWork) rows(k, m int) [][]float32 {
	for len(ow.dec) < k {
		ow.dec = append(ow.dec, make([]float32, len(ow.res)))
	}
	xs := ow.dec[:k]
	for i := range xs {
		xs[i] = xs[i][:m]
	}
	return xs
}

// combine is the robust rule over chunk c of segment seg: msgs are the k
// members' checked chunk messages (same header; checkContribution), the
// result is the owner's message (valid until the next call; ow.res holds
// the values it encodes) and one Verdict per member. rank is the owner's
// (for ow.gain; -1 for an auditor). A contribution with a non-finite
// value in use is rejected, not an error. It only fails if the result does
// not encode.
func (ow *ownerWork) combine(rc *RobustConfig, weights []float32, msgs [][]byte, seg, rank, c int) ([]byte, []Verdict, error) {
	n := int(binary.BigEndian.Uint32(msgs[0][8:]))
	v := make([]Verdict, len(msgs))
	out := ow.out[:ow.p.maxMsgSize(n)]
	putHeader(out, chunkHeader{codec: ow.p.codec, phase: phaseDirectGather, step: uint16(seg), chunk: uint32(c), n: uint32(n)})
	var m int
	var err error
	switch ow.p.codec {
	case CodecInt8:
		m, err = ow.combineInt8(rc, weights, msgs, n, v, out[chunkHeaderSize:])
	case CodecTopK:
		m, err = ow.combineTopK(rc, weights, msgs, n, v, out[chunkHeaderSize:])
	default:
		m, err = ow.combineDense(rc, weights, msgs, n, v, out[chunkHeaderSize:])
	}
	if err != nil {
		return nil, nil, err
	}
	ow.setGain(rank)
	return out[:chunkHeaderSize+m], v, nil
}

// setGain sets ow.gain for the owner rank (0 for an auditor, -1, or an
// owner without weight).
func (ow *ownerWork) setGain(rank int) {
	ow.gain = 0
	if rank >= 0 && ow.ws.w[rank] > 0 {
		ow.gain = ow.ws.totalWeight() / ow.ws.w[rank]
	}
}

// combineInt8 runs the rule on int8 contributions (CenteredClip straight
// from the codes, robust_kernels.go) and writes the result's payload.
func (ow *ownerWork) combineInt8(rc *RobustConfig, weights []float32, msgs [][]byte, n int, v []Verdict, payload []byte) (int, error) {
	var st chunkStats
	if rc.Rule == RuleCenteredClip {
		st, _ = robustMeanCoded(&ow.ws, rc, weights, msgs, ow.res[:n], v)
	} else {
		xs := ow.rows(len(msgs), n)
		for i, m := range msgs {
			decodeRaw(xs[i], m[chunkHeaderSize:])
		}
		robustMean(&ow.ws, rc, weights, xs, ow.res[:n], v)
		st = scanChunk(ow.res[:n])
	}
	if err := ow.qz.encodeInt8Scanned(payload, &ow.t, ow.res[:n], st); err != nil {
		return 0, err
	}
	return int8TableSize + n, nil
}

// combineDense runs the rule on dense (or fp32) contributions and encodes
// the result with the same codec. CenteredClip over q4 or q2 runs on the
// codes, as for int8 (robustMeanCoded: the bits of decoding them and
// robustMean); the rest on decoded rows.
func (ow *ownerWork) combineDense(rc *RobustConfig, weights []float32, msgs [][]byte, n int, v []Verdict, payload []byte) (int, error) {
	if rc.Rule == RuleCenteredClip && ow.p.codec != CodecFP32 {
		robustMeanCoded(&ow.ws, rc, weights, ow.asInt8(msgs, n), ow.res[:n], v)
		return ow.pk.encode(payload, ow.res[:n], nil)
	}
	xs := ow.rows(len(msgs), n)
	for i, m := range msgs {
		_ = ow.pk.read(m[chunkHeaderSize:], n, false, false) // checked on arrival
		ow.pk.apply(xs[i], m[chunkHeaderSize:], 1, false)
	}
	robustMean(&ow.ws, rc, weights, xs, ow.res[:n], v)
	return ow.pk.encode(payload, ow.res[:n], nil)
}

// asInt8 rewrites dense messages of n values as int8 messages that decode
// to the same values: the table in the first 2^b of 256 entries (the
// others 0, never used), one code per byte.
func (ow *ownerWork) asInt8(msgs [][]byte, n int) [][]byte {
	size, levels := CodecInt8.msgSize(n), ow.p.levels()
	for len(ow.syn) < len(msgs) {
		ow.syn = append(ow.syn, nil)
	}
	out := ow.syn[:len(msgs)]
	for i, m := range msgs {
		if cap(out[i]) < size {
			out[i] = make([]byte, CodecInt8.msgSize(len(ow.res)))
		}
		b := out[i][:size]
		copy(b, m[:chunkHeaderSize+4*levels])
		clear(b[chunkHeaderSize+4*levels : chunkHeaderSize+int8TableSize])
		unpackBytes(b[chunkHeaderSize+int8TableSize:], m[chunkHeaderSize+4*levels:], ow.p.bits)
		out[i] = b
	}
	return out
}

// combineTopK runs the rule on the top-k contributions restricted to the
// union of their supports (outside it every contribution is 0, and so are
// the median, the CenteredClip step and the trimmed mean: the same bits as
// over the whole chunk) and encodes the result on the union of the
// supports of the members the rule admitted, with a count per block unless
// every block keeps its fixed count.
func (ow *ownerWork) combineTopK(rc *RobustConfig, weights []float32, msgs [][]byte, n int, v []Verdict, payload []byte) (int, error) {
	k := len(msgs)
	for len(ow.sps) < k {
		ow.sps = append(ow.sps, sparse{})
	}
	sps := ow.sps[:k]
	for i, m := range msgs {
		_ = ow.p.readTopK(m[chunkHeaderSize:], n, false, false, ow.pk.t[:], &sps[i]) // checked on arrival
	}
	u := &ow.tk
	u.build(sps, n)
	xs := ow.rows(k, len(u.idx))
	for i := range sps {
		u.scatter(xs[i], &sps[i])
	}
	resU := ow.res[:len(u.idx)]
	robustMean(&ow.ws, rc, weights, xs, resU, v)
	var res sparse
	res.idx, res.vals = u.restrict(sps, ow.ws.active, n, resU)
	clear(ow.res[:n])
	for e, i := range res.idx {
		ow.res[i] = res.vals[e]
	}
	form := topkCounted
	if ow.p.fixedCounts(&res, n) {
		form = topkFixed
	}
	return ow.pk.tq.writeSparse(ow.p, payload, n, &res, form), nil
}

// topkUnion is the union of top-k supports of one chunk.
type topkUnion struct {
	mark []uint64  // (⌈n/64⌉) bit per value
	idx  []int32   // the union, increasing
	pos  []int32   // (n) a value's column in the union
	ridx []int32   // the result's support
	rval []float32 // the result's values on it
}

// build sets u.idx to the union of the supports of sps and u.pos to
// their columns.
func (u *topkUnion) build(sps []sparse, n int) {
	u.clear(n)
	for i := range sps {
		u.add(&sps[i])
	}
	u.idx = u.collect(u.idx[:0], true)
}

// clear empties the bitmap for n values.
func (u *topkUnion) clear(n int) {
	words := (n + 63) / 64
	if cap(u.mark) < words {
		u.mark, u.pos = make([]uint64, words), make([]int32, 64*words)
	}
	u.mark = u.mark[:words]
	clear(u.mark)
}

func (u *topkUnion) add(sp *sparse) {
	for _, i := range sp.idx {
		u.mark[i/64] |= 1 << (i % 64)
	}
}

// collect appends the marked values to dst in increasing order (and
// their columns to u.pos, with setPos).
func (u *topkUnion) collect(dst []int32, setPos bool) []int32 {
	for w, m := range u.mark {
		for ; m != 0; m &= m - 1 {
			i := int32(64*w + bits.TrailingZeros64(m))
			if setPos {
				u.pos[i] = int32(len(dst))
			}
			dst = append(dst, i)
		}
	}
	return dst
}

// scatter writes sp's values into x, one column per union entry.
func (u *topkUnion) scatter(x []float32, sp *sparse) {
	clear(x)
	for e, i := range sp.idx {
		x[u.pos[i]] = sp.vals[e]
	}
}

// restrict returns the result's support, the union of the supports of the
// active members (a subset of u.idx), and the values of resU (one per
// u.idx entry) on it.
func (u *topkUnion) restrict(sps []sparse, active []int, n int, resU []float32) ([]int32, []float32) {
	u.clear(n)
	for _, i := range active {
		u.add(&sps[i])
	}
	u.ridx = u.collect(u.ridx[:0], false)
	u.rval = u.rval[:0]
	for _, i := range u.ridx {
		u.rval = append(u.rval, resU[u.pos[i]])
	}
	return u.ridx, u.rval
}

// decodeOwn sets dst to the values of the owner's own result message out.
func (ow *ownerWork) decodeOwn(dst []float32, out []byte) error {
	p := out[chunkHeaderSize:]
	if ow.p.codec == CodecInt8 {
		decodeInt8Set(dst, &ow.t, p[int8TableSize:])
		return nil
	}
	if err := ow.pk.read(p, len(dst), true, true); err != nil {
		return err
	}
	ow.pk.apply(dst, p, 1, false)
	return nil
}

// decodeRaw decodes an int8 payload into x whatever its table holds
// (non-finite entries included: the rule rejects such contributions).
func decodeRaw(x []float32, payload []byte) {
	var t [256]float32
	rawTable(&t, payload)
	decodeInt8Set(x, &t, payload[int8TableSize:int8TableSize+len(x)])
}
