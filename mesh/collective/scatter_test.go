package collective

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// scatterRun is the outcome of one in-memory ScatterAllReduce.
type scatterRun struct {
	out  [][]float32
	res  []ScatterResult
	errs []error
}

// runScatter runs ScatterAllReduce on every member of an in-memory mesh,
// member i using transport wrap(i, t), src in[i] and weights w.
func runScatter(t testing.TB, ctx context.Context, in [][]float32, w []float32, cfg ScatterConfig,
	wrap func(i int, t *MemMesh) MeshTransport) scatterRun {
	t.Helper()
	k := len(in)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ts := NewMemMesh(k, 2*cfg.Shards)
	sr := scatterRun{out: make([][]float32, k), res: make([]ScatterResult, k), errs: make([]error, k)}
	var wg sync.WaitGroup
	for i := range k {
		sr.out[i] = make([]float32, len(in[i]))
		var tr MeshTransport = ts[i]
		if wrap != nil {
			tr = wrap(i, ts[i])
		}
		wg.Go(func() {
			sr.res[i], sr.errs[i] = ScatterAllReduce(ctx, tr, i, w, Buffers{Src: in[i], Dst: sr.out[i]}, cfg)
		})
	}
	wg.Wait()
	return sr
}

// TestScatterAllReduce covers k = 1..8 with awkward lengths, several
// shards and chunk sizes: every member ends with the same bits, close to
// the float64 weighted mean of honest pseudo-gradients.
func TestScatterAllReduce(t *testing.T) {
	ctx := testCtx(t)
	for _, k := range []int{1, 2, 3, 4, 5, 8} {
		for _, n := range []int{0, 1, k - 1, 1000, 4099} {
			for _, shards := range []int{1, 3} {
				rng := rand.New(rand.NewPCG(uint64(k), uint64(n)))
				xs, _ := pseudoGrads(rng, k, n)
				w := honestWeights(k)
				cfg := ScatterConfig{Shards: shards, ChunkElems: 256, Robust: RobustConfig{MaxWeight: testH}}
				sr := runScatter(t, ctx, xs, w, cfg, nil)
				for i, err := range sr.errs {
					if err != nil {
						t.Fatalf("k=%d n=%d member %d: %v", k, n, i, err)
					}
				}
				for i := 1; i < k; i++ {
					if !sameBits(sr.out[0], sr.out[i]) {
						t.Fatalf("k=%d n=%d: member %d differs from member 0", k, n, i)
					}
				}
				if n == 4099 && shards == 1 && k >= 3 { // chunks of ≥ 256 values
					if e := relErr(sr.out[0], refMean(xs, w)); e > 0.02 {
						t.Errorf("k=%d n=%d shards=%d: rel err %.4f vs the exact mean", k, n, shards, e)
					}
				}
			}
		}
	}
}

// recMesh records every message a member sends, per (to, lane).
type recMesh struct {
	*MemMesh
	mu   sync.Mutex
	sent map[[2]int][]byte
}

func (r *recMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	r.mu.Lock()
	if r.sent == nil {
		r.sent = map[[2]int][]byte{}
	}
	r.sent[[2]int{to, lane}] = append(r.sent[[2]int{to, lane}], msg...)
	r.mu.Unlock()
	return r.MemMesh.Send(ctx, to, lane, msg)
}

// ownContribution re-encodes member i's contribution to segment j of shard
// s, which never crosses the wire when i owns it (an auditor would ask the
// owner for it).
func ownContribution(t *testing.T, in []float32, i, j, s, k int, cfg ScatterConfig) []byte {
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	lo, hi := span(len(in), cfg.Shards, s)
	sc := newScatter(i, k, nil, cfg)
	sc.ctx = context.Background()
	r := newScatterShard(sc, s, Buffers{Src: in[lo:hi], Dst: make([]float32, hi-lo)})
	if err := r.encode(); err != nil {
		t.Fatal(err)
	}
	return r.enc[r.segOff[j]:r.segOff[j+1]]
}

