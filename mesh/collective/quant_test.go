package collective

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// roundTrip encodes src with the int8 codec and returns the decoded values.
func roundTrip(t testing.TB, qz *quantizer, src []float32) []float32 {
	t.Helper()
	payload := make([]byte, int8TableSize+len(src))
	var tab [256]float32
	if err := qz.encodeInt8(payload, &tab, src); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(src))
	var c coder
	c.init(CodecInt8)
	if err := c.decode(out, payload, false); err != nil {
		t.Fatal(err)
	}
	return out
}

func toF64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// gaussian returns n values ~ N(0, 1), with heavy tails when outliers.
func gaussian(rng *rand.Rand, n int, outliers bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		if outliers && rng.IntN(1000) == 0 {
			x[i] *= 50
		}
	}
	return x
}

// TestInt8BucketMeans: each code decodes to the mean of the values it holds.
func TestInt8BucketMeans(t *testing.T) {
	src := gaussian(rand.New(rand.NewPCG(1, 1)), 5000, true)
	payload := make([]byte, int8TableSize+len(src))
	var qz quantizer
	var tab [256]float32
	if err := qz.encodeInt8(payload, &tab, src); err != nil {
		t.Fatal(err)
	}
	var sum [256]float64
	var cnt [256]int
	for i, c := range payload[int8TableSize:] {
		sum[c] += float64(src[i])
		cnt[c]++
	}
	for b := range 256 {
		if cnt[b] > 0 && math.Abs(float64(tab[b])-sum[b]/float64(cnt[b])) > 1e-5*math.Max(1, math.Abs(sum[b])) {
			t.Fatalf("bucket %d decodes to %v, mean of its %d values is %v", b, tab[b], cnt[b], sum[b]/float64(cnt[b]))
		}
	}
}

// dists are the value distributions the codec is measured on.
var dists = []struct {
	name string
	gen  func(rng *rand.Rand) float32
}{
	{"normal", func(rng *rand.Rand) float32 { return float32(rng.NormFloat64()) }},
	{"laplace", func(rng *rand.Rand) float32 { return float32(rng.ExpFloat64() * float64(1-2*rng.IntN(2))) }},
	{"student-t3", func(rng *rand.Rand) float32 {
		var c float64
		for range 3 {
			z := rng.NormFloat64()
			c += z * z
		}
		return float32(rng.NormFloat64() / math.Sqrt(c/3))
	}},
	{"normal+0.1%x50", func(rng *rand.Rand) float32 {
		x := rng.NormFloat64()
		if rng.IntN(1000) == 0 {
			x *= 50
		}
		return float32(x)
	}},
}

// TestInt8Error bounds the single-chunk error of the default codec and logs
// it next to PRIME's clipped scheme and plain bucket centres (the figures in
// docs/allreduce.md).
func TestInt8Error(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, d := range dists {
		src := make([]float32, 1<<16)
		for i := range src {
			src[i] = d.gen(rng)
		}
		var e [4]float64
		for m := range e {
			e[m] = relErr(roundTrip(t, &quantizer{mode: quantMode(m)}, src), toF64(src))
		}
		t.Logf("%-15s relative L2 error: sqrt+means %.4f  sqrt+centres %.4f  clip4σ+means %.4f  clip4σ+centres %.4f",
			d.name, e[modeSqrt], e[modeSqrtCentres], e[modeClip], e[modeClipCentres])
		if e[modeSqrt] > 0.04 {
			t.Fatalf("%s: error %.3g", d.name, e[modeSqrt])
		}
	}
}

// TestInt8Special: constant chunks, single values and huge ranges decode
// sensibly; non-finite input is refused.
func TestInt8Special(t *testing.T) {
	var qz quantizer
	for _, src := range [][]float32{{3}, {-2, -2, -2, -2, -2}, {0, 0, 0}} {
		if got := roundTrip(t, &qz, src); !sameBits(got, src) {
			t.Fatalf("%v decoded as %v", src, got)
		}
	}
	huge := []float32{-3e38, 3e38, 1, 2}
	got := roundTrip(t, &qz, huge)
	for _, v := range got {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("%v decoded as %v", huge, got)
		}
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		payload := make([]byte, int8TableSize+3)
		var tab [256]float32
		if err := qz.encodeInt8(payload, &tab, []float32{1, bad, 2}); !errors.Is(err, ErrNonFinite) {
			t.Fatalf("encoding %v: %v", bad, err)
		}
	}
}

func TestParseChunk(t *testing.T) {
	want := chunkHeader{codec: CodecFP32, phase: phaseGather, step: 3, chunk: 7, n: 2}
	msg := make([]byte, CodecFP32.msgSize(2))
	putHeader(msg, want)
	if p, err := parseChunk(msg, want); err != nil || len(p) != 8 {
		t.Fatalf("parse: %d bytes, %v", len(p), err)
	}
	other := want
	other.chunk = 8
	if _, err := parseChunk(msg, other); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("wrong chunk: %v", err)
	}
	if _, err := parseChunk(msg[:len(msg)-1], want); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("truncated: %v", err)
	}
}

