package collective

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// collectiveCodecs are the compressed codecs as the ring and scatter tests
// run them: top-k with blocks of 64 so that a chunk of 256 holds several.
var collectiveCodecs = []AllReduceConfig{
	{Codec: CodecQ4},
	{Codec: CodecQ2},
	{Codec: CodecQ1},
	{Codec: CodecTopK, TopK: 4, TopKBlock: 64},
	{Codec: CodecTopK, TopK: 4, TopKBlock: 64, TopKBits: 4},
}

// scatterCfg is the ScatterConfig of codec c.
func scatterCfg(c AllReduceConfig, shards, chunkElems int) ScatterConfig {
	return ScatterConfig{Shards: shards, ChunkElems: chunkElems, Codec: c.Codec, TopK: c.TopK, TopKBlock: c.TopKBlock,
		TopKBits: c.TopKBits, FeedbackDecay: c.FeedbackDecay, Robust: RobustConfig{MaxWeight: testH}}
}

// decodedContribution is what member x's contribution decodes to, cut
// into shards and chunks as the ring cuts it.
func decodedContribution(t testing.TB, cfg AllReduceConfig, x []float32) []float32 {
	pk := packer{p: cfg.params()}
	out := make([]float32, len(x))
	for s := range cfg.Shards {
		lo, hi := span(len(x), cfg.Shards, s)
		for c := lo; c < hi; c += cfg.ChunkElems {
			e := min(c+cfg.ChunkElems, hi)
			msg, _ := encodeMsg(t, &pk, append([]float32(nil), x[c:e]...))
			if err := pk.read(msg[chunkHeaderSize:], e-c, false, true); err != nil {
				t.Fatal(err)
			}
			pk.apply(out[c:e], msg[chunkHeaderSize:], 1, false)
		}
	}
	return out
}

// ringExpected is the ring's result: Σ wᵢ/Σw · decodedᵢ in rank order.
func ringExpected(t testing.TB, cfg AllReduceConfig, xs [][]float32, w []float32) []float32 {
	out := make([]float32, len(xs[0]))
	for i, sc := range weightScales(w) {
		for j, v := range decodedContribution(t, cfg, xs[i]) {
			out[j] += float32(sc * v)
		}
	}
	return out
}

// TestCodecRing: the ring with every compressed codec, k = 1..8, odd
// lengths, 1 or 3 shards: every member ends with the bits of the rank-order
// sum of the decoded contributions, and sends k−1 contributions.
func TestCodecRing(t *testing.T) {
	for _, cc := range collectiveCodecs {
		for _, k := range []int{1, 2, 3, 4, 8} {
			for _, n := range []int{0, 1, k - 1, 1000, 4099} {
				for _, shards := range []int{1, 3} {
					cfg := cc
					cfg.Shards, cfg.ChunkElems = shards, 256
					in := randVecs(rand.New(rand.NewPCG(uint64(k), uint64(n))), k, n)
					w := honestWeights(k)
					rr := runRing(t, testCtx(t), in, nil, w, cfg, nil)
					name := fmt.Sprintf("%s k=%d n=%d shards=%d", caseName(cc), k, n, shards)
					checkCodecRing(t, name, rr, in, w, cfg)
				}
			}
		}
	}
}

func checkCodecRing(t *testing.T, name string, rr ringRun, in [][]float32, w []float32, cfg AllReduceConfig) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k, n := len(in), len(in[0])
	want := ringExpected(t, cfg, in, w)
	if k == 1 {
		want = in[0]
	}
	var size int64
	for s := range cfg.Shards {
		lo, hi := span(n, cfg.Shards, s)
		size += int64(cfg.params().segmentSize(hi-lo, cfg.ChunkElems))
	}
	for i := range k {
		if rr.errs[i] != nil {
			t.Fatalf("%s: member %d: %v", name, i, rr.errs[i])
		}
		if !sameBits(rr.out[i], want) {
			t.Fatalf("%s: member %d: not the rank-order sum of the decoded contributions", name, i)
		}
		if k > 1 && (rr.stats[i].BytesSent != int64(k-1)*size || rr.stats[i].BytesRecv != int64(k-1)*size) {
			t.Fatalf("%s: member %d: %+v, want %d bytes each way", name, i, rr.stats[i], int64(k-1)*size)
		}
	}
}