// TestScatterCommitmentsAudit: each member's commitments match what every
// owner reports it received, and an auditor holding a segment's k
// contributions recomputes the owner's result bytes and verdicts with
// RobustSegment — and catches an owner that changed its result.
func TestScatterCommitmentsAudit(t *testing.T) {
	const k, n = 4, 5000
	rng := rand.New(rand.NewPCG(3, 4))
	xs, _ := pseudoGrads(rng, k, n)
	noiseAttack(rng, xs, nil, 1)
	w := honestWeights(k)
	cfg := ScatterConfig{Shards: 2, ChunkElems: 300, Robust: RobustConfig{MaxWeight: testH}}
	recs := make([]*recMesh, k)
	sr := runScatter(t, testCtx(t), xs, w, cfg, func(i int, m *MemMesh) MeshTransport {
		recs[i] = &recMesh{MemMesh: m}
		return recs[i]
	})
	for i, err := range sr.errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	for j := range k {
		for s := range cfg.Shards {
			auditSegment(t, xs, w, cfg, recs, sr.res, j, s)
			checkSentNorms(t, sr.res, k, j, s)
		}
	}
}

// checkSentNorms: the norm owner j states for each member's chunk of shard
// s is, bit for bit, the one the member computed of what it sent
// (ScatterResult.SentNorms: what a published norm is checked against).
func checkSentNorms(t *testing.T, res []ScatterResult, k, j, s int) {
	t.Helper()
	rep := res[j].Owned[s]
	for i := range k {
		norms := res[i].SentNorms[s*k+j]
		if len(norms) != len(rep.Verdicts) {
			t.Fatalf("member %d: %d norms for owner %d's %d chunks", i, len(norms), j, len(rep.Verdicts))
		}
		for c, v := range rep.Verdicts {
			if math.Float32bits(v[i].Norm) != math.Float32bits(norms[c]) {
				t.Fatalf("owner %d shard %d chunk %d member %d: verdict norm %v, member's %v", j, s, c, i, v[i].Norm, norms[c])
			}
		}
	}
}

func TestMessageNorm(t *testing.T) {
	x := []float32{3, -4, 0, 12}
	msg := make([]byte, CodecInt8.msgSize(len(x)))
	var qz quantizer
	var tab [256]float32
	if err := qz.encodeInt8Scanned(msg[chunkHeaderSize:], &tab, x, prepScan(x, nil, 1)); err != nil {
		t.Fatal(err)
	}
	putHeader(msg, chunkHeader{codec: CodecInt8, n: uint32(len(x))})
	got, ok := MessageNorm(msg)
	dec := make([]float32, len(x))
	decodeInt8Set(dec, &tab, msg[chunkHeaderSize+int8TableSize:])
	if want := float32(norm(dec)); !ok || got != want || math.Abs(float64(got)-13) > 0.2 {
		t.Fatalf("MessageNorm = %v, %v; want %v ≈ 13", got, ok, want)
	}
	for _, bad := range [][]byte{nil, msg[:5], msg[:len(msg)-1], append(slices.Clone(msg), 0)} {
		if _, ok := MessageNorm(bad); ok {
			t.Fatalf("MessageNorm accepted %d bytes", len(bad))
		}
	}
	inf := slices.Clone(msg)
	binary.LittleEndian.PutUint32(inf[chunkHeaderSize+4*int(inf[len(inf)-1]):], math.Float32bits(float32(math.NaN())))
	if n, ok := MessageNorm(inf); !ok || !math.IsInf(float64(n), 1) {
		t.Fatalf("non-finite table: MessageNorm = %v, %v; want +Inf", n, ok)
	}
}

// segmentContribs returns the k contributions owner j received for its
// segment of shard s, as recorded on the wire (its own re-encoded).
func segmentContribs(t *testing.T, xs [][]float32, cfg ScatterConfig, recs []*recMesh, j, s int) [][]byte {
	k := len(xs)
	contribs := make([][]byte, k)
	for i := range k {
		if i == j {
			contribs[i] = ownContribution(t, xs[i], i, j, s, k, cfg)
		} else {
			contribs[i] = recs[i].sent[[2]int{j, s}]
		}
	}
	return contribs
}

