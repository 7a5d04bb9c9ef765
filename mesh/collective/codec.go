package collective

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// The compressed codecs (CodecQ4, CodecQ2, CodecQ1, CodecTopK) and what they
// share:
// their parameters, message sizes and the bit packing.
//
// Payloads after the 12-byte chunk header:
//
//	CodecQ4, CodecQ2, CodecQ1 (b = 4, 2, 1): 2^b float32 LE levels, then n b-bit
//	  codes packed LSB first (value i at bit i·b), zero padded to a byte.
//	CodecTopK: a 10-byte descriptor
//	  off 0 uint8  b, bits per kept value (2 or 4)
//	  off 1 uint8  form: 0 = every block keeps its fixed count (a member's
//	               contribution), 1 = counted (an owner's result)
//	  off 2 uint32 block size B, big-endian
//	  off 6 uint32 entries E, big-endian
//	then 2^b float32 LE levels, then one bit stream, LSB first, zero padded
//	to a byte: (form 1 only) ⌈n/B⌉ block counts of cb bits, E indices of ib
//	bits (relative to their block, strictly increasing within it, blocks in
//	order), E codes of b bits. ib = ⌈log2 B⌉, cb = ⌈log2(B+1)⌉.
//
// Every message's length follows from its header and descriptor alone
// (chunkMsgLen), so concatenated messages can be cut apart without the
// configuration.
const (
	topkDescSize = 10
	topkFixed    = 0 // form: the fixed count per block
	topkCounted  = 1 // form: a count per block
)

// Defaults and limits of the compressed codecs' parameters.
const (
	// DefaultTopK is the entries CodecTopK keeps per block (1.56 % of
	// DefaultTopKBlock, SparseLoCo's).
	DefaultTopK = 64
	// DefaultTopKBlock is the values per CodecTopK block.
	DefaultTopKBlock = 4096
	// DefaultTopKBits is the bits per value CodecTopK keeps.
	DefaultTopKBits = 2
)

// codecParams is a validated codec with its parameters: what every member
// of an attempt must agree on to read each other's bytes.
type codecParams struct {
	codec Codec
	topK  int     // CodecTopK: entries per full block
	block int     // CodecTopK: values per block
	bits  int     // CodecQ4: 4, CodecQ2: 2, CodecQ1: 1, CodecTopK: TopKBits
	decay float32 // FeedbackDecay β
}

// params returns the codec parameters of a validated configuration.
func (c *AllReduceConfig) params() codecParams {
	p := codecParams{codec: c.Codec, decay: c.FeedbackDecay, topK: c.TopK, block: c.TopKBlock, bits: c.TopKBits}
	if c.Codec != CodecTopK {
		p.bits = denseBits(c.Codec)
	}
	return p
}

// denseBits is the bits per value of CodecQ4, CodecQ2 and CodecQ1 (0 for
// others).
func denseBits(c Codec) int {
	switch c {
	case CodecQ4:
		return 4
	case CodecQ2:
		return 2
	case CodecQ1:
		return 1
	}
	return 0
}