// FuzzChunkDecode feeds arbitrary bytes to the chunk parser and decoders, as
// received from a peer: errors are fine, panics and non-finite output are not.
func FuzzChunkDecode(f *testing.F) {
	for _, codec := range []Codec{CodecInt8, CodecFP32} {
		msg := make([]byte, codec.msgSize(5))
		putHeader(msg, chunkHeader{codec: codec, phase: phaseScatter, step: 1, chunk: 2, n: 5})
		f.Add(msg)
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) < chunkHeaderSize {
			if _, err := parseChunk(msg, chunkHeader{}); err == nil {
				t.Fatal("short message accepted")
			}
			return
		}
		// Expect what the message claims, within a bound, so that parsing
		// succeeds often enough to reach the decoders.
		want := chunkHeader{codec: Codec(msg[0]), phase: msg[1], step: binary.BigEndian.Uint16(msg[2:]),
			chunk: binary.BigEndian.Uint32(msg[4:]), n: binary.BigEndian.Uint32(msg[8:]) % 4096}
		if want.codec != CodecFP32 { // the ring's reduce-scatter codecs (the others: FuzzCodecDecode)
			want.codec = CodecInt8
		}
		payload, err := parseChunk(msg, want)
		if err != nil {
			return
		}
		var c coder
		c.init(want.codec)
		x := make([]float32, want.n)
		for _, add := range []bool{true, false} {
			if err := c.decode(x, payload, add); err != nil {
				return
			}
		}
		for _, v := range x {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("decoded %v", v)
			}
		}
	})
}

// withGo runs f with the Go loops instead of the AVX2 ones.
func withGo(f func()) {
	saved := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = saved }()
	f()
}

// TestAVX2MatchesGo checks each AVX2 loop against its Go reference, bit for
// bit, on awkward lengths and extreme values, and the whole encoder too.
func TestAVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 here")
	}
	rng := rand.New(rand.NewPCG(31, 32))
	for _, n := range []int{1, 7, 8, 9, 63, 1000, 4099} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
		}
		res := gaussian(rng, n, false)
		var tab [256]float32
		for b := range tab {
			tab[b] = float32(rng.NormFloat64())
		}
		codes := make([]byte, n)
		for i := range codes {
			codes[i] = byte(rng.IntN(256))
		}
		for _, r := range [][]float32{nil, res} {
			var fast, slow chunkStats
			xf, xs := append([]float32(nil), src...), append([]float32(nil), src...)
			fast = prepScan(xf, r, 0.37)
			withGo(func() { slow = prepScan(xs, r, 0.37) })
			if fast != slow || !sameBits(xf, xs) {
				t.Fatalf("n=%d prepScan: %+v vs %+v", n, fast, slow)
			}
			xf, xs = append([]float32(nil), src...), append([]float32(nil), src...)
			fast = prepAddScan(xf, r, 0.37, &tab, codes)
			withGo(func() { slow = prepAddScan(xs, r, 0.37, &tab, codes) })
			if fast != slow || !sameBits(xf, xs) {
				t.Fatalf("n=%d prepAddScan: %+v vs %+v", n, fast, slow)
			}
		}
		cf, cs := make([]byte, n), make([]byte, n)
		quantizeSqrt(cf, src, 0.01, 3, nil)
		withGo(func() { quantizeSqrt(cs, src, 0.01, 3, nil) })
		if string(cf) != string(cs) {
			t.Fatalf("n=%d: sqrt codes differ", n)
		}
		df, ds := make([]float32, n), make([]float32, n)
		decodeInt8Set(df, &tab, codes)
		withGo(func() { decodeInt8Set(ds, &tab, codes) })
		if !sameBits(df, ds) {
			t.Fatalf("n=%d: decode differs", n)
		}
		pf, ps := make([]byte, int8TableSize+n), make([]byte, int8TableSize+n)
		var qz quantizer
		var tt [256]float32
		if err := qz.encodeInt8Scanned(pf, &tt, src, prepScan(append([]float32(nil), src...), nil, 1)); err != nil {
			t.Fatal(err)
		}
		withGo(func() {
			if err := qz.encodeInt8Scanned(ps, &tt, src, prepScan(append([]float32(nil), src...), nil, 1)); err != nil {
				t.Fatal(err)
			}
		})
		if string(pf) != string(ps) {
			t.Fatalf("n=%d: encoded chunks differ", n)
		}
	}
}

// TestAllReduceGoLoops runs a ring on the Go loops (what a machine without
// AVX2 runs).
func TestAllReduceGoLoops(t *testing.T) {
	withGo(func() {
		in := randVecs(rand.New(rand.NewPCG(33, 34)), 3, 5001)
		w := []float32{1, 2, 3}
		rr := runRing(t, testCtx(t), in, nil, w, AllReduceConfig{Shards: 2, ChunkElems: 300}, nil)
		checkRing(t, "go loops", rr, in, w, CodecInt8)
	})
}