func auditSegment(t *testing.T, xs [][]float32, w []float32, cfg ScatterConfig, recs []*recMesh, res []ScatterResult, j, s int) {
	k := len(xs)
	rep := res[j].Owned[s]
	contribs := segmentContribs(t, xs, cfg, recs, j, s)
	for i := range k {
		if c, ok := CommitMessages(contribs[i]); !ok || c != rep.Received[i] || c != res[i].Sent[s*k+j] {
			t.Fatalf("owner %d shard %d member %d: commitments differ", j, s, i)
		}
		if res[i].Got[s*k+j] != rep.Result {
			t.Fatalf("owner %d shard %d member %d: result commitments differ", j, s, i)
		}
	}
	lo, hi := span(len(xs[0]), cfg.Shards, s)
	slo, shi := span(hi-lo, k, j)
	out, verdicts, err := RobustSegment(cfg, w, j, shi-slo, contribs)
	if err != nil {
		t.Fatal(err)
	}
	sent := recs[j].sent[[2]int{(j + 1) % k, cfg.Shards + s}]
	if c, _ := CommitMessages(out); !bytes.Equal(out, sent) || !reflect.DeepEqual(verdicts, rep.Verdicts) || c != rep.Result {
		t.Fatalf("owner %d shard %d: audit disagrees with the owner", j, s)
	}
	if j == 1 && verdicts[0][0].Flag != FlagHard {
		t.Errorf("owner %d: noise attacker not flagged: %+v", j, verdicts[0][0])
	}
	lie := append([]byte(nil), sent...)
	lie[chunkHeaderSize] ^= 1 // one bit of the first table entry
	if bytes.Equal(out, lie) {
		t.Fatal("audit misses a changed result")
	}
}

// TestScatterDeterminism: the same inputs give the same bits and
// commitments, run after run, with GOMAXPROCS 1 or 2, with or without the
// AVX2 loops (the Go loops are what other platforms run).
func TestScatterDeterminism(t *testing.T) {
	const k, n = 5, 20000
	rng := rand.New(rand.NewPCG(5, 6))
	xs, _ := pseudoGrads(rng, k, n)
	alieAttack(rng, xs, nil, 1)
	w := honestWeights(k)
	cfg := ScatterConfig{Shards: 3, ChunkElems: 1000, Robust: RobustConfig{MaxWeight: testH}}
	first := runScatter(t, testCtx(t), xs, w, cfg, nil)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	avx := useAVX2
	defer func() { useAVX2 = avx }()
	for run, procs := range []int{1, 2, 1, 2} {
		runtime.GOMAXPROCS(procs)
		useAVX2 = avx && run < 2
		again := runScatter(t, testCtx(t), xs, w, cfg, nil)
		for i := range k {
			if again.errs[i] != nil || !sameBits(first.out[i], again.out[i]) ||
				!reflect.DeepEqual(first.res[i].Sent, again.res[i].Sent) || !reflect.DeepEqual(first.res[i].Owned, again.res[i].Owned) {
				t.Fatalf("run %d (GOMAXPROCS %d, AVX2 %v) member %d differs: %v", run, procs, useAVX2, i, again.errs[i])
			}
		}
	}
}

// liarMesh is an owner that sends member victim a different result.
type liarMesh struct {
	*MemMesh
	shards, victim int
}

func (l *liarMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	if lane >= l.shards && to == l.victim {
		msg = append([]byte(nil), msg...)
		f := math.Float32frombits(binary.LittleEndian.Uint32(msg[chunkHeaderSize:]))
		binary.LittleEndian.PutUint32(msg[chunkHeaderSize:], math.Float32bits(f+1))
	}
	return l.MemMesh.Send(ctx, to, lane, msg)
}

// TestScatterLyingOwner: an owner that sends one member a different result
// breaks bit-identity silently, but the commitments show it: the victim's
// Got differs from the owner's published Result, the others' do not.
func TestScatterLyingOwner(t *testing.T) {
	const k, owner, victim = 4, 1, 3
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(4, 4)), k, 6000)
	cfg := ScatterConfig{Shards: 2, ChunkElems: 500}
	sr := runScatter(t, testCtx(t), xs, honestWeights(k), cfg, func(i int, m *MemMesh) MeshTransport {
		if i == owner {
			return &liarMesh{MemMesh: m, shards: cfg.Shards, victim: victim}
		}
		return m
	})
	for i, err := range sr.errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if sameBits(sr.out[0], sr.out[victim]) {
		t.Fatal("the lie did not reach the victim")
	}
	for s := range cfg.Shards {
		published := sr.res[owner].Owned[s].Result
		for i := range k {
			if lied := sr.res[i].Got[s*k+owner] != published; lied != (i == victim) {
				t.Errorf("shard %d member %d: commitment mismatch %v", s, i, lied)
			}
		}
	}
}

