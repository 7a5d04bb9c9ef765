package collective

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// codecCases are the compressed codecs with the parameters tests run.
var codecCases = []AllReduceConfig{
	{Codec: CodecQ4},
	{Codec: CodecQ2},
	{Codec: CodecQ1},
	{Codec: CodecTopK},
	{Codec: CodecTopK, TopKBits: 4},
}

func caseName(c AllReduceConfig) string {
	if c.Codec == CodecTopK {
		return fmt.Sprintf("topk-b%d", max(c.TopKBits, DefaultTopKBits))
	}
	return c.Codec.String()
}

// testParams validates cfg (with chunkElems) and returns its parameters.
func testParams(t testing.TB, cfg AllReduceConfig, chunkElems int) codecParams {
	t.Helper()
	cfg.ChunkElems = chunkElems
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg.params()
}

// encodeMsg encodes x as a whole message (header included) and returns it
// with the residual x − decoded.
func encodeMsg(t testing.TB, pk *packer, x []float32) (msg []byte, res []float32) {
	t.Helper()
	msg = make([]byte, pk.p.msgSize(len(x)))
	putHeader(msg, chunkHeader{codec: pk.p.codec, phase: phaseDirectScatter, n: uint32(len(x))})
	res = make([]float32, len(x))
	m, err := pk.encode(msg[chunkHeaderSize:], x, res)
	if err != nil {
		t.Fatal(err)
	}
	if m != len(msg)-chunkHeaderSize {
		t.Fatalf("payload of %d bytes, message size says %d", m, len(msg)-chunkHeaderSize)
	}
	return msg, res
}

// decodeMsg parses and decodes a message of n values.
func decodeMsg(p codecParams, msg []byte, n int, counted bool) ([]float32, error) {
	want := chunkHeader{codec: p.codec, phase: msg[1], n: uint32(n)}
	payload, err := p.parse(msg, want, counted)
	if err != nil {
		return nil, err
	}
	pk := packer{p: p}
	if err := pk.read(payload, n, counted, true); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	pk.apply(out, payload, 1, false)
	return out, nil
}

func distVec(rng *rand.Rand, gen func(*rand.Rand) float32, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = gen(rng)
	}
	return x
}

// TestCodecRoundTrip: every compressed codec decodes what it encoded, the
// residual is exactly x − decoded, and the error of one chunk against the
// float64 input stays within bounds (logged: the figures of
// docs/allreduce.md).
func TestCodecRoundTrip(t *testing.T) {
	const n = 1 << 16
	// Bounds on the error of the values sent: every value for the dense
	// codecs, the kept entries for top-k (its error against all of x is
	// logged: what error feedback carries to the next round).
	bound := map[string]float64{"q4": 0.2, "q2": 0.62, "q1": 0.82, "topk-b2": 0.45, "topk-b4": 0.12}
	for _, c := range codecCases {
		p := testParams(t, c, n)
		for _, d := range dists {
			x := distVec(rand.New(rand.NewPCG(5, 5)), d.gen, n)
			pk := packer{p: p}
			msg, res := encodeMsg(t, &pk, x)
			got, err := decodeMsg(p, msg, n, false)
			if err != nil {
				t.Fatalf("%s %s: %v", caseName(c), d.name, err)
			}
			for i := range x {
				if math.Float32bits(res[i]) != math.Float32bits(x[i]-got[i]) {
					t.Fatalf("%s %s: residual %d is %v, x − decoded %v", caseName(c), d.name, i, res[i], x[i]-got[i])
				}
			}
			e, all := relErr(got, toF64(x)), ""
			if c.Codec == CodecTopK {
				all = fmt.Sprintf(", against all values %.4f", e)
				e = keptErr(got, x, &pk.tq.kept)
			}
			t.Logf("%-8s %-15s relative L2 error %.4f%s, %.3f bits per value", caseName(c), d.name, e, all, 8*float64(len(msg))/n)
			if e > bound[caseName(c)] {
				t.Errorf("%s %s: error %.4f above %.2f", caseName(c), d.name, e, bound[caseName(c)])
			}
		}
	}
}

// TestCodecQ1Optimal: on Gaussian values the 1-bit codec's two buckets
// are the least-squares cut, the mean of each half: relative L2 error
// √(1 − 2/π) ≈ 0.6028, the best any 1-bit quantizer reaches (Max 1960).
func TestCodecQ1Optimal(t *testing.T) {
	const n = 1 << 16
	p := testParams(t, AllReduceConfig{Codec: CodecQ1}, n)
	x := gaussian(rand.New(rand.NewPCG(7, 7)), n, false)
	pk := packer{p: p}
	msg, _ := encodeMsg(t, &pk, x)
	got, err := decodeMsg(p, msg, n, false)
	if err != nil {
		t.Fatal(err)
	}
	want := math.Sqrt(1 - 2/math.Pi)
	if e := relErr(got, toF64(x)); math.Abs(e-want) > 0.005 {
		t.Fatalf("relative L2 error %.4f, the optimal 1-bit quantizer's is %.4f", e, want)
	}
	if len(msg) != chunkHeaderSize+2*4+n/8 {
		t.Fatalf("%d bytes for %d values: want a 2-entry table and one bit each", len(msg), n)
	}
}

