package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// ringRun is the outcome of one in-memory all-reduce.
type ringRun struct {
	out   [][]float32
	stats []Stats
	errs  []error
}

// runRing runs AllReduce on every member of an in-memory ring, member i
// using transport wrap(i, t) and vectors in[i] (copied). res, if not nil, is
// each member's residual (updated in place).
func runRing(t *testing.T, ctx context.Context, in [][]float32, res [][]float32, weights []float32, cfg AllReduceConfig,
	wrap func(i int, t *MemTransport) Transport) ringRun {
	t.Helper()
	k := len(in)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ts := NewMemRing(k, cfg.Shards)
	rr := ringRun{out: make([][]float32, k), stats: make([]Stats, k), errs: make([]error, k)}
	var wg sync.WaitGroup
	for i := range k {
		rr.out[i] = append([]float32(nil), in[i]...)
		var tr Transport = ts[i]
		if wrap != nil {
			tr = wrap(i, ts[i])
		}
		var r []float32
		if res != nil {
			r = res[i]
		}
		wg.Go(func() {
			rr.stats[i], rr.errs[i] = AllReduce(ctx, tr, i, weights, rr.out[i], r, cfg)
		})
	}
	wg.Wait()
	return rr
}

func randVecs(rng *rand.Rand, k, n int) [][]float32 {
	v := make([][]float32, k)
	for i := range v {
		v[i] = make([]float32, n)
		for j := range v[i] {
			v[i][j] = float32(rng.NormFloat64()) * 0.01 * float32(1+i%3)
		}
	}
	return v
}

// refMean is the weighted mean in float64.
func refMean(in [][]float32, w []float32) []float64 {
	var total float64
	for _, x := range w {
		total += float64(x)
	}
	out := make([]float64, len(in[0]))
	for i, v := range in {
		for j, x := range v {
			out[j] += float64(w[i]) * float64(x) / total
		}
	}
	return out
}

// relErr is ‖got − want‖₂ / ‖want‖₂.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestAllReduceRing covers k = 1..8 with awkward lengths (empty, shorter
// than k, not multiples of the chunk or of k), several shards, unequal
// weights, both codecs: every member ends with the same bits, close to the
// float64 weighted mean, and the byte counts match the ring's traffic.
func TestAllReduceRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 1; k <= 8; k++ {
		for _, n := range []int{0, 1, k - 1, k + 1, 37, 1000, 3*64*k + 5} {
			for _, shards := range []int{1, 3} {
				for _, codec := range []Codec{CodecInt8, CodecFP32} {
					name := fmt.Sprintf("k=%d/n=%d/S=%d/%v", k, n, shards, codec)
					in := randVecs(rng, k, n)
					w := make([]float32, k)
					for i := range w {
						w[i] = float32(1 + rng.IntN(100))
					}
					cfg := AllReduceConfig{Shards: shards, ChunkElems: 64, Codec: codec}
					rr := runRing(t, testCtx(t), in, nil, w, cfg, nil)
					checkRing(t, name, rr, in, w, codec)
				}
			}
		}
	}
}

func checkRing(t *testing.T, name string, rr ringRun, in [][]float32, w []float32, codec Codec) {
	t.Helper()
	for i, err := range rr.errs {
		if err != nil {
			t.Fatalf("%s: member %d: %v", name, i, err)
		}
	}
	for i := 1; i < len(rr.out); i++ {
		if !sameBits(rr.out[0], rr.out[i]) {
			t.Fatalf("%s: member %d's result differs from member 0's", name, i)
		}
	}
	bound := 1e-6
	if codec == CodecInt8 {
		bound = 0.02
	}
	if e := relErr(rr.out[0], refMean(in, w)); e > bound || math.IsNaN(e) {
		t.Fatalf("%s: relative error %.3g > %.3g", name, e, bound)
	}
	for i := range rr.stats {
		s := rr.stats[i]
		if s.BytesSent != rr.stats[(i+1)%len(in)].BytesRecv || s.MsgsSent != rr.stats[(i+1)%len(in)].MsgsRecv {
			t.Fatalf("%s: member %d sent %+v, right neighbour received %+v", name, i, s, rr.stats[(i+1)%len(in)])
		}
	}
}