// TestCodecScatter: the robust scatter with every compressed codec (and
// fp32), k = 1..8, odd lengths: every member ends with the same bits;
// each owner's result, verdicts and norms are what an auditor recomputes
// from the contributions (RobustSegment, AuditChunk, SentNorms); a result
// is never larger than the contributions it combined; and a top-k result
// is zero outside the union of the contributions' supports.
func TestCodecScatter(t *testing.T) {
	for _, cc := range append(collectiveCodecs, AllReduceConfig{Codec: CodecFP32}) {
		for _, k := range []int{1, 2, 3, 4, 8} {
			for _, n := range []int{0, 1, k - 1, 4099} {
				for _, shards := range []int{1, 3} {
					rng := rand.New(rand.NewPCG(uint64(k), uint64(n)))
					xs, _ := pseudoGrads(rng, k, n)
					if k >= 3 && n > 1000 {
						noiseAttack(rng, xs, nil, 1)
					}
					if raceEnabled && shards == 1 {
						continue
					}
					w := honestWeights(k)
					cfg := scatterCfg(cc, shards, 256)
					name := fmt.Sprintf("%s k=%d n=%d shards=%d", caseName(cc), k, n, shards)
					checkCodecScatter(t, testCtx(t), name, xs, w, cfg)
				}
			}
		}
	}
}