// TestCodecBucketMeans: every level of a dense or top-k table is the mean
// of the values that fell into its bucket, so each bucket's sum is kept.
func TestCodecBucketMeans(t *testing.T) {
	const n = 20000
	x := gaussian(rand.New(rand.NewPCG(6, 6)), n, true)
	for _, c := range codecCases {
		p := testParams(t, c, DefaultChunkElems)
		pk := packer{p: p}
		msg, _ := encodeMsg(t, &pk, x)
		got, err := decodeMsg(p, msg, n, false)
		if err != nil {
			t.Fatal(err)
		}
		sums := map[float32][2]float64{} // level → Σx, count
		for i, v := range got {
			if c.Codec == CodecTopK && !isKept(&pk.tq.kept, i) {
				continue
			}
			s := sums[v]
			sums[v] = [2]float64{s[0] + float64(x[i]), s[1] + 1}
		}
		for lev, s := range sums {
			if mean := s[0] / s[1]; math.Abs(float64(lev)-mean) > 1e-6*math.Max(1, math.Abs(mean)) {
				t.Fatalf("%s: level %v holds %v values of mean %v", caseName(c), lev, s[1], mean)
			}
		}
	}
}

// keptErr is the relative L2 error of got against x on the kept entries.
func keptErr(got, x []float32, sp *sparse) float64 {
	g, w := make([]float32, len(sp.idx)), make([]float64, len(sp.idx))
	for e, i := range sp.idx {
		g[e], w[e] = got[i], float64(x[i])
	}
	return relErr(g, w)
}

func isKept(sp *sparse, i int) bool {
	for _, j := range sp.idx {
		if int(j) == i {
			return true
		}
	}
	return false
}

// TestTopKSelection: each block keeps the entries of largest magnitude,
// ties to the lower index, a short block ⌈len·K/B⌉ of them.
func TestTopKSelection(t *testing.T) {
	p := testParams(t, AllReduceConfig{Codec: CodecTopK, TopK: 3, TopKBlock: 8}, 64)
	x := []float32{1, -5, 5, 0, 2, -2, 2, 0.5 /* block 2 */, 0, 0, 0, 0, 0, 0, 0, 0 /* short */, 7, -1, 3}
	var tq topkQuant
	tq.selectChunk(p, x)
	want := []int32{1, 2, 4, 8, 9, 10, 16, 18}
	if fmt.Sprint(tq.kept.idx) != fmt.Sprint(want) {
		t.Fatalf("kept %v, want %v", tq.kept.idx, want)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		blk := make([]float32, 1+rng.IntN(300))
		for i := range blk {
			blk[i] = float32(rng.IntN(9) - 4) // many ties
		}
		keep := 1 + rng.IntN(len(blk))
		tq.kept.reset(len(blk))
		tq.selectTopK(blk, 0, keep)
		if got, want := fmt.Sprint(tq.kept.idx), fmt.Sprint(naiveTopK(blk, keep)); got != want {
			t.Fatalf("top %d of %v: %s, want %s", keep, blk, got, want)
		}
	}
}

// naiveTopK is the selection by repeated scans.
func naiveTopK(x []float32, k int) []int32 {
	taken := make([]bool, len(x))
	for range k {
		best := -1
		for i, v := range x {
			if !taken[i] && (best < 0 || abs32(v) > abs32(x[best])) {
				best = i
			}
		}
		taken[best] = true
	}
	var out []int32
	for i, tk := range taken {
		if tk {
			out = append(out, int32(i))
		}
	}
	return out
}

// TestCodecSpecial: constant chunks, a single value, huge ranges and zeros
// encode to finite tables; non-finite input is refused.
func TestCodecSpecial(t *testing.T) {
	for _, c := range codecCases {
		p := testParams(t, c, DefaultChunkElems)
		for _, x := range [][]float32{{3}, {-2, -2, -2, -2, -2}, {0, 0, 0}, {-3e38, 3e38, 1, 2}, {1e-45, -1e-45, 0}} {
			pk := packer{p: p}
			msg, _ := encodeMsg(t, &pk, x)
			got, err := decodeMsg(p, msg, len(x), false)
			if err != nil {
				t.Fatalf("%s %v: %v", caseName(c), x, err)
			}
			if c.Codec != CodecTopK && len(x) > 1 && x[0] == x[1] && !sameBits(got, x) {
				t.Fatalf("%s: constant %v decoded as %v", caseName(c), x, got)
			}
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			pk := packer{p: p}
			payload := make([]byte, p.msgSize(3))
			if _, err := pk.encode(payload, []float32{1, bad, 2}, nil); !errors.Is(err, ErrNonFinite) {
				t.Fatalf("%s: encoding %v: %v", caseName(c), bad, err)
			}
		}
	}
}