// TestAllReduceFP32Exact uses values whose sums are exact in float32, so the
// fp32 ring must equal the mean exactly: each contribution counted once.
func TestAllReduceFP32Exact(t *testing.T) {
	const k, n = 4, 1001
	in := make([][]float32, k)
	want := make([]float32, n)
	for i := range in {
		in[i] = make([]float32, n)
		for j := range in[i] {
			in[i][j] = float32((i+1)*(j%97) - 50*i)
			want[j] += in[i][j] / k
		}
	}
	w := []float32{3, 3, 3, 3}
	rr := runRing(t, testCtx(t), in, nil, w, AllReduceConfig{Shards: 2, ChunkElems: 100, Codec: CodecFP32}, nil)
	for i := range rr.out {
		if rr.errs[i] != nil {
			t.Fatal(rr.errs[i])
		}
		if !sameBits(rr.out[i], want) {
			t.Fatalf("member %d: not the exact mean", i)
		}
	}
}

// TestAllReduceInt8Traffic checks what each member sends: 2(k−1) chunk
// messages per segment chunk, one byte per value plus the per-chunk table.
func TestAllReduceInt8Traffic(t *testing.T) {
	const k, n, ce = 4, 4096, 256
	in := randVecs(rand.New(rand.NewPCG(3, 4)), k, n)
	rr := runRing(t, testCtx(t), in, nil, []float32{1, 1, 1, 1}, AllReduceConfig{Shards: 1, ChunkElems: ce}, nil)
	chunks := int64(n / k / ce)
	want := 2 * (k - 1) * chunks * int64(chunkHeaderSize+int8TableSize+ce)
	for i, s := range rr.stats {
		if s.BytesSent != want || s.MsgsSent != 2*(k-1)*chunks {
			t.Fatalf("member %d sent %d bytes in %d messages, want %d", i, s.BytesSent, s.MsgsSent, want)
		}
	}
}

// TestAllReduceZeroWeight: a member with weight 0 relays but contributes nothing.
func TestAllReduceZeroWeight(t *testing.T) {
	in := randVecs(rand.New(rand.NewPCG(5, 6)), 3, 500)
	for j := range in[1] {
		in[1][j] = 1e6 // would dominate if counted
	}
	w := []float32{1, 0, 2}
	rr := runRing(t, testCtx(t), in, nil, w, AllReduceConfig{Shards: 2, ChunkElems: 50}, nil)
	checkRing(t, "zero weight", rr, in, w, CodecInt8)
}

// efRounds runs rounds all-reduces of fresh random vectors and returns the
// relative error of the running sum of results against the exact running sum.
func efRounds(t *testing.T, rounds int, ef bool) (last, cum float64) {
	const k, n = 4, 8192
	rng := rand.New(rand.NewPCG(7, 8))
	w := []float32{1, 2, 3, 4}
	res := make([][]float32, k)
	for i := range res {
		res[i] = make([]float32, n)
	}
	sumGot := make([]float32, n)
	sumWant := make([]float64, n)
	cfg := AllReduceConfig{Shards: 2, ChunkElems: 1024, ErrorFeedback: ef}
	for range rounds {
		in := randVecs(rng, k, n)
		want := refMean(in, w)
		rr := runRing(t, testCtx(t), in, res, w, cfg, nil)
		if rr.errs[0] != nil {
			t.Fatal(rr.errs[0])
		}
		last = relErr(rr.out[0], want)
		for j := range n {
			sumGot[j] += rr.out[0][j]
			sumWant[j] += want[j]
		}
	}
	return last, relErr(sumGot, sumWant)
}

// TestAllReduceErrorFeedback: carrying the residual keeps the error of the
// accumulated result from growing with the number of rounds.
func TestAllReduceErrorFeedback(t *testing.T) {
	const rounds = 16
	lastNo, cumNo := efRounds(t, rounds, false)
	lastEF, cumEF := efRounds(t, rounds, true)
	t.Logf("int8 vs exact, %d rounds, k=4: per round %.3g (no EF) %.3g (EF); running sum %.3g (no EF) %.3g (EF)",
		rounds, lastNo, lastEF, cumNo, cumEF)
	if cumEF > cumNo/2 {
		t.Fatalf("error feedback did not help: running-sum error %.3g with, %.3g without", cumEF, cumNo)
	}
}

