package collective

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Codec selects how the all-reduce puts a chunk of float32 values on the wire.
type Codec uint8

// Codecs. Wire values: append only, never renumber.
const (
	// CodecInt8 sends one byte per value plus a 256-entry float32 table per
	// chunk: each code decodes to the mean of the values that fell into its
	// bucket (as PRIME did), and the buckets are uniform in sign(d)·√|d| with
	// d = (x−mean)/max|x−mean|, so nothing is clipped and they are finest near
	// the mean. The default.
	CodecInt8 Codec = 1
	// CodecFP32 sends float32 values unchanged (little-endian), for comparisons.
	CodecFP32 Codec = 2
	// CodecQ4 sends 4 bits per value plus a 16-entry float32 table per chunk:
	// Lloyd–Max buckets for bell-shaped data (Gaussian thresholds × the
	// chunk's spread about its mean, then Lloyd iterations on the chunk),
	// each decoding to the mean of the values that fell into it.
	CodecQ4 Codec = 3
	// CodecQ2 is CodecQ4 with 2 bits per value and a 4-entry table.
	CodecQ2 Codec = 4
	// CodecTopK is sparse: per block of TopKBlock values the TopK of
	// largest magnitude, their block-relative indices and TopKBits-bit codes
	// of one table of bucket means per chunk (SparseLoCo's recipe).
	CodecTopK Codec = 5
	// CodecQ1 is CodecQ4 with 1 bit per value and a 2-entry table: each
	// value is sent as the side of the chunk's least-squares cut it lies on.
	CodecQ1 Codec = 6
)

// ClipSigma is the half-width, in standard deviations of a chunk, of the
// range PRIME's clipped int8 scheme spreads its buckets over; kept to compare
// with (docs/allreduce.md).
const ClipSigma = 4

// Chunk message layout, shared by every transport:
//
//	off 0  uint8   codec
//	off 1  uint8   phase (0 reduce-scatter, 1 all-gather, 2 and 3 the direct
//	               scatter's contribution and result, 4 the ring's gather
//	               of compressed contributions)
//	off 2  uint16  step within the phase, big-endian (phases 2 and 3: the
//	               segment; phase 4: the contribution's origin rank)
//	off 4  uint32  chunk index within its segment, big-endian
//	off 8  uint32  number of values n, big-endian
//	off 12 payload: CodecInt8: 256 × float32 LE table, then n code bytes;
//	               CodecFP32: n × float32 LE; the compressed codecs: codec.go.
const (
	chunkHeaderSize = 12
	int8TableSize   = 256 * 4
)

// MaxChunkElems is the largest AllReduceConfig.ChunkElems accepted.
const MaxChunkElems = 1 << 20

// MaxChunkMsgSize is the largest chunk message any codec produces (fp32's;
// the compressed codecs stay below it, TestMaxChunkMsgSize); transports use
// it as their frame limit.
const MaxChunkMsgSize = chunkHeaderSize + int8TableSize + 4*MaxChunkElems

// Sentinel errors of the codec.
var (
	// ErrBadChunk reports a chunk message that does not parse or does not
	// match what the receiver expects at this point of the all-reduce.
	ErrBadChunk = errors.New("mesh: malformed all-reduce chunk")
	// ErrNonFinite reports a NaN or ±Inf in a vector or in a received chunk.
	ErrNonFinite = errors.New("mesh: non-finite value")
)