// TestScatterKilledMember: a member dies in the middle; every survivor
// returns a *PeerError naming it.
func TestScatterKilledMember(t *testing.T) {
	defer goleak.VerifyNone(t)
	const k = 5
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(1, 1)), k, 40000)
	cfg := ScatterConfig{Shards: 2, ChunkElems: 1000}
	for _, sends := range []int{0, 3, 20} {
		sr := runScatter(t, testCtx(t), xs, honestWeights(k), cfg, func(i int, m *MemMesh) MeshTransport {
			if i == 2 {
				return MeshDieAfter(m, sends)
			}
			return m
		})
		for i, err := range sr.errs {
			var pe *PeerError
			if i != 2 && (!errors.As(err, &pe) || pe.Rank != 2) {
				t.Errorf("sends=%d member %d: %v, want a PeerError naming 2", sends, i, err)
			}
		}
	}
}

// garbleMesh corrupts with edit the msgNo-th message a member sends to
// member to on a contribution lane (results: on a result lane).
type garbleMesh struct {
	*MemMesh
	mu      sync.Mutex
	to      int
	results bool
	msgNo   int
	edit    func([]byte) []byte
}

func (g *garbleMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	g.mu.Lock()
	if to == g.to && (lane >= 1) == g.results { // one shard: lane 0 contributions, 1 results
		g.msgNo--
	}
	hit := g.msgNo == -1
	if hit {
		g.msgNo--
	}
	g.mu.Unlock()
	if hit {
		msg = g.edit(append([]byte(nil), msg...))
	}
	return g.MemMesh.Send(ctx, to, lane, msg)
}

// TestScatterGarbage: a member sending a malformed message (wrong header,
// truncated, too long, NaN in a result table) is named by everyone.
func TestScatterGarbage(t *testing.T) {
	defer goleak.VerifyNone(t)
	const k = 4
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(2, 2)), k, 8000)
	cfg := ScatterConfig{Shards: 1, ChunkElems: 500}
	edits := map[string]func([]byte) []byte{
		"header":   func(m []byte) []byte { m[3] ^= 1; return m },
		"short":    func(m []byte) []byte { return m[:len(m)-1] },
		"long":     func(m []byte) []byte { return append(m, 0) },
		"empty":    func([]byte) []byte { return nil },
		"codec":    func(m []byte) []byte { m[0] = byte(CodecFP32); return m },
		"nanTable": func(m []byte) []byte { binary.LittleEndian.PutUint32(m[chunkHeaderSize:], 0x7fc00000); return m },
	}
	for name, edit := range edits {
		for _, at := range []struct {
			to, msgNo int
			results   bool
		}{{0, 0, false}, {3, 3, false}, {2, 0, true}, {0, 3, true}} { // 4 chunks per segment
			if name == "nanTable" && !at.results {
				continue // a NaN contribution is rejected, not an error
			}
			msgNo := at.msgNo
			sr := runScatter(t, testCtx(t), xs, honestWeights(k), cfg, func(i int, m *MemMesh) MeshTransport {
				if i == 1 {
					return &garbleMesh{MemMesh: m, to: at.to, results: at.results, msgNo: msgNo, edit: edit}
				}
				return m
			})
			named := 0
			for i, err := range sr.errs {
				var pe *PeerError
				switch {
				case i == 1 || err == nil && at.results: // a member may finish before a result reaches another
				case !errors.As(err, &pe) || pe.Rank != 1:
					t.Errorf("%s #%d: member %d: %v, want a PeerError naming 1", name, msgNo, i, err)
				default:
					named++
				}
			}
			if named == 0 {
				t.Errorf("%s #%d: nobody named member 1", name, msgNo)
			}
		}
	}
}