func checkCodecScatter(t *testing.T, ctx context.Context, name string, xs [][]float32, w []float32, cfg ScatterConfig) {
	t.Helper()
	k := len(xs)
	recs := make([]*recMesh, k)
	sr := runScatter(t, ctx, xs, w, cfg, func(i int, m *MemMesh) MeshTransport {
		recs[i] = &recMesh{MemMesh: m}
		return recs[i]
	})
	for i, err := range sr.errs {
		if err != nil {
			t.Fatalf("%s: member %d: %v", name, i, err)
		}
		if !sameBits(sr.out[0], sr.out[i]) {
			t.Fatalf("%s: member %d differs from member 0", name, i)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for j := range k {
		for s := range cfg.Shards {
			if k >= 3 && len(xs[0]) > 1000 { // segments of several chunks, member 0 attacking
				auditSegment(t, xs, w, cfg, recs, sr.res, j, s)
				auditChunks(t, name, xs, w, cfg, recs, sr.res, j, s)
			}
			checkSentNorms(t, sr.res, k, j, s)
			checkResultSize(t, name, xs, cfg, sr.res[j].Owned[s], j, s)
		}
	}
	if cfg.Codec == CodecTopK {
		checkUnionSupport(t, name, xs, cfg, sr.out[0])
	}
}

// auditChunks: AuditChunk recomputes, from each chunk's k contributions,
// the result message each member received from owner j and the owner's
// verdicts.
func auditChunks(t *testing.T, name string, xs [][]float32, w []float32, cfg ScatterConfig, recs []*recMesh, res []ScatterResult, j, s int) {
	t.Helper()
	k := len(xs)
	contribs := segmentContribs(t, xs, cfg, recs, j, s)
	rep := res[j].Owned[s]
	for c := range rep.Verdicts {
		msgs := make([][]byte, k)
		for i := range contribs {
			m, _ := chunkMsgLen(contribs[i])
			msgs[i], contribs[i] = contribs[i][:m], contribs[i][m:]
		}
		out, v, err := AuditChunk(cfg, w, j, c, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(out) != res[(j+1)%k].GotChunks[s*k+j][c] || !reflect.DeepEqual(v, rep.Verdicts[c]) {
			t.Fatalf("%s: owner %d shard %d chunk %d: the audit disagrees", name, j, s, c)
		}
	}
}

// checkResultSize: each result chunk owner j sent is no larger than the
// k contributions of that chunk together (a top-k result: the counts of
// ⌈ChunkElems/TopKBlock⌉ blocks at most, and one table for k).
func checkResultSize(t *testing.T, name string, xs [][]float32, cfg ScatterConfig, rep SegmentReport, j, s int) {
	t.Helper()
	k := len(xs)
	contribs := make([][]byte, k)
	for i := range k {
		contribs[i] = ownContribution(t, xs[i], i, j, s, k, cfg)
	}
	lo, hi := span(len(xs[0]), cfg.Shards, s)
	slo, shi := span(hi-lo, k, j)
	out, _, err := RobustSegment(cfg, honestWeights(k), j, shi-slo, contribs)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := CommitMessages(out); c != rep.Result {
		t.Fatalf("%s: owner %d shard %d: recomputed result differs", name, j, s)
	}
	for len(out) > 0 {
		m, _ := chunkMsgLen(out)
		var in int
		for i := range contribs {
			c, _ := chunkMsgLen(contribs[i])
			in += c
			contribs[i] = contribs[i][c:]
		}
		if m > in {
			t.Fatalf("%s: owner %d shard %d: a result of %d bytes for %d bytes of contributions", name, j, s, m, in)
		}
		out = out[m:]
	}
}

// checkUnionSupport: the result is 0 wherever no member's contribution
// kept a value.
func checkUnionSupport(t *testing.T, name string, xs [][]float32, cfg ScatterConfig, out []float32) {
	t.Helper()
	kept := make([]bool, len(out))
	for _, x := range xs {
		for s := range cfg.Shards {
			lo, hi := span(len(out), cfg.Shards, s)
			for j := range len(xs) {
				slo, shi := span(hi-lo, len(xs), j)
				for c := lo + slo; c < lo+shi; c += cfg.ChunkElems {
					e := min(c+cfg.ChunkElems, lo+shi)
					var tq topkQuant
					tq.selectChunk(cfg.params(), x[c:e])
					for _, i := range tq.kept.idx {
						kept[c+int(i)] = true
					}
				}
			}
		}
	}
	for i, v := range out {
		if !kept[i] && v != 0 {
			t.Fatalf("%s: value %d is %v outside every support", name, i, v)
		}
	}
}

// TestCodecResultBound: the worst case of a top-k result's size, disjoint
// supports: the result stays within the contributions' bytes, and its bits
// per value are logged.
func TestCodecResultBound(t *testing.T) {
	for _, bits := range []int{2, 4} {
		cfg := ScatterConfig{Shards: 1, ChunkElems: DefaultChunkElems, Codec: CodecTopK, TopKBits: bits}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		p := cfg.params()
		n := cfg.ChunkElems
		for _, k := range []int{1, 2, 3, 8, 64} {
			if k == 64 && raceEnabled {
				continue
			}
			msgs := make([][]byte, k)
			var in int
			for i := range k {
				x := make([]float32, n)
				for j := range x {
					x[j] = float32(1 + (j*7+i)%5)
					if j%k == i {
						x[j] *= 1000 // member i's support: j ≡ i mod k, disjoint
					}
				}
				pk := packer{p: p}
				msgs[i], _ = encodeMsg(t, &pk, x)
				in += len(msgs[i])
			}
			ow := newOwnerWork(p, k, n)
			out, _, err := ow.combine(&cfg.Robust, honestWeights(k), msgs, 0, -1, 0)
			putOwnerWork(ow)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("b=%d k=%d: result %.3f bits per value, contributions %.3f", bits, k, 8*float64(len(out))/float64(n), 8*float64(in)/float64(n))
			if len(out) > in {
				t.Fatalf("b=%d k=%d: result of %d bytes for %d", bits, k, len(out), in)
			}
		}
	}
}

// TestTopKCountsLimit: a chunk of more top-k blocks than a result's counts
// can afford is refused.
func TestTopKCountsLimit(t *testing.T) {
	ok := AllReduceConfig{Codec: CodecTopK, ChunkElems: 22 * 4096}
	bad := AllReduceConfig{Codec: CodecTopK, ChunkElems: 23 * 4096}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("23 blocks per chunk: %v", err)
	}
}

// efInputs are k members' inputs of one round: a fixed direction g seen
// with each member's gain, plus fresh noise.
func efInputs(rng *rand.Rand, g []float64, k int) [][]float32 {
	xs := make([][]float32, k)
	for i := range xs {
		xs[i] = make([]float32, len(g))
		for t, v := range g {
			xs[i][t] = float32((0.6+0.2*float64(i))*v + 0.5*math.Abs(v)*rng.NormFloat64())
		}
	}
	return xs
}

// TestCodecErrorFeedback: with error feedback each member's residual stays
// bounded while the running sum grows, so the running sum of the results
// follows the running sum of the exact means with a relative error
// falling like 1/rounds: on the ring (the result is the exact sum of the
// decoded contributions) and, with ResultFeedback, on the scatter for q4
// and top-k. Logged: without feedback (one round's error, for good), and
// the scatter without ResultFeedback (the owners' result errors add up
// like a random walk) and with it for q2 and q1 (the owner's fed-back
// error, × k, gets its next contribution norm-clipped: it does not
// converge).
func TestCodecErrorFeedback(t *testing.T) {
	if raceEnabled {
		t.Skip("numeric, 1700 all-reduces: the race detector adds nothing but time (TestCodecRing and TestCodecScatter run the same paths)")
	}
	const k, n = 4, 1 << 12
	for _, cc := range collectiveCodecs {
		for _, run := range []struct {
			path string
			rf   Feedback
		}{{"ring", FeedbackDefault}, {"scatter", FeedbackOff}, {"scatter", FeedbackOn}} {
			off16, _ := efRun(t, cc, run.path, run.rf, k, n, false, 16)
			e16, e128 := efRun(t, cc, run.path, run.rf, k, n, true, 128)
			name := fmt.Sprintf("%s %s (result feedback %v)", caseName(cc), run.path, run.rf == FeedbackOn)
			t.Logf("%-36s running-sum rel err after 16 rounds %.4f without error feedback; with it %.4f after 16, %.4f after 128 (×%.2f)",
				name, off16, e16, e128, e128/e16)
			converges := run.path == "ring" || run.rf == FeedbackOn && cc.Codec != CodecQ2 && cc.Codec != CodecQ1
			if converges && !(e128 < 0.25*e16) {
				t.Errorf("%s: running-sum error %.4f after 128 rounds, %.4f after 16: not falling like 1/rounds", name, e128, e16)
			}
		}
	}
}

// efRun returns the relative error of the running sum of the results after
// 16 rounds and after rounds rounds.
func efRun(t *testing.T, cc AllReduceConfig, path string, rf Feedback, k, n int, ef bool, rounds int) (e16, last float64) {
	rng := rand.New(rand.NewPCG(21, 22))
	g := make([]float64, n)
	for i := range g {
		g[i] = 0.01 * rng.NormFloat64() * math.Exp(0.5*rng.NormFloat64())
	}
	res := make([][2][]float32, k)
	for i := range res {
		res[i] = [2][]float32{make([]float32, n), make([]float32, n)}
	}
	w := honestWeights(k)
	got, want := make([]float32, n), make([]float64, n)
	for round := 1; round <= rounds; round++ {
		xs := efInputs(rng, g, k)
		out := codecRound(t, cc, path, rf, 1024, xs, w, res, ef)
		for j, v := range refMean(xs, w) {
			want[j] += v
			got[j] += out[j]
		}
		if round == 16 {
			e16 = relErr(got, want)
		}
	}
	return e16, relErr(got, want)
}

// codecRound runs one all-reduce of xs on path ("ring" or "scatter") in
// chunks of chunkElems with residuals res (swapped after) and returns
// member 0's result.
func codecRound(t *testing.T, cc AllReduceConfig, path string, rf Feedback, chunkElems int, xs [][]float32, w []float32,
	res [][2][]float32, ef bool) []float32 {
	k := len(xs)
	outs := make([][]float32, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	ar := cc
	ar.Shards, ar.ChunkElems, ar.ErrorFeedback = 2, chunkElems, ef
	sc := scatterCfg(cc, 2, chunkElems)
	sc.ErrorFeedback, sc.ResultFeedback = ef, rf
	rings, meshes := NewMemRing(k, 2), NewMemMesh(k, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range k {
		outs[i] = make([]float32, len(xs[i]))
		b := Buffers{Src: xs[i], Dst: outs[i], ResIn: res[i][0], ResOut: res[i][1]}
		wg.Go(func() {
			if path == "ring" {
				_, errs[i] = AllReduceInto(ctx, rings[i], i, w, b, ar)
			} else {
				_, errs[i] = ScatterAllReduce(ctx, meshes[i], i, w, b, sc)
			}
		})
	}
	wg.Wait()
	for i := range k {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		res[i][0], res[i][1] = res[i][1], res[i][0]
	}
	return outs[0]
}

// TestCodecFeedbackDecay: the contribution is Src + β·ResIn: with β = 0.5
// and Src = 0 a member sends half its residual, and ResOut is exactly
// what that lost.
func TestCodecFeedbackDecay(t *testing.T) {
	for _, cc := range collectiveCodecs {
		cfg := cc
		cfg.Shards, cfg.ChunkElems, cfg.ErrorFeedback, cfg.FeedbackDecay = 1, 256, true, 0.5
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 3))
		resIn := gaussian(rng, 300, false)
		src, dst, resOut := make([]float32, 300), make([]float32, 300), make([]float32, 300)
		ts := NewMemRing(2, 1)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				b := Buffers{Src: src, Dst: make([]float32, 300), ResIn: resIn, ResOut: make([]float32, 300)}
				if i == 0 {
					b.Dst, b.ResOut = dst, resOut
				}
				_, errs[i] = AllReduceInto(testCtx(t), ts[i], i, []float32{1, 1}, b, cfg)
			})
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		half := make([]float32, 300)
		for i, r := range resIn {
			half[i] = float32(0.5 * r)
		}
		dec := decodedContribution(t, cfg, half)
		for i := range half {
			if math.Float32bits(resOut[i]) != math.Float32bits(half[i]-dec[i]) {
				t.Fatalf("%s: ResOut[%d] = %v, want %v − %v", caseName(cc), i, resOut[i], half[i], dec[i])
			}
		}
	}
}