// String names the codec ("int8", "fp32", "q4", "q2", "topk", "q1").
func (c Codec) String() string {
	switch c {
	case CodecInt8:
		return "int8"
	case CodecFP32:
		return "fp32"
	case CodecQ4:
		return "q4"
	case CodecQ2:
		return "q2"
	case CodecTopK:
		return "topk"
	case CodecQ1:
		return "q1"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

func (c Codec) valid() bool { return c >= CodecInt8 && c <= CodecQ1 }

// msgSize is the size of a chunk message of n values of CodecInt8 or
// CodecFP32 (codecParams.msgSize sizes every codec).
func (c Codec) msgSize(n int) int {
	if c == CodecFP32 {
		return chunkHeaderSize + 4*n
	}
	return chunkHeaderSize + int8TableSize + n
}

// chunkHeader identifies a chunk message's place in the all-reduce.
type chunkHeader struct {
	codec Codec
	phase uint8
	step  uint16
	chunk uint32
	n     uint32
}

func putHeader(dst []byte, h chunkHeader) {
	dst[0] = byte(h.codec)
	dst[1] = h.phase
	binary.BigEndian.PutUint16(dst[2:], h.step)
	binary.BigEndian.PutUint32(dst[4:], h.chunk)
	binary.BigEndian.PutUint32(dst[8:], h.n)
}

// parseChunk checks a received int8 or fp32 message against the header
// the receiver expects and returns its payload. It never allocates.
func parseChunk(msg []byte, want chunkHeader) ([]byte, error) {
	return parseSized(msg, want, want.codec.msgSize(int(want.n)))
}

// parseSized is parseChunk for a message of size bytes (-1: any).
func parseSized(msg []byte, want chunkHeader, size int) ([]byte, error) {
	if len(msg) < chunkHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", ErrBadChunk, len(msg))
	}
	got := chunkHeader{
		codec: Codec(msg[0]),
		phase: msg[1],
		step:  binary.BigEndian.Uint16(msg[2:]),
		chunk: binary.BigEndian.Uint32(msg[4:]),
		n:     binary.BigEndian.Uint32(msg[8:]),
	}
	if got != want {
		return nil, fmt.Errorf("%w: got %+v, want %+v", ErrBadChunk, got, want)
	}
	if size >= 0 && len(msg) != size {
		return nil, fmt.Errorf("%w: %d bytes for %d %s values", ErrBadChunk, len(msg), want.n, want.codec)
	}
	return msg[chunkHeaderSize:], nil
}

// quantMode is how the int8 encoder places its 256 buckets.
type quantMode uint8

const (
	// modeSqrt, the default: buckets uniform in sign(d)·√|d|, where
	// d = (x−mean)/R and R = max|x−mean|, each decoding to the mean of its
	// values. Nothing is clipped; buckets are finest near the mean where most
	// values are and coarsest in the tails (see docs/allreduce.md).
	modeSqrt quantMode = iota
	// modeClip: PRIME's scheme, buckets uniform over mean ± ClipSigma·σ
	// (narrowed to [min, max]), each decoding to the mean of its values.
	modeClip
	// modeClipCentres: as modeClip, decoding to bucket centres; kept only to
	// measure what the bucket means buy.
	modeClipCentres
	// modeSqrtCentres: as modeSqrt, decoding to bucket centres; kept only to
	// measure what the bucket means buy.
	modeSqrtCentres
)

// quantizer holds the scratch space of the int8 encoder; one per goroutine.
type quantizer struct {
	sum   [4][256]float64
	count [4][256]uint32
	mode  quantMode
}

// chunkStats is what pass one of the encoder learns about a chunk.
type chunkStats struct {
	min, max  float32
	sum, sum2 float64
}

func scanChunk(src []float32) chunkStats {
	// Scalar accumulators: the compiler keeps them in registers (it would
	// not keep an array there).
	mn, mx := src[0], src[0]
	var s0, s1, s2, s3, q0, q1, q2, q3 float64
	i := 0
	for ; i+4 <= len(src); i += 4 {
		a, b, c, d := float64(src[i]), float64(src[i+1]), float64(src[i+2]), float64(src[i+3])
		s0 += a
		s1 += b
		s2 += c
		s3 += d
		q0 += a * a
		q1 += b * b
		q2 += c * c
		q3 += d * d
	}
	for ; i < len(src); i++ {
		a := float64(src[i])
		s0 += a
		q0 += a * a
	}
	for _, x := range src {
		if x < mn {
			mn = x
		}
		if x > mx {
			mx = x
		}
	}
	return chunkStats{min: mn, max: mx, sum: s0 + s1 + s2 + s3, sum2: q0 + q1 + q2 + q3}
}

// bucketMap maps values to codes and codes to bucket centres.
type bucketMap struct {
	sqrt     bool
	lo, inv  float32 // uniform: code = (x−lo)·inv
	mu, invR float32 // sqrt: d = (x−mu)·invR
	width    float64 // uniform: bucket width
	r        float64 // sqrt: R
}

// newBucketMap returns false when the chunk is constant or its range does
// not fit a float32, so that one bucket holds everything.
func newBucketMap(st chunkStats, n int, mode quantMode) (bucketMap, bool) {
	mean := st.sum / float64(n)
	if mode == modeSqrt || mode == modeSqrtCentres {
		r := max(float64(st.max)-mean, mean-float64(st.min))
		inv := float32(1 / r)
		ok := r > 0 && inv > 0 && !math.IsInf(float64(inv), 0) && !math.IsInf(r, 0)
		return bucketMap{sqrt: true, mu: float32(mean), invR: inv, r: r}, ok
	}
	sigma := math.Sqrt(max(st.sum2/float64(n)-mean*mean, 0))
	lo := float32(max(float64(st.min), mean-ClipSigma*sigma))
	hi := float32(min(float64(st.max), mean+ClipSigma*sigma))
	width := (float64(hi) - float64(lo)) / 255
	inv := float32(1 / width)
	ok := width > 0 && !math.IsInf(width, 0) && !math.IsInf(float64(inv), 0)
	return bucketMap{lo: lo, inv: inv, width: width}, ok
}

func (m *bucketMap) centre(b int) float32 {
	if m.sqrt {
		y := (float64(b) - 127.5) / 127.5
		return float32(float64(m.mu) + m.r*y*math.Abs(y))
	}
	return float32(float64(m.lo) + float64(b)*m.width)
}

// encodeInt8 writes the table and the codes of src into payload
// (int8TableSize + len(src) bytes) and the table into t. src must not be empty.
func (qz *quantizer) encodeInt8(payload []byte, t *[256]float32, src []float32) error {
	return qz.encodeInt8Scanned(payload, t, src, scanChunk(src))
}

// encodeInt8Scanned is encodeInt8 for a chunk whose min, max and sum st
// already holds (sum2 is recomputed if the mode needs it).
func (qz *quantizer) encodeInt8Scanned(payload []byte, t *[256]float32, src []float32, st chunkStats) error {
	if math.IsNaN(st.sum) || math.IsInf(st.sum, 0) {
		return ErrNonFinite
	}
	if qz.mode != modeSqrt && qz.mode != modeSqrtCentres {
		st = scanChunk(src)
	}
	codes := payload[int8TableSize : int8TableSize+len(src)]
	m, ok := newBucketMap(st, len(src), qz.mode)
	switch {
	case !ok:
		clear(codes)
		for b := range t {
			t[b] = float32(st.sum / float64(len(src)))
		}
	case qz.mode == modeClipCentres || qz.mode == modeSqrtCentres:
		if m.sqrt {
			quantizeSqrt(codes, src, m.mu, m.invR, nil)
		} else {
			quantizeUniform(codes, src, m.lo, m.inv, nil)
		}
		for b := range t {
			t[b] = m.centre(b)
		}
	default:
		qz.sum = [4][256]float64{}
		qz.count = [4][256]uint32{}
		if m.sqrt {
			quantizeSqrt(codes, src, m.mu, m.invR, qz)
		} else {
			quantizeUniform(codes, src, m.lo, m.inv, qz)
		}
		qz.means(t, &m)
	}
	for b := range t {
		binary.LittleEndian.PutUint32(payload[4*b:], math.Float32bits(t[b]))
	}
	return nil
}

// scanAcc gathers min, max and sum of a chunk in 8 lanes (value i goes to
// lane i mod 8), the layout of the AVX2 loops, so that both give the same
// bits.
type scanAcc struct {
	mn, mx [8]float32
	sum    [8]float64
}

func (a *scanAcc) init() {
	for l := range 8 {
		a.mn[l], a.mx[l] = float32(math.Inf(1)), float32(math.Inf(-1))
	}
}

func (a *scanAcc) stats() chunkStats {
	st := chunkStats{min: a.mn[0], max: a.mx[0]}
	for l := 1; l < 8; l++ {
		st.min, st.max = min32(st.min, a.mn[l]), max32(st.max, a.mx[l])
	}
	s := a.sum
	st.sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
	return st
}

// prepScan turns x into this member's contribution, x·scale + res (res may
// be nil), and returns its min, max and sum, in one pass.
func prepScan(x, res []float32, scale float32) chunkStats {
	var acc scanAcc
	acc.init()
	n8 := len(x) &^ 7
	if useAVX2 && n8 > 0 {
		prepScanAVX2(&x[0], first(res), n8, scale, &acc)
	} else {
		prepScanGo(x[:n8], sub(res, 0, n8), scale, &acc)
	}
	prepScanGo(x[n8:], sub(res, n8, len(x)), scale, &acc)
	return acc.stats()
}

// prepAddScan is prepScan that also adds the decoded codes to x.
func prepAddScan(x, res []float32, scale float32, t *[256]float32, codes []byte) chunkStats {
	var acc scanAcc
	acc.init()
	x = x[:len(codes)]
	n8 := len(x) &^ 7
	if useAVX2 && n8 > 0 {
		prepAddScanAVX2(&x[0], first(res), t, &codes[0], n8, scale, &acc)
	} else {
		prepAddScanGo(x[:n8], sub(res, 0, n8), scale, t, codes[:n8], &acc)
	}
	prepAddScanGo(x[n8:], sub(res, n8, len(x)), scale, t, codes[n8:], &acc)
	return acc.stats()
}

func first(s []float32) *float32 {
	if s == nil {
		return nil
	}
	return &s[0]
}

// prepScanGo is the reference of prepScanAVX2; x starts at a multiple of 8.
// float32(·) keeps the compiler from fusing the multiply-add, as the AVX2
// loop does not.
func prepScanGo(x, res []float32, scale float32, acc *scanAcc) {
	for i := range x {
		v := float32(x[i] * scale)
		if res != nil {
			v += res[i]
		}
		x[i] = v
		acc.add(i&7, v)
	}
}

// prepAddScanGo is the reference of prepAddScanAVX2.
func prepAddScanGo(x, res []float32, scale float32, t *[256]float32, codes []byte, acc *scanAcc) {
	x = x[:len(codes)]
	for i, c := range codes {
		v := float32(x[i] * scale)
		if res != nil {
			v += res[i]
		}
		v += t[c]
		x[i] = v
		acc.add(i&7, v)
	}
}

func (a *scanAcc) add(l int, v float32) {
	l &= 7
	a.mn[l] = min32(a.mn[l], v)
	a.mx[l] = max32(a.mx[l], v)
	a.sum[l] += float64(v)
}

// min32 and max32 are plain comparisons: a NaN shows up in the sum instead.
func min32(a, b float32) float32 {
	if b < a {
		return b
	}
	return a
}

func max32(a, b float32) float32 {
	if b > a {
		return b
	}
	return a
}

// means sets t to the mean of the values in each bucket, or its centre when
// it is empty. The mean of finite float32 values is a finite float32.
func (qz *quantizer) means(t *[256]float32, m *bucketMap) {
	for b := range t {
		var s float64
		var c uint32
		for l := range 4 {
			s += qz.sum[l][b]
			c += qz.count[l][b]
		}
		if c > 0 {
			t[b] = float32(s / float64(c))
		} else {
			t[b] = m.centre(b)
		}
	}
}

// uniformCode maps x to round((x−lo)·inv) clamped to [0, 255].
func uniformCode(x, lo, inv float32) uint8 {
	v := (x - lo) * inv
	v = min(max(v, 0), 255)
	return uint8(int32(v + 0.5))
}

// sqrtCode maps x to round(127.5 + 127.5·sign(d)·√|d|), d = (x−mu)·invR,
// clamped to [0, 255].
func sqrtCode(x, mu, invR float32) uint8 {
	d := (x - mu) * invR
	a := abs32(d)
	if a > 1 {
		a = 1
	}
	y := float32(math.Sqrt(float64(a)))
	y = math.Float32frombits(math.Float32bits(y) | math.Float32bits(d)&(1<<31)) // sign of d, branch-free
	return uint8(int32(y*127.5 + 128))                                          // 127.5 + 0.5 for rounding; y ∈ [−1, 1]
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// quantizeUniform writes uniform codes; with qz it also sums the values per
// bucket (see accumulate).
func quantizeUniform(codes []byte, src []float32, lo, inv float32, qz *quantizer) {
	codes = codes[:len(src)]
	for i, x := range src {
		codes[i] = uniformCode(x, lo, inv)
	}
	if qz != nil {
		qz.accumulate(codes, src)
	}
}

func quantizeSqrt(codes []byte, src []float32, mu, invR float32, qz *quantizer) {
	codes = codes[:len(src)]
	n8 := len(src) &^ 7
	if useAVX2 && n8 > 0 {
		sqrtCodesAVX2(&codes[0], &src[0], n8, mu, invR)
	} else {
		sqrtCodesGo(codes[:n8], src[:n8], mu, invR)
	}
	sqrtCodesGo(codes[n8:], src[n8:], mu, invR)
	if qz != nil {
		qz.accumulate(codes, src)
	}
}

// sqrtCodesGo is the reference of sqrtCodesAVX2.
func sqrtCodesGo(codes []byte, src []float32, mu, invR float32) {
	codes = codes[:len(src)]
	for i, x := range src {
		codes[i] = sqrtCode(x, mu, invR)
	}
}

// accumulate sums the values per bucket in four interleaved histograms, so
// that runs of equal codes do not serialize on one accumulator.
func (qz *quantizer) accumulate(codes []byte, src []float32) {
	codes = codes[:len(src)]
	s0, s1, s2, s3 := &qz.sum[0], &qz.sum[1], &qz.sum[2], &qz.sum[3]
	c0, c1, c2, c3 := &qz.count[0], &qz.count[1], &qz.count[2], &qz.count[3]
	i := 0
	for ; i+4 <= len(src); i += 4 {
		qa, qb, qc, qd := codes[i], codes[i+1], codes[i+2], codes[i+3]
		s0[qa] += float64(src[i])
		s1[qb] += float64(src[i+1])
		s2[qc] += float64(src[i+2])
		s3[qd] += float64(src[i+3])
		c0[qa]++
		c1[qb]++
		c2[qc]++
		c3[qd]++
	}
	for ; i < len(src); i++ {
		s0[codes[i]] += float64(src[i])
		c0[codes[i]]++
	}
}

// rawTable decodes a chunk's table whatever it holds (non-finite entries
// included: the robust rule rejects contributions that use them).
func rawTable(t *[256]float32, payload []byte) {
	for b := range t {
		t[b] = math.Float32frombits(binary.LittleEndian.Uint32(payload[4*b:]))
	}
}

// readTable decodes a chunk's table, rejecting non-finite entries.
func readTable(t *[256]float32, payload []byte) error {
	for b := range 256 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(payload[4*b:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: table entry %d", ErrNonFinite, b)
		}
		t[b] = v
	}
	return nil
}

// decodeInt8Add adds the decoded values of codes to dst.
func decodeInt8Add(dst []float32, t *[256]float32, codes []byte) {
	dst = dst[:len(codes)]
	for i, c := range codes {
		dst[i] += t[c]
	}
}

// decodeInt8Set overwrites dst with the decoded values of codes.
func decodeInt8Set(dst []float32, t *[256]float32, codes []byte) {
	n8 := len(codes) &^ 7
	if useAVX2 && n8 > 0 {
		decodeSetAVX2(&dst[0], t, &codes[0], n8)
		dst, codes = dst[n8:], codes[n8:]
	}
	decodeInt8SetGo(dst, t, codes)
}

// decodeInt8SetGo is the reference of decodeSetAVX2.
func decodeInt8SetGo(dst []float32, t *[256]float32, codes []byte) {
	dst = dst[:len(codes)]
	for i, c := range codes {
		dst[i] = t[c]
	}
}

// residualInt8 stores in res what quantizing src lost (src − decoded).
func residualInt8(res, src []float32, t *[256]float32, codes []byte) {
	res = res[:len(codes)]
	src = src[:len(codes)]
	for i, c := range codes {
		res[i] = src[i] - t[c]
	}
}

// decodeInt8Residual overwrites dst with the decoded values and stores in res
// what the quantization lost (x − decoded), for error feedback.
func decodeInt8Residual(dst, res []float32, t *[256]float32, codes []byte) {
	dst = dst[:len(codes)]
	res = res[:len(codes)]
	for i, c := range codes {
		v := t[c]
		res[i] = dst[i] - v
		dst[i] = v
	}
}

func encodeFP32(payload []byte, src []float32) error {
	payload = payload[:4*len(src)]
	var acc float32
	for i, x := range src {
		acc += x - x // NaN if x is NaN or ±Inf
		binary.LittleEndian.PutUint32(payload[4*i:], math.Float32bits(x))
	}
	if acc != 0 {
		return ErrNonFinite
	}
	return nil
}

// decodeFP32 adds (add) or copies the values of payload into dst and reports
// a non-finite value.
func decodeFP32(dst []float32, payload []byte, add bool) error {
	dst = dst[:len(payload)/4]
	var acc float32
	for i := range dst {
		v := math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:]))
		acc += v - v
		if add {
			dst[i] += v
		} else {
			dst[i] = v
		}
	}
	if acc != 0 {
		return ErrNonFinite
	}
	return nil
}