// TestScatterErrorFeedback: over 16 rounds of fresh inputs the running sum
// of the results drifts much less from the exact running sum with error
// feedback than without.
func TestScatterErrorFeedback(t *testing.T) {
	const k, n, rounds = 4, 1 << 14, 16
	cum := func(ef bool) float64 {
		rng := rand.New(rand.NewPCG(9, 9))
		res := make([][2][]float32, k)
		for i := range res {
			res[i] = [2][]float32{make([]float32, n), make([]float32, n)}
		}
		w := honestWeights(k)
		got, want := make([]float32, n), make([]float64, n)
		for range rounds {
			xs, _ := pseudoGrads(rng, k, n)
			out := efRound(t, xs, w, res, ef)
			for j, v := range refMean(xs, w) {
				want[j] += v
				got[j] += out[j]
			}
		}
		return relErr(got, want)
	}
	without, with := cum(false), cum(true)
	t.Logf("running-sum rel err: %.4f without error feedback, %.4f with", without, with)
	if !(with < 0.6*without) {
		t.Errorf("error feedback does not help: %.4f vs %.4f", with, without)
	}
}

func efRound(t *testing.T, xs [][]float32, w []float32, res [][2][]float32, ef bool) []float32 {
	return codecRound(t, AllReduceConfig{Codec: CodecInt8}, "scatter", FeedbackDefault, 4096, xs, w, res, ef)
}

// TestScatterInvalidArguments: bad configurations, ranks, weights and
// buffers wrap ErrInvalidArgument and nothing is sent.
func TestScatterInvalidArguments(t *testing.T) {
	ts := NewMemMesh(2, 2)
	v := make([]float32, 10)
	cases := []struct {
		rank int
		w    []float32
		b    Buffers
		cfg  ScatterConfig
	}{
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Shards: -1}},
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Robust: RobustConfig{Iters: -1}}},
		{2, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{}},
		{0, []float32{1, float32(math.NaN())}, Buffers{Dst: v}, ScatterConfig{}},
		{0, []float32{0, 0}, Buffers{Dst: v}, ScatterConfig{}},
		{0, make([]float32, MaxScatterMembers+1), Buffers{Dst: v}, ScatterConfig{}},
		{0, []float32{1, 1}, Buffers{Src: v[:3], Dst: v}, ScatterConfig{}},
		{0, []float32{1, 1}, Buffers{Dst: v, ResIn: v[:2], ResOut: v}, ScatterConfig{ErrorFeedback: true}},
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Owners: []int{}}},
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Owners: []int{2}}},
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Owners: []int{1, 1}}},
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Owners: []int{0, 1, 0}}},
		{0, []float32{1, 1}, Buffers{Dst: v}, ScatterConfig{Owners: []int{-1}}},
	}
	for i, c := range cases {
		if _, err := ScatterAllReduce(testCtx(t), ts[0], c.rank, c.w, c.b, c.cfg); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

// TestScatterCancel: cancelling returns context.Canceled, not a PeerError.
func TestScatterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ts := NewMemMesh(3, 2)
	done := make(chan error, 1)
	go func() {
		_, err := ScatterAllReduce(ctx, ts[0], 0, []float32{1, 1, 1}, Buffers{Dst: make([]float32, 3000)}, ScatterConfig{Shards: 1})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// TestScatterNoAttackerVsRing: with honest (non-iid) members only, the
// robust scatter's result is as close to the exact weighted mean as
// today's int8 ring's (the issue's "loss within 0.5 % of plain int8
// averaging", in the one figure a unit test can measure), and nobody is
// flagged.
func TestScatterNoAttackerVsRing(t *testing.T) {
	const n = 1 << 18
	for _, k := range []int{4, 8, 16} {
		xs, _ := pseudoGrads(rand.New(rand.NewPCG(8, uint64(k))), k, n)
		w := honestWeights(k)
		ref := refMean(xs, w)
		sr := runScatter(t, testCtx(t), xs, w, ScatterConfig{Robust: RobustConfig{MaxWeight: testH}}, nil)
		rr := runRing(t, testCtx(t), xs, nil, w, AllReduceConfig{}, nil)
		if sr.errs[0] != nil || rr.errs[0] != nil {
			t.Fatal(sr.errs[0], rr.errs[0])
		}
		es, er := relErr(sr.out[0], ref), relErr(rr.out[0], ref)
		t.Logf("k=%2d: rel err vs the exact mean: scatter %.4f, ring %.4f", k, es, er)
		if es > 1.1*er {
			t.Errorf("k=%d: scatter %.4f, more than 1.1 × the ring's %.4f", k, es, er)
		}
		checkVerdicts(t, sr.res, "", 0)
	}
}

// hungMesh is a member whose sends (all, or only its results) block until
// the attempt's deadline: alive, connected, silent.
type hungMesh struct {
	*MemMesh
	shards      int
	resultsOnly bool
}

func (h *hungMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	if !h.resultsOnly || lane >= h.shards {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.MemMesh.Send(ctx, to, lane, msg)
}

// Abort does nothing: a hung member tells nobody anything.
func (h *hungMesh) Abort(error) {}

// TestScatterHungMember: a member that stays connected but sends nothing,
// or sends its contributions but not its results, is named by every other
// member when the deadline passes — not a member that was waiting too.
func TestScatterHungMember(t *testing.T) {
	defer goleak.VerifyNone(t)
	const k, hung = 5, 2
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(6, 6)), k, 30000)
	cfg := ScatterConfig{Shards: 2, ChunkElems: 1000}
	for _, resultsOnly := range []bool{false, true} {
		// Long enough for the honest members, on a loaded machine, to send
		// everything they can before it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sr := runScatter(t, ctx, xs, honestWeights(k), cfg, func(i int, m *MemMesh) MeshTransport {
			if i == hung {
				return &hungMesh{MemMesh: m, shards: cfg.Shards, resultsOnly: resultsOnly}
			}
			return m
		})
		cancel()
		for i, err := range sr.errs {
			var pe *PeerError
			if i != hung && (!errors.As(err, &pe) || pe.Rank != hung) {
				t.Errorf("results only %v: member %d: %v, want a PeerError naming %d", resultsOnly, i, err, hung)
			}
		}
	}
}

