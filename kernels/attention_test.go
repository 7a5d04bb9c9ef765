package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestAttentionForwardBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ B, T, H, KVH, hd int }{{1, 1, 1, 1, 1}, {2, 7, 4, 2, 6}, {1, 13, 3, 3, 5}, {3, 5, 6, 1, 4}, {1, 70, 2, 1, 4}} {
		W := (c.H + 2*c.KVH) * c.hd
		qkv, dout := randSlice(r, c.B*c.T*W, 1), randSlice(r, c.B*c.T*c.H*c.hd, 1)
		out, lse := make([]float32, c.B*c.T*c.H*c.hd), make([]float32, c.B*c.H*c.T)
		AttentionForward(out, lse, qkv, c.B, c.T, c.H, c.KVH, c.hd)
		q64 := to64(qkv)
		ref := make([]float64, len(out))
		loss := func() float64 {
			AttentionForwardRef(ref, q64, c.B, c.T, c.H, c.KVH, c.hd)
			return dotWeights(ref, dout)
		}
		loss()
		checkClose(t, "attention forward", out, ref, 1e-5)
		dqkv := randSlice(r, len(qkv), 1) // overwritten
		AttentionBackward(dqkv, dout, out, lse, qkv, c.B, c.T, c.H, c.KVH, c.hd)
		checkClose(t, "attention dqkv", dqkv, numGrad(q64, 1e-6, loss), 1e-4)
	}
}