// TestAllReduceKilledMember: a member dies mid all-reduce; every survivor
// returns promptly with a *PeerError naming it.
func TestAllReduceKilledMember(t *testing.T) {
	const k, dead = 5, 2
	in := randVecs(rand.New(rand.NewPCG(9, 10)), k, 20000)
	w := []float32{1, 1, 1, 1, 1}
	ctx := testCtx(t)
	start := time.Now()
	rr := runRing(t, ctx, in, nil, w, AllReduceConfig{Shards: 3, ChunkElems: 100}, func(i int, tr *MemTransport) Transport {
		if i == dead {
			return DieAfter(tr, 7)
		}
		return tr
	})
	for i, err := range rr.errs {
		if i == dead {
			continue
		}
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Rank != dead {
			t.Fatalf("member %d: got %v, want a PeerError naming member %d", i, err, dead)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("survivors waited for the deadline (%v)", time.Since(start))
	}
}

// TestAllReduceHungMember: a member that never takes part makes everybody
// return by the deadline with a PeerError, and somebody names it. (Who names
// whom is a race of the deadlines: a neighbour that times out first blames
// its own neighbour and its abort may reach the others first.)
func TestAllReduceHungMember(t *testing.T) {
	const k, hung = 4, 1
	in := randVecs(rand.New(rand.NewPCG(11, 12)), k, 5000)
	w := []float32{1, 1, 1, 1}
	ts := NewMemRing(k, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		if i == hung {
			continue
		}
		wg.Go(func() {
			_, errs[i] = AllReduce(ctx, ts[i], i, w, in[i], nil, AllReduceConfig{Shards: 2, ChunkElems: 100})
		})
	}
	wg.Wait()
	named := false
	for i, err := range errs {
		if i == hung {
			continue
		}
		var pe *PeerError
		if !errors.As(err, &pe) {
			t.Fatalf("member %d: got %v, want a PeerError", i, err)
		}
		named = named || pe.Rank == hung
	}
	if !named {
		t.Fatalf("nobody named the hung member: %v", errs)
	}
}

// corruptTransport lets a member send malformed chunks.
type corruptTransport struct {
	*MemTransport
	corrupt func(msg []byte) []byte
}

func (c *corruptTransport) Send(ctx context.Context, shard int, msg []byte) error {
	return c.MemTransport.Send(ctx, shard, c.corrupt(append([]byte(nil), msg...)))
}

// TestAllReduceGarbage: malformed chunks from one member make everybody fail
// with a PeerError naming it, never a panic.
func TestAllReduceGarbage(t *testing.T) {
	const k, bad = 4, 1
	cases := map[string]func([]byte) []byte{
		"truncated":    func(m []byte) []byte { return m[:len(m)-1] },
		"short":        func(m []byte) []byte { return m[:5] },
		"empty":        func([]byte) []byte { return nil },
		"wrong step":   func(m []byte) []byte { m[3] ^= 9; return m },
		"wrong codec":  func(m []byte) []byte { m[0] = 2; return m },
		"huge count":   func(m []byte) []byte { m[8] = 0xff; return m },
		"NaN in table": func(m []byte) []byte { copy(m[chunkHeaderSize+8:], []byte{0, 0, 0xc0, 0x7f}); return m },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			in := randVecs(rand.New(rand.NewPCG(13, 14)), k, 3000)
			rr := runRing(t, testCtx(t), in, nil, []float32{1, 1, 1, 1}, AllReduceConfig{Shards: 2, ChunkElems: 200},
				func(i int, tr *MemTransport) Transport {
					if i == bad {
						return &corruptTransport{MemTransport: tr, corrupt: corrupt}
					}
					return tr
				})
			for i, err := range rr.errs {
				var pe *PeerError
				if i != bad && (!errors.As(err, &pe) || pe.Rank != bad) {
					t.Fatalf("member %d: got %v, want a PeerError naming %d", i, err, bad)
				}
			}
			if !errors.Is(rr.errs[bad+1], ErrBadChunk) && !errors.Is(rr.errs[bad+1], ErrNonFinite) {
				t.Fatalf("right neighbour: %v, want ErrBadChunk or ErrNonFinite", rr.errs[bad+1])
			}
		})
	}
}