// TestScatterZeroWeight: a member with weight 0 takes no part in the mean
// but still gets the result; its contribution is neither used nor flagged.
func TestScatterZeroWeight(t *testing.T) {
	const k = 4
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(7, 7)), k, 20000)
	for j := range xs[0] {
		xs[0][j] *= -50 // would move the mean a lot if it counted
	}
	w := honestWeights(k)
	w[0] = 0
	sr := runScatter(t, testCtx(t), xs, w, ScatterConfig{Shards: 2, ChunkElems: 2000}, nil)
	for i, err := range sr.errs {
		if err != nil || !sameBits(sr.out[0], sr.out[i]) {
			t.Fatalf("member %d: %v or different bits", i, err)
		}
	}
	if e := relErr(sr.out[0], refMean(xs[1:], w[1:])); e > 0.02 {
		t.Errorf("rel err %.4f vs the mean of the weighted members", e)
	}
	checkVerdicts(t, sr.res, "", 0)
}

// clientMesh fails the test on any message between two clients (members
// that own no segment): they need not reach each other.
type clientMesh struct {
	*MemMesh
	t      testing.TB
	self   int
	client []bool
}

func (c clientMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	if c.client[c.self] && c.client[to] {
		c.t.Errorf("client %d sent to client %d (lane %d)", c.self, to, lane)
	}
	return c.MemMesh.Send(ctx, to, lane, msg)
}

