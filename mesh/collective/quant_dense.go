package collective

import (
	"fmt"
)

// Dense b-bit quantization (CodecQ4, CodecQ2, CodecQ1). The int8 codec's pass
// (√-spaced buckets over the chunk's range about its mean, with the sum
// and count of each, the AVX2 loops where there are some) makes a
// 256-bin histogram; the bins are grouped into 2^b buckets of least
// squared error (quant_groups.go), each decoding to the mean of the values
// that fell into it, so that every bucket's sum is kept. A value's code is
// its bin's group. docs/allreduce.md has the measurements behind the
// choice (against Lloyd iterations from Gaussian thresholds).

// maxLevels is the largest table of the compressed codecs (4 bits).
const maxLevels = 16

// denseQuant is the scratch space of the dense encoder; one per goroutine.
type denseQuant struct {
	qz    quantizer
	dp    groupDP
	lev   [maxLevels]float32
	group [256]uint8 // a bin's bucket
	bins  [256]uint8 // the non-empty bins, in order
	codes []uint8    // (n) each value's bin
}

// b2u is 1 for true, 0 for false (the compiler makes it branch-free).
func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// bucketOf returns the number of thresholds below x, thr sorted, by a
// branch-free binary search over len(thr)+1 = levels buckets.
func bucketOf(x float32, thr []float32, levels int) uint8 {
	var c uint8
	for s := levels / 2; s >= 1; s /= 2 {
		c += uint8(s) * b2u(x > thr[int(c)+s-1])
	}
	return c
}

// quantize sets dq.lev, dq.group and dq.codes[:len(x)] (bins) for x (not
// empty), 2^b levels.
func (dq *denseQuant) quantize(x []float32, b int) error {
	st := prepScan(x, nil, 1)
	if st.sum-st.sum != 0 { // NaN or ±Inf
		return ErrNonFinite
	}
	if cap(dq.codes) < len(x) {
		dq.codes = make([]uint8, len(x))
	}
	codes, levels := dq.codes[:len(x)], 1<<b
	mean := float32(st.sum / float64(len(x)))
	m, ok := newBucketMap(st, len(x), modeSqrt)
	if !ok { // constant, or a range too small for float32: one bucket
		clear(codes)
		dq.group = [256]uint8{}
		for c := range levels {
			dq.lev[c] = mean
		}
		return nil
	}
	dq.qz.sum, dq.qz.count = [4][256]float64{}, [4][256]uint32{}
	quantizeSqrt(codes, x, m.mu, m.invR, &dq.qz)
	dq.groupBins(levels, mean)
	return nil
}

// groupBins groups the histogram's non-empty bins into levels buckets of
// least squared error and sets dq.group and dq.lev (an empty bucket, when
// fewer bins than levels are used, decodes to the chunk's mean).
func (dq *denseQuant) groupBins(levels int, mean float32) {
	k := &dq.dp
	nb := 0
	for bin := range 256 {
		var s float64
		var c uint32
		for l := range 4 {
			s += dq.qz.sum[l][bin]
			c += dq.qz.count[l][bin]
		}
		if c > 0 {
			dq.bins[nb] = uint8(bin)
			k.ps[nb+1], k.pc[nb+1] = k.ps[nb]+s, k.pc[nb]+float64(c)
			nb++
		}
	}
	var cut [maxLevels + 1]int
	k.cuts(nb, levels, cut[:])
	dq.group = [256]uint8{}
	for g := range levels {
		dq.lev[g] = mean
		if n := k.pc[cut[g+1]] - k.pc[cut[g]]; n > 0 {
			dq.lev[g] = float32((k.ps[cut[g+1]] - k.ps[cut[g]]) / n)
		}
		for _, bin := range dq.bins[cut[g]:cut[g+1]] {
			dq.group[bin] = uint8(g)
		}
	}
}

// encodeDense writes the payload (table and packed codes) of x with b bits
// and, with res, stores there what the quantization lost (x − decoded).
func (dq *denseQuant) encodeDense(payload []byte, x, res []float32, b int) error {
	if err := dq.quantize(x, b); err != nil {
		return err
	}
	levels := 1 << b
	writeTable(payload, dq.lev[:levels])
	codes := dq.codes[:len(x)]
	packCodes(payload[4*levels:], codes, &dq.group, b)
	if res != nil {
		res = res[:len(x)]
		for i, c := range codes {
			res[i] = x[i] - dq.lev[dq.group[c]]
		}
	}
	return nil
}

// packCodes packs the b-bit codes group[bin] of bins LSB first into dst
// (⌈len(bins)·b/8⌉ bytes).
func packCodes(dst []byte, bins []uint8, group *[256]uint8, b int) {
	per := 8 / b
	full := len(bins) / per
	dst = dst[:(len(bins)*b+7)/8]
	switch b {
	case 4:
		for i := range full {
			p := bins[2*i : 2*i+2 : 2*i+2]
			dst[i] = group[p[0]] | group[p[1]]<<4
		}
	case 2:
		for i := range full {
			p := bins[4*i : 4*i+4 : 4*i+4]
			dst[i] = group[p[0]] | group[p[1]]<<2 | group[p[2]]<<4 | group[p[3]]<<6
		}
	default:
		for i := range full {
			p := bins[8*i : 8*i+8 : 8*i+8]
			dst[i] = group[p[0]] | group[p[1]]<<1 | group[p[2]]<<2 | group[p[3]]<<3 |
				group[p[4]]<<4 | group[p[5]]<<5 | group[p[6]]<<6 | group[p[7]]<<7
		}
	}
	if rest := bins[full*per:]; len(rest) > 0 {
		var v byte
		for j, bin := range rest {
			v |= group[bin] << (j * b)
		}
		dst[full] = v
	}
}