// TestCodecFailureKeepsInputs: an attempt that fails (a member dies) leaves
// every member's Src and ResIn as they were, ring and scatter.
func TestCodecFailureKeepsInputs(t *testing.T) {
	defer goleak.VerifyNone(t)
	const k, n = 4, 5000
	for _, cc := range collectiveCodecs {
		rng := rand.New(rand.NewPCG(4, 4))
		xs, _ := pseudoGrads(rng, k, n)
		resIn := randVecs(rng, k, n)
		srcCopy, resCopy := cloneVecs(xs), cloneVecs(resIn)
		ar := cc
		ar.Shards, ar.ChunkElems, ar.ErrorFeedback = 2, 256, true
		sc := scatterCfg(cc, 2, 256)
		sc.ErrorFeedback = true
		rings, meshes := NewMemRing(k, 2), NewMemMesh(k, 4)
		errs := make([]error, 2*k)
		var wg sync.WaitGroup
		for i := range k {
			wg.Go(func() {
				var rt Transport = rings[i]
				var mt MeshTransport = meshes[i]
				if i == 2 {
					rt, mt = DieAfter(rings[i], 5), MeshDieAfter(meshes[i], 5)
				}
				b := Buffers{Src: xs[i], Dst: make([]float32, n), ResIn: resIn[i], ResOut: make([]float32, n)}
				_, errs[i] = AllReduceInto(testCtx(t), rt, i, honestWeights(k), b, ar)
				b.Dst, b.ResOut = make([]float32, n), make([]float32, n)
				_, errs[k+i] = ScatterAllReduce(testCtx(t), mt, i, honestWeights(k), b, sc)
			})
		}
		wg.Wait()
		for i, err := range errs {
			var pe *PeerError
			if i%k != 2 && (!errors.As(err, &pe) || pe.Rank != 2) {
				t.Errorf("%s: %d: %v, want a PeerError naming 2", caseName(cc), i, err)
			}
		}
		for i := range k {
			if !sameBits(xs[i], srcCopy[i]) || !sameBits(resIn[i], resCopy[i]) {
				t.Fatalf("%s: member %d's Src or ResIn changed", caseName(cc), i)
			}
		}
	}
}