// TestScatterClients: with cfg.Owners, members that own nothing send their
// contributions and receive every result, never talk to each other, and
// every member ends with the same bits, close to the mean; the owners'
// reports and the commitments line up per segment, and an auditor
// recomputes each owner's bytes. A poisoned client is clipped as an owner
// would be.
func TestScatterClients(t *testing.T) {
	ctx := testCtx(t)
	const n = 4099
	for _, c := range []struct {
		k      int
		owners []int
		poison int // a member sending −1000×, or -1
	}{
		{2, []int{1}, -1},
		{4, []int{0}, -1},
		{4, []int{3, 1}, -1},
		{5, []int{0, 2, 4}, -1},
		{8, []int{7, 0, 3}, 5},
		{8, []int{2, 6}, 2},
	} {
		rng := rand.New(rand.NewPCG(uint64(c.k), uint64(len(c.owners))))
		xs, _ := pseudoGrads(rng, c.k, n)
		hw, bound := honestWeights(c.k), 0.05
		if c.poison >= 0 {
			for t := range xs[c.poison] {
				xs[c.poison][t] *= -1000
			}
			hw[c.poison], bound = 0, attackBound(c.k, 1)
		}
		clean := refMean(xs, hw)
		w := honestWeights(c.k)
		cfg := ScatterConfig{Shards: 2, ChunkElems: 256, Owners: c.owners, Robust: RobustConfig{MaxWeight: testH}}
		client := make([]bool, c.k)
		for i := range client {
			client[i] = !slices.Contains(c.owners, i)
		}
		sr := runScatter(t, ctx, xs, w, cfg, func(i int, m *MemMesh) MeshTransport {
			return clientMesh{MemMesh: m, t: t, self: i, client: client}
		})
		for i, err := range sr.errs {
			if err != nil {
				t.Fatalf("k=%d owners=%v member %d: %v", c.k, c.owners, i, err)
			}
		}
		for i := 1; i < c.k; i++ {
			if !sameBits(sr.out[0], sr.out[i]) {
				t.Fatalf("k=%d owners=%v: member %d differs from member 0", c.k, c.owners, i)
			}
		}
		if e := relErr(sr.out[0], clean); e > bound {
			t.Errorf("k=%d owners=%v poison=%d: rel err %.4f vs the honest mean", c.k, c.owners, c.poison, e)
		}
		o := len(c.owners)
		for i, res := range sr.res {
			if len(res.Sent) != cfg.Shards*o || len(res.Got) != cfg.Shards*o {
				t.Fatalf("member %d: %d sent, %d got commitments, want %d", i, len(res.Sent), len(res.Got), cfg.Shards*o)
			}
			if want := cfg.Shards * b2n(!client[i]); len(res.Owned) != want {
				t.Fatalf("member %d: %d reports, want %d", i, len(res.Owned), want)
			}
			for _, rep := range res.Owned {
				if c.owners[rep.Segment] != i {
					t.Fatalf("member %d reports segment %d of owner %d", i, rep.Segment, c.owners[rep.Segment])
				}
				for m := range c.k {
					if sr.res[m].Sent[rep.Shard*o+rep.Segment] != rep.Received[m] {
						t.Errorf("segment %d: member %d's commitment differs from what owner %d received", rep.Segment, m, i)
					}
					if sr.res[m].Got[rep.Shard*o+rep.Segment] != rep.Result {
						t.Errorf("segment %d: member %d got other bytes than owner %d sent", rep.Segment, m, i)
					}
				}
				if c.poison >= 0 && rep.Verdicts[0][c.poison].Flag == FlagNone {
					t.Errorf("segment %d: poisoned member %d not flagged: %+v", rep.Segment, c.poison, rep.Verdicts[0][c.poison])
				}
			}
		}
		// The auditor's recomputation of every segment.
		for j, owner := range c.owners {
			for s := range cfg.Shards {
				lo, hi := span(n, cfg.Shards, s)
				slo, shi := span(hi-lo, o, j)
				contribs := make([][]byte, c.k)
				for m := range c.k {
					contribs[m] = ownContribution(t, xs[m], m, j, s, c.k, cfg)
				}
				got, _, err := RobustSegment(cfg, w, j, shi-slo, contribs)
				if err != nil {
					t.Fatal(err)
				}
				if cm, _ := CommitMessages(got); cm != sr.res[owner].Owned[s].Result {
					t.Errorf("k=%d segment %d shard %d: the auditor's bytes differ from owner %d's", c.k, j, s, owner)
				}
			}
		}
	}
}

func b2n(b bool) int {
	if b {
		return 1
	}
	return 0
}

// forgerMesh is an owner that sends every member the same forged result
// (its first table entry moved): the members agree with each other, so
// only an audit of its computation shows it.
type forgerMesh struct {
	*MemMesh
	shards int
}

