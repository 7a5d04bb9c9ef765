//go:build linux

package collective

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// benchCodecs are the codecs BenchmarkCodecs compares, at their defaults.
var benchCodecs = []AllReduceConfig{
	{Codec: CodecInt8},
	{Codec: CodecQ4},
	{Codec: CodecQ2},
	{Codec: CodecQ1},
	{Codec: CodecTopK},
	{Codec: CodecTopK, TopKBits: 4},
}

// BenchmarkCodecs reports, per codec at its default parameters and
// chunks of DefaultChunkElems:
//   - bits per value on the wire: of a contribution (contrib-bits) and of
//     an owner's result (result-bits, k = 4 Gaussian members), and what one
//     member sends per value of the vector in a k = 4 ring
//     (ring-bits/member) and scatter (scatter-bits/member);
//   - encode (a member's contribution with its residual) and decode (a
//     message into a vector) speed as ratios to int8's measured the same
//     way in the same run (enc-x-int8, dec-x-int8: > 1 is faster), from
//     thread CPU time, and int8's own speed (int8-enc-MB/s, int8-dec-MB/s,
//     of fp32 bytes);
//   - the relative L2 error of one k = 4 all-reduce of Gaussian vectors
//     against the fp32 all-reduce of the same inputs, ring and scatter.
func BenchmarkCodecs(b *testing.B) {
	for _, cc := range benchCodecs {
		b.Run(caseName(cc), func(b *testing.B) {
			cfg := cc
			cfg.ChunkElems = DefaultChunkElems
			if err := cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				benchCodecSpeed(b, cfg)
			}
			benchCodecWire(b, cfg)
		})
	}
}

// benchCodecSpeed reports the encode and decode speed of cfg's codec
// against int8's.
func benchCodecSpeed(b *testing.B, cfg AllReduceConfig) {
	const n = DefaultChunkElems
	rng := rand.New(rand.NewPCG(3, 3))
	src, res := gaussian(rng, n, false), make([]float32, n)
	x, dst := make([]float32, n), make([]float32, n)
	p, i8 := cfg.params(), codecParams{codec: CodecInt8}
	msg, msg8 := make([]byte, p.maxMsgSize(n)), make([]byte, i8.msgSize(n))
	var qz quantizer
	var t8 [256]float32
	pk := packer{p: p}
	enc8 := func() {
		copy(x, src)
		st := prepScan(x, nil, 1)
		_ = qz.encodeInt8Scanned(msg8[chunkHeaderSize:], &t8, x, st)
		residualInt8(res, x, &t8, msg8[chunkHeaderSize+int8TableSize:])
	}
	enc := func() {
		copy(x, src)
		if p.codec == CodecInt8 {
			enc8()
			return
		}
		_, _ = pk.encode(msg[chunkHeaderSize:], x, res)
	}
	dec8 := func() {
		_ = readTable(&t8, msg8[chunkHeaderSize:])
		decodeInt8Set(dst, &t8, msg8[chunkHeaderSize+int8TableSize:])
	}
	dec := func() {
		if p.codec == CodecInt8 {
			dec8()
			return
		}
		_ = pk.read(msg[chunkHeaderSize:], n, false, true)
		pk.apply(dst, msg[chunkHeaderSize:], 1, false)
	}
	te8, te := minCPUPer(enc8, enc)
	td8, td := minCPUPer(dec8, dec)
	mb := func(d time.Duration) float64 { return 4 * n / d.Seconds() / 1e6 }
	b.ReportMetric(mb(te8), "int8-enc-MB/s")
	b.ReportMetric(mb(td8), "int8-dec-MB/s")
	b.ReportMetric(float64(te8)/float64(te), "enc-x-int8")
	b.ReportMetric(float64(td8)/float64(td), "dec-x-int8")
}