// topkEdits corrupt a top-k contribution (blocks of 64, 4 kept, 2 bits).
var topkEdits = map[string]func([]byte) []byte{
	"form":    func(m []byte) []byte { m[chunkHeaderSize+1] = topkCounted; return m },
	"bits":    func(m []byte) []byte { m[chunkHeaderSize] = 4; return m },
	"block":   func(m []byte) []byte { m[chunkHeaderSize+5]++; return m },
	"entries": func(m []byte) []byte { m[chunkHeaderSize+9]--; return m[:len(m)-1] },
	"order":   func(m []byte) []byte { return setIndex(m, 1, 0) },
	"repeat":  func(m []byte) []byte { return setIndex(m, 1, getIndex(m, 0)) },
}

// topkStream is where a 2-bit, blocks-of-64 top-k message's bit stream
// starts.
const topkStream = chunkHeaderSize + topkDescSize + 4*4

// getIndex and setIndex read and write the e-th 6-bit index of a fixed
// top-k message (blocks of 64).
func getIndex(m []byte, e int) int {
	br := bitReader{buf: m[topkStream:]}
	for range e {
		br.get(6)
	}
	return int(br.get(6))
}

func setIndex(m []byte, e, v int) []byte {
	for b := range 6 {
		bit := e*6 + b
		m[topkStream+bit/8] &^= 1 << (bit % 8)
		m[topkStream+bit/8] |= byte((v>>b)&1) << (bit % 8)
	}
	return m
}