// validateCodec fills the defaults of the codec's parameters and rejects
// out-of-range values. The top-k parameters of another codec are cleared,
// so that they do not make equal configurations differ.
func (c *AllReduceConfig) validateCodec() error {
	if c.FeedbackDecay == 0 {
		c.FeedbackDecay = 1
	}
	if c.Codec != CodecTopK {
		c.TopK, c.TopKBlock, c.TopKBits = 0, 0, 0
	} else {
		c.TopKBlock = orDefault(c.TopKBlock, DefaultTopKBlock)
		c.TopK = orDefault(c.TopK, min(DefaultTopK, c.TopKBlock))
		c.TopKBits = orDefault(c.TopKBits, DefaultTopKBits)
	}
	d := c.FeedbackDecay
	switch {
	case !(d > 0 && d <= 1):
		return fmt.Errorf("%w: FeedbackDecay %v not in (0, 1]", ErrInvalidArgument, d)
	case d != 1 && !c.Codec.compressed():
		return fmt.Errorf("%w: FeedbackDecay %v: %v takes 1", ErrInvalidArgument, d, c.Codec)
	case c.Codec != CodecTopK:
		return nil
	case c.TopKBlock < 1 || c.TopKBlock > MaxChunkElems:
		return fmt.Errorf("%w: TopKBlock %d not in 1..%d", ErrInvalidArgument, c.TopKBlock, MaxChunkElems)
	case c.TopK < 1 || c.TopK > c.TopKBlock:
		return fmt.Errorf("%w: TopK %d not in 1..TopKBlock (%d)", ErrInvalidArgument, c.TopK, c.TopKBlock)
	case c.TopKBits != 2 && c.TopKBits != 4:
		return fmt.Errorf("%w: TopKBits %d not 2 or 4", ErrInvalidArgument, c.TopKBits)
	}
	return c.params().checkCounts(c.ChunkElems)
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// checkCounts rejects chunks of so many top-k blocks that a result's
// block counts could make it larger than two contributions: the counts of
// one chunk must fit in the header, descriptor and table a second
// contribution brings (topkResultBound).
func (p codecParams) checkCounts(chunkElems int) error {
	nb := (chunkElems + p.block - 1) / p.block
	if nb*countBits(p.block) > 8*(p.fixedOverhead()-1) {
		return fmt.Errorf("%w: %d top-k blocks of %d per chunk of %d values: at most %d", ErrInvalidArgument,
			nb, p.block, chunkElems, 8*(p.fixedOverhead()-1)/countBits(p.block))
	}
	return nil
}

// compressed reports the codecs that encode each contribution once with
// error feedback in the member's own units and gather contributions on
// the ring.
func (c Codec) compressed() bool { return denseBits(c) > 0 || c == CodecTopK }

// levels is the number of table entries of a dense or top-k message.
func (p codecParams) levels() int { return 1 << p.bits }

// fixedOverhead is the bytes of a top-k message besides its bit stream:
// header, descriptor and table.
func (p codecParams) fixedOverhead() int { return chunkHeaderSize + topkDescSize + 4*p.levels() }

// indexBits is ⌈log2 B⌉, the bits of a block-relative index.
func indexBits(block int) int { return bits.Len(uint(block - 1)) }

// countBits is ⌈log2(B+1)⌉, the bits of a block's entry count.
func countBits(block int) int { return bits.Len(uint(block)) }

// blockKeep is the entries a block of m values keeps: ⌈m·K/B⌉ (K for a
// full block).
func (p codecParams) blockKeep(m int) int { return (m*p.topK + p.block - 1) / p.block }

// entries is the entries a top-k contribution of n values keeps.
func (p codecParams) entries(n int) int {
	return n/p.block*p.topK + p.blockKeep(n%p.block)
}

// msgSize is the size of a contribution of n values (every message of the
// fixed-size codecs; a top-k result can differ: topkLen).
func (p codecParams) msgSize(n int) int {
	switch p.codec {
	case CodecQ4, CodecQ2, CodecQ1:
		return chunkHeaderSize + 4*p.levels() + (n*p.bits+7)/8
	case CodecTopK:
		return topkLen(n, p.block, p.entries(n), p.bits, topkFixed)
	}
	return p.codec.msgSize(n)
}

// segmentSize is the size of a contribution to a segment of n values in
// chunks of chunkElems.
func (p codecParams) segmentSize(n, chunkElems int) int {
	size := n / chunkElems * p.msgSize(chunkElems)
	if n%chunkElems != 0 {
		size += p.msgSize(n % chunkElems)
	}
	return size
}

// addDecayed adds β·res to x (res may be nil): float32(β·r) rounded
// before the addition, so no platform fuses a multiply-add (β = 1 adds
// res exactly).
func addDecayed(x, res []float32, beta float32) {
	if res == nil {
		return
	}
	res = res[:len(x)]
	for i, r := range res {
		x[i] += float32(beta * r)
	}
}

// maxMsgSize bounds every message of n values: for a top-k result, one
// that keeps every value.
func (p codecParams) maxMsgSize(n int) int {
	if p.codec == CodecTopK {
		return topkLen(n, p.block, n, p.bits, topkCounted)
	}
	return p.msgSize(n)
}

// topkLen is the size of a top-k message of n values, block size B, E
// entries of b bits, in the given form.
func topkLen(n, block, e, b, form int) int {
	nbits := e * (indexBits(block) + b)
	if form == topkCounted {
		nbits += (n + block - 1) / block * countBits(block)
	}
	return chunkHeaderSize + topkDescSize + 4<<b + (nbits+7)/8
}

// topkDesc is a top-k message's descriptor.
type topkDesc struct {
	bits, form, block, entries int
}

func putTopkDesc(p []byte, d topkDesc) {
	p[0], p[1] = byte(d.bits), byte(d.form)
	binary.BigEndian.PutUint32(p[2:], uint32(d.block))
	binary.BigEndian.PutUint32(p[6:], uint32(d.entries))
}

// readTopkDesc reads and checks the descriptor of a top-k message of n
// values (payload after the header); it returns the message's length.
func readTopkDesc(p []byte, n int) (topkDesc, int, bool) {
	if len(p) < topkDescSize {
		return topkDesc{}, 0, false
	}
	d := topkDesc{bits: int(p[0]), form: int(p[1]), block: int(binary.BigEndian.Uint32(p[2:])),
		entries: int(binary.BigEndian.Uint32(p[6:]))}
	if d.bits != 2 && d.bits != 4 || d.form > topkCounted || d.block < 1 || d.block > MaxChunkElems ||
		d.entries > n || n > MaxChunkElems {
		return d, 0, false
	}
	return d, topkLen(n, d.block, d.entries, d.bits, d.form), true
}

// bitWriter packs values LSB first into a byte slice.
type bitWriter struct {
	buf  []byte
	acc  uint64
	nacc uint
	off  int
}

// put appends the low w bits of v (w ≤ 32).
func (bw *bitWriter) put(v uint32, w int) {
	bw.acc |= uint64(v) << bw.nacc
	bw.nacc += uint(w)
	for bw.nacc >= 8 {
		bw.buf[bw.off] = byte(bw.acc)
		bw.off++
		bw.acc >>= 8
		bw.nacc -= 8
	}
}

// flush writes the last partial byte, zero padded, and returns the bytes
// written.
func (bw *bitWriter) flush() int {
	if bw.nacc > 0 {
		bw.buf[bw.off] = byte(bw.acc)
		bw.off++
		bw.acc, bw.nacc = 0, 0
	}
	return bw.off
}

// bitReader reads values LSB first from a byte slice; reads past its end
// yield zeros (the callers check lengths first).
type bitReader struct {
	buf  []byte
	acc  uint64
	nacc uint
	off  int
}

// get returns the next w bits (w ≤ 32).
func (br *bitReader) get(w int) uint32 {
	for br.nacc < uint(w) {
		var b byte
		if br.off < len(br.buf) {
			b = br.buf[br.off]
		}
		br.off++
		br.acc |= uint64(b) << br.nacc
		br.nacc += 8
	}
	v := uint32(br.acc & (1<<uint(w) - 1))
	br.acc >>= uint(w)
	br.nacc -= uint(w)
	return v
}

// padClean reports whether the bits left in the reader's last byte are
// zero (canonical padding).
func (br *bitReader) padClean() bool { return br.acc == 0 }

// writeTable writes levels as float32 LE.
func writeTable(p []byte, levels []float32) {
	for i, v := range levels {
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(v))
	}
}