// BenchmarkAttention compares the backward pass with the forward pass of the
// same run (the backward does about twice the forward's arithmetic).
func BenchmarkAttention(b *testing.B) {
	for _, T := range []int{64, 256, 1024} {
		B, H, KVH, hd := 2, 4, 4, 64
		W := (H + 2*KVH) * hd
		r := rand.New(rand.NewPCG(1, 1))
		qkv, dout := randSlice(r, B*T*W, 1), randSlice(r, B*T*H*hd, 1)
		out, lse, dqkv := make([]float32, B*T*H*hd), make([]float32, B*H*T), make([]float32, len(qkv))
		flops := float64(B*H*hd) * float64(T*(T+1)) * 2 // forward: scores + values
		b.Run("fwd/T="+itoa(T), func(b *testing.B) {
			for b.Loop() {
				AttentionForward(out, lse, qkv, B, T, H, KVH, hd)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run("bwd/T="+itoa(T), func(b *testing.B) {
			for b.Loop() {
				AttentionBackward(dqkv, dout, out, lse, qkv, B, T, H, KVH, hd)
			}
			b.ReportMetric(2*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkAttentionVsFull times one goroutine's attention forward + backward
// (the training lanes' case) against the same attention with one full Sgemm
// per product (attentionForwardFull/attentionBackwardFull: the masked blocks
// multiplied too, operands packed per product), interleaved in one run, and
// prints the speed-up x-full.
func BenchmarkAttentionVsFull(b *testing.B) {
	for _, T := range []int{64, 256} {
		B, H, KVH, hd := 2, 4, 4, 64
		W := (H + 2*KVH) * hd
		r := rand.New(rand.NewPCG(1, 1))
		qkv, dout := randSlice(r, B*T*W, 1), randSlice(r, B*T*H*hd, 1)
		out, lse, dqkv := make([]float32, B*T*H*hd), make([]float32, B*H*T), make([]float32, len(qkv))
		b.Run("T="+itoa(T), func(b *testing.B) {
			var fast, full time.Duration
			for b.Loop() {
				t0 := time.Now()
				Workers(1).AttentionForward(out, lse, qkv, B, T, H, KVH, hd)
				Workers(1).AttentionBackward(dqkv, dout, out, lse, qkv, B, T, H, KVH, hd)
				t1 := time.Now()
				attentionForwardFull(out, lse, qkv, B, T, H, KVH, hd)
				attentionBackwardFull(dqkv, dout, out, lse, qkv, B, T, H, KVH, hd)
				fast, full = fast+t1.Sub(t0), full+time.Since(t1)
			}
			b.ReportMetric(float64(fast.Microseconds())/float64(b.N), "us-fast")
			b.ReportMetric(float64(full.Microseconds())/float64(b.N), "us-full")
			b.ReportMetric(full.Seconds()/fast.Seconds(), "x-full")
		})
	}
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

// TestAttentionMatchesFullProducts checks the block-trimmed attention products
// (attMul) bit for bit against the same attention computed with full Sgemm
// products over every key and query of a tile, for every micro-kernel: the
// depths and columns attMul skips must be exactly the masked zeros.
func TestAttentionMatchesFullProducts(t *testing.T) {
	defer func(k *gemmKernel) { activeGemm = k }(activeGemm)
	shapes := []struct{ B, T, H, KVH, hd int }{{2, 64, 4, 4, 64}, {1, 130, 4, 2, 64}, {3, 5, 6, 1, 4}, {1, 70, 2, 1, 17}, {2, 29, 2, 2, 32}, {1, 15, 1, 1, 33}}
	for _, kern := range gemmKernels {
		activeGemm = kern
		r := rand.New(rand.NewPCG(3, 4))
		for _, c := range shapes {
			W := (c.H + 2*c.KVH) * c.hd
			qkv, dout := randSlice(r, c.B*c.T*W, 1), randSlice(r, c.B*c.T*c.H*c.hd, 1)
			out, lse := make([]float32, c.B*c.T*c.H*c.hd), make([]float32, c.B*c.H*c.T)
			outF, lseF := make([]float32, len(out)), make([]float32, len(lse))
			AttentionForward(out, lse, qkv, c.B, c.T, c.H, c.KVH, c.hd)
			attentionForwardFull(outF, lseF, qkv, c.B, c.T, c.H, c.KVH, c.hd)
			name := fmt.Sprintf("%s %+v", kern.name, c)
			sameBits(t, name+" forward out", out, outF)
			sameBits(t, name+" forward lse", lse, lseF)
			dqkv, dqkvF := randSlice(r, len(qkv), 1), randSlice(r, len(qkv), 1)
			AttentionBackward(dqkv, dout, out, lse, qkv, c.B, c.T, c.H, c.KVH, c.hd)
			attentionBackwardFull(dqkvF, dout, out, lse, qkv, c.B, c.T, c.H, c.KVH, c.hd)
			sameBits(t, name+" backward", dqkv, dqkvF)
		}
	}
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, want %v bit for bit", what, i, got[i], want[i])
		}
	}
}

// attentionForwardFull is AttentionForward with one Sgemm per product over the
// whole tile (the masked part included).
func attentionForwardFull(out, lse, qkv []float32, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	S := make([]float32, min(attTile, T)*T)
	for job := 0; job < B*H; job++ {
		v := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: qkv, out: out, b: job / H, h: job % H}
		v.kh = v.h / (H / KVH)
		for t0 := 0; t0 < T; t0 += attTile {
			t1 := min(t0+attTile, T)
			tq := t1 - t0
			packedGemm(false, true, tq, t1, hd, scale, v.q(t0), W, v.k(), W, 0, S, t1)
			for i := 0; i < tq; i++ {
				lse[(v.b*H+v.h)*T+t0+i] = softmaxCausal(S[i*t1:(i+1)*t1], t0+i)
			}
			packedGemm(false, false, tq, hd, t1, 1, S, t1, v.v(), W, 0, v.o(t0), H*hd)
		}
	}
}

// attentionBackwardFull is AttentionBackward with one Sgemm per product over
// the whole tile.
func attentionBackwardFull(dqkv, dout, out, lse, qkv []float32, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	grp := H / KVH
	scale := float32(1 / math.Sqrt(float64(hd)))
	n := min(attTile, T) * T
	P, dP := make([]float32, n), make([]float32, n)
	for job := 0; job < B*KVH; job++ {
		b, kh := job/KVH, job%KVH
		zeroKVGrads(dqkv, b, kh, T, H, KVH, hd)
		for h := kh * grp; h < (kh+1)*grp; h++ {
			v := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: qkv, out: out, b: b, h: h, kh: kh}
			d := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: dqkv, out: dout, b: b, h: h, kh: kh}
			for t0 := 0; t0 < T; t0 += attTile {
				t1 := min(t0+attTile, T)
				tq := t1 - t0
				packedGemm(false, true, tq, t1, hd, scale, v.q(t0), W, v.k(), W, 0, P, t1)
				packedGemm(false, true, tq, t1, hd, 1, d.o(t0), H*hd, v.v(), W, 0, dP, t1)
				for i := 0; i < tq; i++ {
					t := t0 + i
					p, dp := P[i*t1:(i+1)*t1], dP[i*t1:(i+1)*t1]
					ev := p[:vecLen(t+1, t1)] // as AttentionBackward
					expAffine(ev, ev, 1, -lse[(b*H+h)*T+t])
					clear(p[t+1:])
					D := dot32(d.o(t)[:hd], v.o(t)[:hd])
					for s := range dp {
						dp[s] = p[s] * (dp[s] - D) * scale
					}
				}
				packedGemm(false, false, tq, hd, t1, 1, dP, t1, v.k(), W, 0, d.q(t0), W)
				packedGemm(true, false, t1, hd, tq, 1, dP, t1, v.q(t0), W, 1, d.k(), W)
				packedGemm(true, false, t1, hd, tq, 1, P, t1, d.o(t0), H*hd, 1, d.v(), W)
			}
		}
	}
}

// packedGemm is Sgemm on one goroutine through the packed path whatever the
// size (small products would take sgemmSmall's loops).
func packedGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g := gemmArgs{transA: transA, transB: transB, m: m, n: n, k: k,
		alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc, workers: 1}
	if err := g.check(); err != nil {
		panic(err)
	}
	sgemmPacked(activeGemm, &g)
}

// TestLog32 checks log32 against math.Log within a float32 rounding, over the
// range softmax sums take and beyond, and its fallbacks.
func TestLog32(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	check := func(x float32) {
		got, want := float64(log32(x)), math.Log(float64(x))
		if math.IsNaN(want) || math.IsInf(want, 0) {
			if !(math.IsNaN(got) && math.IsNaN(want)) && got != want {
				t.Fatalf("log32(%v) = %v, want %v", x, got, want)
			}
			return
		}
		if d := math.Abs(got - want); d > 1.2e-7*math.Max(math.Abs(want), 1e-30) && d > 1e-12 {
			t.Fatalf("log32(%v) = %v, want %v (off by %g)", x, got, want, d)
		}
	}
	for i := 0; i < 200000; i++ {
		check(1 + r.Float32()*4096)
		check(math.Float32frombits(r.Uint32() &^ (1 << 31)))
	}
	for _, x := range []float32{1, 2, math.Sqrt2, 0.5, 1e-40, 0, float32(math.Inf(1)), float32(math.NaN()), -1, math.MaxFloat32, 0x1p-126} {
		check(x)
	}
}

// TestAttentionSharpScoresNoSubnormals runs attention with sharp scores (most
// keys far below each query's best) and checks that no gradient comes out
// subnormal: the negligible probabilities are exact zeros (expFlush), not
// tiny values whose score gradients underflow and slow every product they
// enter by microcode assists.
func TestAttentionSharpScoresNoSubnormals(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	B, T, H, KVH, hd := 2, 64, 2, 2, 16
	W := (H + 2*KVH) * hd
	qkv, dout := randSlice(r, B*T*W, 1), randSlice(r, B*T*H*hd, 1e-3)
	for i := range qkv {
		if i%W < (H+KVH)*hd { // q and k: scores spread over hundreds
			qkv[i] *= 8
		}
	}
	out, lse := make([]float32, B*T*H*hd), make([]float32, B*H*T)
	AttentionForward(out, lse, qkv, B, T, H, KVH, hd)
	dqkv := make([]float32, len(qkv))
	AttentionBackward(dqkv, dout, out, lse, qkv, B, T, H, KVH, hd)
	var zeros int
	for i, v := range dqkv {
		if v != 0 && math.Abs(float64(v)) < 0x1p-126 {
			t.Fatalf("dqkv[%d] = %g is subnormal", i, v)
		}
		if v == 0 {
			zeros++
		}
	}
	if zeros == len(dqkv) {
		t.Fatal("dqkv is all zero")
	}
}