// denseTable reads a dense payload's table into t (2^b entries), checking
// finiteness when check is set, and that the padding bits after the n
// codes are zero (canonical bytes).
func denseTable(t []float32, payload []byte, n, b int, check bool) error {
	levels := 1 << b
	if err := loadTable(t[:levels], payload, check); err != nil {
		return err
	}
	codes := payload[4*levels:]
	if r := n * b % 8; r != 0 && codes[len(codes)-1]>>r != 0 {
		return fmt.Errorf("%w: dense code padding", ErrBadChunk)
	}
	return nil
}

// decodeDense sets dst (n values) to the values of a dense payload's codes,
// t holding its table (from denseTable), or with add adds
// float32(scale·value) to them.
func decodeDense(dst []float32, t []float32, payload []byte, b int, scale float32, add bool) {
	levels := 1 << b
	var st [maxLevels]float32
	for c := range levels {
		st[c] = t[c]
		if add {
			st[c] = float32(scale * t[c])
		}
	}
	codes := payload[4*levels : 4*levels+(len(dst)*b+7)/8]
	if add {
		unpackAdd(dst, &st, codes, b)
	} else {
		unpackSet(dst, &st, codes, b)
	}
}

// unpackSet sets dst[i] to st[code i], a byte of codes at a time through
// a table of what each byte decodes to.
func unpackSet(dst []float32, st *[maxLevels]float32, codes []byte, b int) {
	if b == 1 {
		unpackBits(dst, st, codes, false)
		return
	}
	var bt [256 * 4]float32 // byte → its 8/b values
	byteTable(&bt, st, b)
	switch b {
	case 4:
		full := len(dst) / 2
		d := dst[:2*full]
		for i, c := range codes[:full] {
			t := bt[2*int(c) : 2*int(c)+2 : 2*int(c)+2]
			d[2*i], d[2*i+1] = t[0], t[1]
		}
	default:
		full := len(dst) / 4
		d := dst[:4*full]
		for i, c := range codes[:full] {
			t := bt[4*int(c) : 4*int(c)+4 : 4*int(c)+4]
			d[4*i], d[4*i+1], d[4*i+2], d[4*i+3] = t[0], t[1], t[2], t[3]
		}
	}
	unpackTail(dst, st, codes, b, false)
}

// unpackAdd adds st[code i] to dst[i].
func unpackAdd(dst []float32, st *[maxLevels]float32, codes []byte, b int) {
	if b == 1 {
		unpackBits(dst, st, codes, true)
		return
	}
	var bt [256 * 4]float32
	byteTable(&bt, st, b)
	switch b {
	case 4:
		full := len(dst) / 2
		d := dst[:2*full]
		for i, c := range codes[:full] {
			t := bt[2*int(c) : 2*int(c)+2 : 2*int(c)+2]
			d[2*i] += t[0]
			d[2*i+1] += t[1]
		}
	default:
		full := len(dst) / 4
		d := dst[:4*full]
		for i, c := range codes[:full] {
			t := bt[4*int(c) : 4*int(c)+4 : 4*int(c)+4]
			d[4*i] += t[0]
			d[4*i+1] += t[1]
			d[4*i+2] += t[2]
			d[4*i+3] += t[3]
		}
	}
	unpackTail(dst, st, codes, b, true)
}

// unpackBits sets (or with add adds) st[bit i of codes] to dst[i]: the
// 1-bit codes, a byte's eight values at a time.
func unpackBits(dst []float32, st *[maxLevels]float32, codes []byte, add bool) {
	lv := [2]float32{st[0], st[1]}
	full := len(dst) / 8
	d := dst[:8*full]
	for i, c := range codes[:full] {
		o := d[8*i : 8*i+8 : 8*i+8]
		for j := range o {
			if add {
				o[j] += lv[c>>j&1]
			} else {
				o[j] = lv[c>>j&1]
			}
		}
	}
	unpackTail(dst, st, codes, 1, add)
}

// unpackBytes writes the len(dst) b-bit codes of codes one per byte.
func unpackBytes(dst, codes []byte, b int) {
	per, mask := 8/b, byte(1<<b-1)
	full := len(dst) / per
	switch b {
	case 4:
		d := dst[:2*full]
		for i, c := range codes[:full] {
			d[2*i], d[2*i+1] = c&15, c>>4
		}
	case 2:
		d := dst[:4*full]
		for i, c := range codes[:full] {
			d[4*i], d[4*i+1], d[4*i+2], d[4*i+3] = c&3, c>>2&3, c>>4&3, c>>6
		}
	default:
		d := dst[:8*full]
		for i, c := range codes[:full] {
			for j := range 8 {
				d[8*i+j] = c >> j & 1
			}
		}
	}
	for i := full * per; i < len(dst); i++ {
		dst[i] = codes[i/per] >> (i % per * b) & mask
	}
}

// byteTable sets bt[byte·per + j] to st[code j of byte], per = 8/b.
func byteTable(bt *[256 * 4]float32, st *[maxLevels]float32, b int) {
	per, mask := 8/b, 1<<b-1
	for c := range 256 {
		for j := range per {
			bt[c*per+j] = st[c>>(j*b)&mask]
		}
	}
}

// unpackTail decodes the values after the last full byte of codes.
func unpackTail(dst []float32, st *[maxLevels]float32, codes []byte, b int, add bool) {
	per, mask := 8/b, byte(1<<b-1)
	for i := len(dst) / per * per; i < len(dst); i++ {
		v := st[codes[i/per]>>(i%per*b)&mask]
		if add {
			dst[i] += v
		} else {
			dst[i] = v
		}
	}
}