// TestAllReduceNonFiniteInput: a member with a NaN in its own vector fails
// with ErrNonFinite and the others are told it is at fault.
func TestAllReduceNonFiniteInput(t *testing.T) {
	for _, codec := range []Codec{CodecInt8, CodecFP32} {
		in := randVecs(rand.New(rand.NewPCG(15, 16)), 3, 300)
		in[2][250] = float32(math.Inf(1))
		rr := runRing(t, testCtx(t), in, nil, []float32{1, 1, 1}, AllReduceConfig{Shards: 1, ChunkElems: 64, Codec: codec}, nil)
		for i, err := range rr.errs {
			var pe *PeerError
			switch {
			case errors.As(err, &pe) && pe.Rank == 2:
			case i == 2 && errors.Is(err, ErrNonFinite):
			default:
				t.Fatalf("%v: member %d: %v", codec, i, err)
			}
		}
	}
}

func TestAllReduceInvalidArguments(t *testing.T) {
	vec := make([]float32, 10)
	tr := NewMemRing(2, 1)[0]
	cases := map[string]struct {
		rank int
		w    []float32
		res  []float32
		cfg  AllReduceConfig
	}{
		"rank out of range": {rank: 2, w: []float32{1, 1}},
		"negative rank":     {rank: -1, w: []float32{1, 1}},
		"no members":        {w: nil},
		"negative weight":   {w: []float32{1, -1}},
		"NaN weight":        {w: []float32{float32(math.NaN()), 1}},
		"Inf weight":        {w: []float32{float32(math.Inf(1)), 1}},
		"zero total":        {w: []float32{0, 0}},
		"residual length":   {w: []float32{1, 1}, res: make([]float32, 3), cfg: AllReduceConfig{ErrorFeedback: true}},
		"too many shards":   {w: []float32{1, 1}, cfg: AllReduceConfig{Shards: MaxShards + 1}},
		"chunk too large":   {w: []float32{1, 1}, cfg: AllReduceConfig{ChunkElems: MaxChunkElems + 1}},
		"unknown codec":     {w: []float32{1, 1}, cfg: AllReduceConfig{Codec: 9}},
	}
	for name, c := range cases {
		_, err := AllReduce(context.Background(), tr, c.rank, c.w, vec, c.res, c.cfg)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestAllReduceCancel: cancelling the caller's context is not a peer's fault.
func TestAllReduceCancel(t *testing.T) {
	ts := NewMemRing(3, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := AllReduce(ctx, ts[0], 0, []float32{1, 1, 1}, make([]float32, 100), nil, AllReduceConfig{Shards: 1})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestAllReduceErrorVsFP32 measures the int8 all-reduce against the fp32
// one on the same inputs for several ring sizes (logged; the figures of
// docs/allreduce.md) and bounds it.
func TestAllReduceErrorVsFP32(t *testing.T) {
	const n = 1 << 15
	rng := rand.New(rand.NewPCG(21, 22))
	for _, k := range []int{2, 4, 8} {
		in := randVecs(rng, k, n)
		w := make([]float32, k)
		for i := range w {
			w[i] = float32(50 + rng.IntN(50))
		}
		cfg := AllReduceConfig{Shards: 2, ChunkElems: 4096}
		q := runRing(t, testCtx(t), in, nil, w, cfg, nil)
		cfg.Codec = CodecFP32
		f := runRing(t, testCtx(t), in, nil, w, cfg, nil)
		if q.errs[0] != nil || f.errs[0] != nil {
			t.Fatal(q.errs[0], f.errs[0])
		}
		e := relErr(q.out[0], toF64(f.out[0]))
		t.Logf("k=%d: int8 vs fp32 all-reduce, relative L2 error %.4f; fp32 vs float64 %.2g", k, e, relErr(f.out[0], refMean(in, w)))
		if e > 0.02 {
			t.Fatalf("k=%d: error %.3g", k, e)
		}
	}
}

// A ring of one keeps its vector exactly, int8 or not: nothing crosses a
// wire. A residual carried from earlier rings is added once and cleared.
func TestAllReduceAloneIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vec := make([]float32, 5000)
	for i := range vec {
		vec[i] = float32(rng.NormFloat64()) * 1e-3
	}
	want := append([]float32(nil), vec...)
	res := make([]float32, len(vec))
	res[7] = 0.25
	want[7] += 0.25
	got := append([]float32(nil), vec...)
	if _, err := AllReduce(context.Background(), nil, 0, []float32{20}, got, res, AllReduceConfig{ErrorFeedback: true}); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: %v, want %v exactly", i, got[i], want[i])
		}
	}
	if res[7] != 0 {
		t.Errorf("residual not cleared: %v", res[7])
	}
	got[9] = float32(math.Inf(1))
	if _, err := AllReduce(context.Background(), nil, 0, []float32{1}, got, nil, AllReduceConfig{}); !errors.Is(err, ErrNonFinite) {
		t.Errorf("Inf alone: err %v, want ErrNonFinite", err)
	}
}

// TestAllReduceIntoBuffers: with separate source, destination and residual
// buffers the result and the new residual are bit-identical to the in-place
// call, the source and the residual read are left as they were, and a
// failed attempt leaves them as they were too, so a retry needs no copy.
func TestAllReduceIntoBuffers(t *testing.T) {
	const k, n = 3, 5000
	rng := rand.New(rand.NewPCG(11, 12))
	in, res := randVecs(rng, k, n), randVecs(rng, k, n)
	w := []float32{1, 2, 3}
	cfg := AllReduceConfig{Shards: 2, ChunkElems: 300, ErrorFeedback: true}
	inPlace := make([][]float32, k)
	for i := range res {
		inPlace[i] = slices.Clone(res[i])
	}
	want := runRing(t, testCtx(t), in, inPlace, w, cfg, nil)
	run := func(wrap func(i int, t *MemTransport) Transport) ([][]float32, [][]float32, []error) {
		ts := NewMemRing(k, cfg.Shards)
		out, resOut, errs := make([][]float32, k), make([][]float32, k), make([]error, k)
		var wg sync.WaitGroup
		for i := range k {
			out[i], resOut[i] = make([]float32, n), make([]float32, n)
			var tr Transport = ts[i]
			if wrap != nil {
				tr = wrap(i, ts[i])
			}
			wg.Go(func() {
				b := Buffers{Src: in[i], Dst: out[i], ResIn: res[i], ResOut: resOut[i]}
				_, errs[i] = AllReduceInto(testCtx(t), tr, i, w, b, cfg)
			})
		}
		wg.Wait()
		return out, resOut, errs
	}
	before, inBefore := make([][]float32, k), make([][]float32, k)
	for i := range res {
		before[i], inBefore[i] = slices.Clone(res[i]), slices.Clone(in[i])
	}
	out, resOut, errs := run(nil)
	for i := range k {
		if errs[i] != nil || !slices.Equal(out[i], want.out[i]) || !slices.Equal(resOut[i], inPlace[i]) || !slices.Equal(res[i], before[i]) {
			t.Fatalf("member %d: err %v, same result %v, same new residual %v, residual read kept %v", i, errs[i],
				slices.Equal(out[i], want.out[i]), slices.Equal(resOut[i], inPlace[i]), slices.Equal(res[i], before[i]))
		}
	}
	_, _, errs = run(func(i int, tr *MemTransport) Transport {
		if i == 1 {
			return DieAfter(tr, 4)
		}
		return tr
	})
	for i := range k {
		if errs[i] == nil || !slices.Equal(res[i], before[i]) || !slices.Equal(in[i], inBefore[i]) {
			t.Fatalf("member %d after a failed attempt: err %v, residual kept %v, source kept %v", i, errs[i],
				slices.Equal(res[i], before[i]), slices.Equal(in[i], inBefore[i]))
		}
	}
}

// TestAllReduceIntoAlone: the ring of one reads Src and fills Dst as the
// in-place call does, bit for bit.
func TestAllReduceIntoAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	v, r := randVecs(rng, 2, 3000), randVecs(rng, 1, 3000)[0]
	cfg := AllReduceConfig{ErrorFeedback: true}
	want, wantRes := slices.Clone(v[0]), slices.Clone(r)
	if _, err := AllReduce(context.Background(), nil, 0, []float32{2}, want, wantRes, cfg); err != nil {
		t.Fatal(err)
	}
	dst, res := make([]float32, 3000), make([]float32, 3000)
	b := Buffers{Src: v[0], Dst: dst, ResIn: r, ResOut: res}
	if _, err := AllReduceInto(context.Background(), nil, 0, []float32{2}, b, cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst, want) || !slices.Equal(res, wantRes) {
		t.Fatal("ring of one: AllReduceInto differs from AllReduce")
	}
	if _, err := AllReduceInto(context.Background(), nil, 0, []float32{2}, Buffers{Src: v[0][:10], Dst: dst}, cfg); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short source: %v", err)
	}
}