// loadTable reads len(t) float32 LE levels; with check it rejects
// non-finite ones (ErrNonFinite), otherwise takes them as they are (the
// robust rule rejects the contributions that use them).
func loadTable(t []float32, p []byte, check bool) error {
	for i := range t {
		v := math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
		if check && (math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) {
			return fmt.Errorf("%w: table entry %d", ErrNonFinite, i)
		}
		t[i] = v
	}
	return nil
}

// packer encodes and decodes the payloads of the compressed codecs (and
// fp32's, for the scatter's generic path) for one goroutine.
type packer struct {
	p  codecParams
	dq denseQuant
	tq topkQuant
	t  [maxLevels]float32 // the table of the payload last read
	sp sparse             // the entries of the top-k payload last read
}

// encode writes the payload of contribution x (not empty) and returns its
// length; with res it stores there what the encoding lost, x − decoded.
// ErrNonFinite if x holds a NaN or ±Inf.
func (pk *packer) encode(payload []byte, x, res []float32) (int, error) {
	switch pk.p.codec {
	case CodecQ4, CodecQ2, CodecQ1:
		if err := pk.dq.encodeDense(payload, x, res, pk.p.bits); err != nil {
			return 0, err
		}
	case CodecTopK:
		if err := pk.tq.encodeTopK(pk.p, payload, x, res); err != nil {
			return 0, err
		}
	case CodecFP32:
		clear(res)
		if err := encodeFP32(payload, x); err != nil {
			return 0, err
		}
	}
	return pk.p.msgSize(len(x)) - chunkHeaderSize, nil
}