// benchCodecWire reports cfg's bits per value and its error against fp32
// for one all-reduce of k = 4 Gaussian vectors, ring and scatter.
func benchCodecWire(b *testing.B, cfg AllReduceConfig) {
	const k, n = 4, 1 << 20
	xs := randVecs(rand.New(rand.NewPCG(7, 7)), k, n)
	w := []float32{1, 1, 1, 1}
	p := cfg.params()
	b.ReportMetric(8*float64(p.msgSize(cfg.ChunkElems))/float64(cfg.ChunkElems), "contrib-bits")
	ring := func(c Codec) ([]float32, Stats) {
		ar := cfg
		ar.Codec = c
		if c == CodecFP32 {
			ar = AllReduceConfig{Codec: c}
		}
		dst, st := benchAllReduce[Stats](b, xs, w, ar, nil)
		return dst[0], st[0]
	}
	scat := func(c Codec) ([]float32, ScatterResult) {
		sc := ScatterConfig{Codec: c, Robust: RobustConfig{MaxWeight: testH}}
		if c != CodecFP32 {
			sc = scatterCfg(cfg, DefaultShards, cfg.ChunkElems)
		}
		dst, res := benchAllReduce[ScatterResult](b, xs, w, AllReduceConfig{}, &sc)
		return dst[0], res[0]
	}
	ref, _ := ring(CodecFP32)
	got, st := ring(cfg.Codec)
	b.ReportMetric(relErr(got, toF64(ref)), "ring-rel-err-vs-fp32")
	b.ReportMetric(8*float64(st.BytesSent)/n, "ring-bits/member")
	sref, _ := scat(CodecFP32)
	sgot, sres := scat(cfg.Codec)
	b.ReportMetric(relErr(sgot, toF64(sref)), "scatter-rel-err-vs-fp32")
	b.ReportMetric(8*float64(sres.Stats.BytesSent)/n, "scatter-bits/member")
	// Member 0 sends its contributions to the 3 other segments and its
	// own segment's results to 3 members: what is not contribution is
	// result, n/4 values of it 3 times.
	var contrib int
	for s := range DefaultShards {
		lo, hi := span(n, DefaultShards, s)
		for j := 1; j < k; j++ {
			slo, shi := span(hi-lo, k, j)
			contrib += p.segmentSize(shi-slo, cfg.ChunkElems)
		}
	}
	b.ReportMetric(8*float64(int(sres.Stats.BytesSent)-contrib)/float64(3*n/4), "result-bits")
}

// benchAllReduce runs one ring (sc nil) or scatter all-reduce of xs and
// returns every member's result and stats (Stats, or ScatterResult).
func benchAllReduce[S any](b *testing.B, xs [][]float32, w []float32, ar AllReduceConfig, sc *ScatterConfig) ([][]float32, []S) {
	k := len(xs)
	dst, out := make([][]float32, k), make([]S, k)
	errs := make([]error, k)
	if ar.Shards == 0 {
		ar.Shards = DefaultShards
	}
	rings, meshes := NewMemRing(k, ar.Shards), NewMemMesh(k, 2*DefaultShards)
	var wg sync.WaitGroup
	for i := range k {
		dst[i] = make([]float32, len(xs[i]))
		wg.Go(func() {
			bf := Buffers{Src: xs[i], Dst: dst[i]}
			var r any
			if sc == nil {
				r, errs[i] = AllReduceInto(context.Background(), rings[i], i, w, bf, ar)
			} else {
				r, errs[i] = ScatterAllReduce(context.Background(), meshes[i], i, w, bf, *sc)
			}
			out[i] = r.(S)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return dst, out
}

// BenchmarkScatterByCodec times one ScatterAllReduce of k = 4 members in
// memory (every member in this process), int8 and each compressed codec
// interleaved in the same loop, on a vector of the small preset's size
// (≈ 15 M values; SCATTER_CODEC_N overrides): wall time and process CPU
// per all-reduce, and their ratios to int8's (x-int8, x-int8-cpu). Run
// with -benchtime 1x or 2x.
func BenchmarkScatterByCodec(b *testing.B) {
	const k = 4
	n := 15_000_000
	if v, err := strconv.Atoi(os.Getenv("SCATTER_CODEC_N")); err == nil && v > 0 {
		n = v
	}
	xs := benchVecs(k, n)
	w := honestWeights(k)
	base := ScatterConfig{Robust: RobustConfig{MaxWeight: testH}}
	for _, cc := range benchCodecs[1:] {
		b.Run(caseName(cc), func(b *testing.B) {
			sc := scatterCfg(cc, DefaultShards, DefaultChunkElems)
			var t8, tc, c8, cc2 time.Duration
			for range b.N {
				for _, cfg := range []*ScatterConfig{&base, &sc} {
					c0, t0 := processCPU(), time.Now()
					benchAllReduce[ScatterResult](b, xs, w, AllReduceConfig{}, cfg)
					dt, dc := time.Since(t0), processCPU()-c0
					if cfg == &base {
						t8, c8 = t8+dt, c8+dc
					} else {
						tc, cc2 = tc+dt, cc2+dc
					}
				}
			}
			b.ReportMetric(float64(t8.Milliseconds())/float64(b.N), "int8-ms/op")
			b.ReportMetric(float64(tc.Milliseconds())/float64(b.N), "codec-ms/op")
			b.ReportMetric(float64(tc)/float64(t8), "x-int8")
			b.ReportMetric(float64(cc2)/float64(c8), "x-int8-cpu")
		})
	}
}