// TestCodecGarbage: a member sending a malformed compressed message is
// named by everyone, ring and scatter, never a panic; a NaN table is a
// PeerError in the ring and in a result, a rejected verdict in a
// contribution.
func TestCodecGarbage(t *testing.T) {
	const k, bad = 4, 1
	for _, cc := range collectiveCodecs[1:3] { // q2 and top-k b=2 (setIndex's layout)
		table := chunkHeaderSize
		if cc.Codec == CodecTopK {
			table += topkDescSize
		}
		edits := map[string]func([]byte) []byte{
			"truncated": func(m []byte) []byte { return m[:len(m)-1] },
			"long":      func(m []byte) []byte { return append(m, 0) },
			"codec":     func(m []byte) []byte { m[0] = byte(CodecInt8); return m },
			"nanTable":  func(m []byte) []byte { binary.LittleEndian.PutUint32(m[table+4:], 0x7fc00000); return m },
		}
		if cc.Codec == CodecTopK {
			for name, e := range topkEdits {
				edits[name] = e
			}
		}
		for name, edit := range edits {
			in := randVecs(rand.New(rand.NewPCG(13, 14)), k, 3000)
			ar := cc
			ar.Shards, ar.ChunkElems = 2, 256
			rr := runRing(t, testCtx(t), in, nil, []float32{1, 1, 1, 1}, ar, func(i int, tr *MemTransport) Transport {
				if i == bad {
					return &corruptTransport{MemTransport: tr, corrupt: edit}
				}
				return tr
			})
			for i, err := range rr.errs {
				var pe *PeerError
				if i != bad && (!errors.As(err, &pe) || pe.Rank != bad) {
					t.Fatalf("%s ring %s: member %d: %v, want a PeerError naming %d", caseName(cc), name, i, err, bad)
				}
			}
			xs, _ := pseudoGrads(rand.New(rand.NewPCG(2, 2)), k, 4000)
			for _, results := range []bool{false, true} {
				if name == "nanTable" && !results || results && topkEdits[name] != nil {
					continue // a rejected verdict; a result's layout differs
				}
				sr := runScatter(t, testCtx(t), xs, honestWeights(k), scatterCfg(cc, 1, 256), func(i int, m *MemMesh) MeshTransport {
					if i == bad {
						return &garbleMesh{MemMesh: m, to: 2, results: results, msgNo: 1, edit: edit}
					}
					return m
				})
				var pe *PeerError
				if err := sr.errs[2]; !errors.As(err, &pe) || pe.Rank != bad {
					t.Errorf("%s scatter %s (results %v): member 2: %v, want a PeerError naming %d", caseName(cc), name, results, err, bad)
				}
			}
		}
	}
}