// read parses the payload of a message of n values whose length is
// checked (parse): the table into pk.t, a top-k payload's entries into
// pk.sp. check rejects non-finite table entries (ErrNonFinite); counted
// accepts a top-k result's counted form. Errors wrap ErrBadChunk or
// ErrNonFinite.
func (pk *packer) read(payload []byte, n int, counted, check bool) error {
	switch pk.p.codec {
	case CodecQ4, CodecQ2, CodecQ1:
		return denseTable(pk.t[:], payload, n, pk.p.bits, check)
	case CodecTopK:
		return pk.p.readTopK(payload, n, counted, check, pk.t[:], &pk.sp)
	case CodecFP32:
		if !check {
			return nil
		}
		var acc float32
		for i := range n {
			v := math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:]))
			acc += v - v
		}
		if acc != 0 {
			return ErrNonFinite
		}
	}
	return nil
}

// apply sets dst (n values) to the values of the payload last read, or,
// with add, adds float32(scale·value) to it.
func (pk *packer) apply(dst []float32, payload []byte, scale float32, add bool) {
	switch pk.p.codec {
	case CodecQ4, CodecQ2, CodecQ1:
		decodeDense(dst, pk.t[:], payload, pk.p.bits, scale, add)
	case CodecTopK:
		if !add {
			clear(dst)
			for e, i := range pk.sp.idx {
				dst[i] = pk.sp.vals[e]
			}
			return
		}
		for e, i := range pk.sp.idx {
			dst[i] += float32(scale * pk.sp.vals[e])
		}
	case CodecFP32:
		for i := range dst {
			v := math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:]))
			if add {
				dst[i] += float32(scale * v)
			} else {
				dst[i] = v
			}
		}
	}
}

// parse checks a received message against the header expected and its
// length against the codec: a top-k result's (counted) against its own
// descriptor, every other message against msgSize. It returns the payload.
func (p codecParams) parse(msg []byte, want chunkHeader, counted bool) ([]byte, error) {
	if p.codec != CodecTopK || !counted {
		return parseSized(msg, want, p.msgSize(int(want.n)))
	}
	payload, err := parseSized(msg, want, -1)
	if err != nil {
		return nil, err
	}
	_, size, ok := readTopkDesc(payload, int(want.n))
	if !ok || size != len(msg) {
		return nil, fmt.Errorf("%w: %d bytes for a top-k result of %d values", ErrBadChunk, len(msg), want.n)
	}
	return payload, nil
}