// TestMaxChunkMsgSize: no message of any codec, a top-k result keeping
// every value included, is larger than MaxChunkMsgSize allows for its
// values, whatever the block size.
func TestMaxChunkMsgSize(t *testing.T) {
	for _, block := range []int{1, 2, 3, 7, 64, 4096, 1 << 16, MaxChunkElems} {
		for _, b := range []int{2, 4} {
			p := codecParams{codec: CodecTopK, block: block, topK: 1, bits: b}
			for _, n := range []int{1, 5, block, MaxChunkElems} {
				if got, lim := p.maxMsgSize(n), CodecFP32.msgSize(n)+int8TableSize; got > lim {
					t.Fatalf("block %d, %d bits, %d values: %d bytes, more than %d", block, b, n, got, lim)
				}
			}
		}
	}
	for _, c := range []Codec{CodecQ4, CodecQ2, CodecQ1} {
		p := testParams(t, AllReduceConfig{Codec: c}, MaxChunkElems)
		if p.maxMsgSize(MaxChunkElems) > MaxChunkMsgSize {
			t.Fatalf("%v: %d bytes", c, p.maxMsgSize(MaxChunkElems))
		}
	}
}

// TestCompressedMalformed: decoders refuse indices out of their block or
// out of order, block counts that do not add up or exceed the block,
// padding bits set and descriptors that disagree with the configuration.
func TestCompressedMalformed(t *testing.T) {
	p := testParams(t, AllReduceConfig{Codec: CodecTopK, TopK: 2, TopKBlock: 8, TopKBits: 4}, 64)
	const n = 13 // a block of 8 and a short one of 5
	write := func(form int, counts []int, idx []int, pad bool) []byte {
		e := len(idx)
		msg := make([]byte, topkLen(n, 8, e, 4, form)+1)
		putHeader(msg, chunkHeader{codec: CodecTopK, n: n})
		putTopkDesc(msg[chunkHeaderSize:], topkDesc{bits: 4, form: form, block: 8, entries: e})
		bw := bitWriter{buf: msg[chunkHeaderSize+topkDescSize+64:]}
		for _, c := range counts {
			bw.put(uint32(c), 4)
		}
		for _, i := range idx {
			bw.put(uint32(i), 3)
		}
		for range idx {
			bw.put(1, 4)
		}
		if pad {
			bw.put(1, 1)
		}
		bw.flush()
		return msg[:topkLen(n, 8, e, 4, form)]
	}
	good := [][]byte{
		write(topkFixed, nil, []int{0, 7, 1, 4}, false),
		write(topkCounted, []int{3, 0}, []int{0, 1, 7}, false),
	}
	for i, msg := range good {
		if _, err := decodeMsg(p, msg, n, i == 1); err != nil {
			t.Fatalf("good message %d: %v", i, err)
		}
	}
	bad := map[string][]byte{
		"out of the short block": write(topkFixed, nil, []int{0, 7, 1, 5}, false),
		"out of order":           write(topkFixed, nil, []int{7, 0, 1, 4}, false),
		"repeated":               write(topkFixed, nil, []int{0, 7, 4, 4}, false),
		"padding":                write(topkFixed, nil, []int{0, 7, 1, 4}, true),
		"counts short":           write(topkCounted, []int{2, 0}, []int{0, 1, 7}, false),
		"counts over the block":  write(topkCounted, []int{9, 0}, []int{0, 1, 7}, false),
		"count of a short block": write(topkCounted, []int{0, 6}, []int{0, 1, 2}, false),
		"counted contribution":   write(topkCounted, []int{2, 2}, []int{0, 7, 1, 4}, false),
		"fixed count wrong":      write(topkFixed, nil, []int{0, 7, 1}, false),
	}
	for name, msg := range bad {
		if _, err := decodeMsg(p, msg, n, name != "counted contribution"); !errors.Is(err, ErrBadChunk) {
			t.Errorf("%s: %v, want ErrBadChunk", name, err)
		}
	}
	other := testParams(t, AllReduceConfig{Codec: CodecTopK, TopK: 2, TopKBlock: 16, TopKBits: 4}, 64)
	if _, err := decodeMsg(other, good[0], n, false); !errors.Is(err, ErrBadChunk) {
		t.Errorf("another block size: %v", err)
	}
	q2 := testParams(t, AllReduceConfig{Codec: CodecQ2}, 64)
	pk := packer{p: q2}
	msg, _ := encodeMsg(t, &pk, []float32{1, 2, 3})
	msg[len(msg)-1] |= 0x80
	if _, err := decodeMsg(q2, msg, 3, false); !errors.Is(err, ErrBadChunk) {
		t.Errorf("dense padding: %v", err)
	}
}