func (f *forgerMesh) Send(ctx context.Context, to, lane int, msg []byte) error {
	if lane >= f.shards {
		msg = append([]byte(nil), msg...)
		v := math.Float32frombits(binary.LittleEndian.Uint32(msg[chunkHeaderSize:]))
		binary.LittleEndian.PutUint32(msg[chunkHeaderSize:], math.Float32bits(v-1))
	}
	return f.MemMesh.Send(ctx, to, lane, msg)
}

// TestScatterAudit: with Audit, every chunk of every owner's segment
// recomputed by AuditChunk from the owner's Inputs hashes to what every
// member received, and each member's input to what it sent (owners and
// clients alike). An owner that forges its result, or that reports an
// input other than the one a member sent, fails the check.
func TestScatterAudit(t *testing.T) {
	ctx := testCtx(t)
	for _, owners := range [][]int{nil, {4, 1}} {
		const k, n = 5, 7000
		xs, _ := pseudoGrads(rand.New(rand.NewPCG(6, 6)), k, n)
		w := honestWeights(k)
		cfg := ScatterConfig{Shards: 2, ChunkElems: 500, Audit: true, Owners: owners, Robust: RobustConfig{MaxWeight: testH}}
		forger := 1
		for _, forge := range []bool{false, true} {
			sr := runScatter(t, ctx, xs, w, cfg, func(i int, m *MemMesh) MeshTransport {
				if forge && i == forger {
					return &forgerMesh{MemMesh: m, shards: cfg.Shards}
				}
				return m
			})
			for i, err := range sr.errs {
				if err != nil {
					t.Fatalf("member %d: %v", i, err)
				}
			}
			o := k
			if owners != nil {
				o = len(owners)
			}
			caught := 0
			for i, res := range sr.res {
				if len(res.SentChunks) != cfg.Shards*o || len(res.GotChunks) != cfg.Shards*o {
					t.Fatalf("member %d: %d/%d chunk commitment lists", i, len(res.SentChunks), len(res.GotChunks))
				}
				for _, rep := range res.Owned {
					idx := rep.Shard*o + rep.Segment
					for c := range rep.Verdicts {
						in := rep.ChunkInputs(c)
						out, _, err := AuditChunk(cfg, w, rep.Segment, c, in)
						if err != nil {
							t.Fatal(err)
						}
						for m := range k {
							if sha256.Sum256(in[m]) != sr.res[m].SentChunks[idx][c] {
								t.Fatalf("owner %d segment %d chunk %d: member %d's input differs from what it sent", i, rep.Segment, c, m)
							}
							if other := sha256.Sum256(out) != sr.res[m].GotChunks[idx][c]; other != (forge && i == forger && m != forger) {
								t.Fatalf("forge=%v owner %d segment %d chunk %d member %d: recomputed result differs: %v", forge, i, rep.Segment, c, m, other)
							} else if other {
								caught++
							}
						}
					}
					// An owner reporting an input other than the one sent.
					in := rep.ChunkInputs(0)
					in[2] = append([]byte(nil), in[2]...)
					in[2][len(in[2])-1] ^= 1
					if sha256.Sum256(in[2]) == sr.res[2].SentChunks[idx][0] {
						t.Fatal("a changed input matches the sender's commitment")
					}
				}
			}
			if forge && caught == 0 {
				t.Fatal("the forged results were not caught")
			}
		}
	}
	// Garbage to the auditor: errors, never a panic.
	w := honestWeights(3)
	cfg := ScatterConfig{ChunkElems: 500, Audit: true}
	for _, msgs := range [][][]byte{nil, {{1}, {2}, {3}}, {make([]byte, 40), make([]byte, 40), make([]byte, 40)}} {
		if _, _, err := AuditChunk(cfg, w, 0, 0, msgs); err == nil {
			t.Errorf("AuditChunk accepted %d garbage inputs", len(msgs))
		}
	}
	var rep SegmentReport
	if rep.ChunkInputs(0) != nil {
		t.Error("ChunkInputs of an empty report")
	}
	for _, b := range [][]byte{{1, 2, 3}, make([]byte, chunkHeaderSize+5)} {
		if _, ok := CommitMessages(b); ok {
			t.Errorf("CommitMessages accepted %d malformed bytes", len(b))
		}
	}
}