// TestCodecScatterDeterminism: the same inputs give the same bits,
// verdicts and commitments with the AVX2 loops and the Go loops.
func TestCodecScatterDeterminism(t *testing.T) {
	const k, n = 5, 9000
	rng := rand.New(rand.NewPCG(5, 6))
	xs, _ := pseudoGrads(rng, k, n)
	alieAttack(rng, xs, nil, 1)
	w := honestWeights(k)
	avx := useAVX2
	defer func() { useAVX2 = avx }()
	for _, cc := range collectiveCodecs {
		cfg := scatterCfg(cc, 3, 1000)
		useAVX2 = avx
		first := runScatter(t, testCtx(t), xs, w, cfg, nil)
		useAVX2 = false
		again := runScatter(t, testCtx(t), xs, w, cfg, nil)
		for i := range k {
			if again.errs[i] != nil || !sameBits(first.out[i], again.out[i]) || !reflect.DeepEqual(first.res[i].Owned, again.res[i].Owned) {
				t.Fatalf("%s member %d differs without AVX2: %v", caseName(cc), i, again.errs[i])
			}
		}
	}
}

// TestCodecMessageNorm: MessageNorm is the norm of the decoded values, and
// refuses what is not one message.
func TestCodecMessageNorm(t *testing.T) {
	x := gaussian(rand.New(rand.NewPCG(8, 8)), 999, true)
	for _, cc := range collectiveCodecs {
		p := testParams(t, cc, 1024)
		pk := packer{p: p}
		msg, _ := encodeMsg(t, &pk, x)
		dec, err := decodeMsg(p, msg, len(x), false)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := MessageNorm(msg)
		if want := float32(norm(dec)); !ok || math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("%s: MessageNorm = %v, %v; want %v", caseName(cc), got, ok, want)
		}
		for _, bad := range [][]byte{msg[:5], msg[:len(msg)-1], append(bytes.Clone(msg), 0)} {
			if _, ok := MessageNorm(bad); ok {
				t.Fatalf("%s: MessageNorm accepted %d bytes", caseName(cc), len(bad))
			}
		}
	}
}

// TestCombineDenseCoded: an owner's CenteredClip over q4 and q2 codes
// (robustMeanCoded on the contributions rewritten as int8) gives the
// bytes and verdicts of decoding them, robustMean and encoding the
// result, with clipped, rejected (a NaN table entry in use) and
// zero-weight members.
func TestCombineDenseCoded(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, cc := range collectiveCodecs[:2] {
		p := testParams(t, cc, 4096)
		for _, c := range []struct{ k, m int }{{3, 100}, {7, 1000}, {2, 50}, {9, 4095}} {
			xs, _ := pseudoGrads(rng, c.k, c.m)
			noiseAttack(rng, xs, nil, 1)
			msgs := make([][]byte, c.k)
			pk := packer{p: p}
			for i := range xs {
				msgs[i], _ = encodeMsg(t, &pk, xs[i])
			}
			if c.k > 3 { // member 2 uses a NaN entry (every entry is in use here)
				binary.LittleEndian.PutUint32(msgs[2][chunkHeaderSize:], 0x7fc00000)
			}
			w := honestWeights(c.k)
			w[c.k-1] = 0
			rc := RobustConfig{MaxWeight: testH}
			if err := rc.Validate(); err != nil {
				t.Fatal(err)
			}
			ow := newOwnerWork(p, c.k, c.m)
			got, gotV, err := ow.combine(&rc, w, msgs, 0, -1, 0)
			got = bytes.Clone(got)
			putOwnerWork(ow)
			if err != nil {
				t.Fatal(err)
			}
			rows := make([][]float32, c.k)
			for i, m := range msgs {
				rows[i] = make([]float32, c.m)
				_ = pk.read(m[chunkHeaderSize:], c.m, false, false)
				pk.apply(rows[i], m[chunkHeaderSize:], 1, false)
			}
			var ws robustWork
			res, wantV := make([]float32, c.m), make([]Verdict, c.k)
			robustMean(&ws, &rc, w, rows, res, wantV)
			if c.k > 3 && (wantV[2].Flag != FlagRejected || wantV[0].Flag != FlagHard) {
				t.Fatalf("%s k=%d: verdicts %+v: not the case meant", caseName(cc), c.k, wantV)
			}
			want := make([]byte, p.msgSize(c.m))
			putHeader(want, chunkHeader{codec: p.codec, phase: phaseDirectGather, n: uint32(c.m)})
			if _, err := pk.encode(want[chunkHeaderSize:], res, nil); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || !reflect.DeepEqual(gotV, wantV) {
				t.Fatalf("%s k=%d m=%d: the coded rule differs from decoding + robustMean", caseName(cc), c.k, c.m)
			}
		}
	}
}
