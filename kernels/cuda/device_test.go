//go:build cuda

package cuda

// GPU tests: every kernel and the cuBLAS shim against the CPU kernels of
// package kernels (their float64-checked twins) on random inputs of awkward
// sizes. They need a GPU (gorgonia.org/cu calls cuInit in its init and exits
// without one): run with kernels/cuda/build.sh test (docs/cuda.md).

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/cu"

	"github.com/intellect-node/intellect-node/kernels"
)

var testDev *Device

func dev(t testing.TB) *Device {
	t.Helper()
	if testDev == nil {
		d, err := Open(0, "", nil)
		if err != nil {
			t.Fatalf("open device: %v", err)
		}
		testDev = d
	}
	return testDev
}

// on runs f inside Do, failing the test on error.
func on(t testing.TB, f func(d *Device) error) {
	t.Helper()
	d := dev(t)
	if err := d.Do(func() error { return f(d) }); err != nil {
		t.Fatal(err)
	}
}

func randn(r *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

// roundBF16 returns x rounded to bf16 (what the device sees) as float32.
func roundBF16(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = ToBF16(v).Float32()
	}
	return y
}

func toBF16(x []float32) []BF16 {
	y := make([]BF16, len(x))
	ToBF16Slice(y, x)
	return y
}

func fromBF16(x []BF16) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = v.Float32()
	}
	return y
}

// buf allocates and fills a device buffer: []float32 as f32, []BF16, []int32.
func buf[T any](t testing.TB, d *Device, host []T) cu.DevicePtr {
	t.Helper()
	var z T
	p, err := d.Alloc(int64(len(host)) * int64(sizeOf(z)))
	if err != nil {
		t.Fatal(err)
	}
	if err := Upload(d, p, host); err != nil {
		t.Fatal(err)
	}
	return p
}

func sizeOf(v any) int {
	switch v.(type) {
	case BF16, uint16:
		return 2
	case uint8:
		return 1
	}
	return 4
}

func get[T any](t testing.TB, d *Device, p cu.DevicePtr, n int) []T {
	t.Helper()
	out := make([]T, n)
	if err := Download(d, out, p); err != nil {
		t.Fatal(err)
	}
	return out
}

// relErr is ‖got − want‖₂ / ‖want‖₂.
func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func check(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i, v := range got {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("%s[%d] = %v", what, i, v)
		}
	}
	if e := relErr(got, want); e > tol {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	} else {
		t.Logf("%s: relative error %.3g", what, e)
	}
}

func TestGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	const m, n, k = 37, 53, 29
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			a, b := roundBF16(randn(r, m*k, 1)), roundBF16(randn(r, k*n, 1))
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			c0 := randn(r, m*n, 1)
			want := append([]float32(nil), c0...)
			kernels.SgemmRef(ta, tb, m, n, k, 1, a, lda, b, ldb, 1, want, n)
			on(t, func(d *Device) error {
				pa, pb, pc := buf(t, d, toBF16(a)), buf(t, d, toBF16(b)), buf(t, d, c0)
				pcb := buf(t, d, make([]BF16, m*n))
				if err := d.Blas.Gemm(ta, tb, m, n, k, 1, Mat{BF16T, pa, lda}, Mat{BF16T, pb, ldb}, 1, Mat{F32, pc, n}); err != nil {
					return err
				}
				if err := d.Blas.Gemm(ta, tb, m, n, k, 1, Mat{BF16T, pa, lda}, Mat{BF16T, pb, ldb}, 0, Mat{BF16T, pcb, n}); err != nil {
					return err
				}
				check(t, "gemm f32 out", get[float32](t, d, pc, m*n), want, 1e-5)
				want0 := make([]float32, m*n)
				kernels.SgemmRef(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, want0, n)
				check(t, "gemm bf16 out", fromBF16(get[BF16](t, d, pcb, m*n)), want0, 5e-3)
				return nil
			})
		}
	}
}

func TestGemmBatched(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const m, n, k, batch = 17, 19, 23, 3
	a, b := roundBF16(randn(r, batch*m*k, 1)), roundBF16(randn(r, batch*k*n, 1))
	want := make([]float32, batch*m*n)
	for i := 0; i < batch; i++ {
		kernels.SgemmRef(false, true, m, n, k, 1, a[i*m*k:], k, b[i*k*n:], k, 0, want[i*m*n:], n)
	}
	on(t, func(d *Device) error {
		pa, pb, pc := buf(t, d, toBF16(a)), buf(t, d, toBF16(b)), buf(t, d, make([]float32, batch*m*n))
		if err := d.Blas.GemmBatched(false, true, m, n, k, 1, Mat{BF16T, pa, k}, m*k, Mat{BF16T, pb, k}, k*n, 0, Mat{F32, pc, n}, m*n, batch); err != nil {
			return err
		}
		check(t, "gemm batched", get[float32](t, d, pc, batch*m*n), want, 1e-5)
		return nil
	})
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 1))
	const N, C = 13, 300
	x, w := randn(r, N*C, 1), randn(r, C, 1)
	dy := roundBF16(randn(r, N*C, 1))
	out, rstd := make([]float32, N*C), make([]float32, N)
	kernels.RMSNormForward(out, rstd, x, w, N, C, 1e-5)
	dx0 := randn(r, N*C, 1)
	dx, dw := append([]float32(nil), dx0...), make([]float32, C)
	kernels.RMSNormBackward(dx, dw, dy, x, w, rstd, N, C)
	on(t, func(d *Device) error {
		px, pw, po, pr := buf(t, d, x), buf(t, d, w), buf(t, d, make([]BF16, N*C)), buf(t, d, make([]float32, N))
		var a Args
		if err := d.Launch("rmsnorm_forward", Dim3{X: N}, Dim3{X: 256}, 0, a.P(po).P(pr).P(px).P(pw).I(N).I(C).F(1e-5)); err != nil {
			return err
		}
		check(t, "rmsnorm out", fromBF16(get[BF16](t, d, po, N*C)), out, 5e-3)
		check(t, "rmsnorm rstd", get[float32](t, d, pr, N), rstd, 1e-6)
		pdx, pdw, pdy := buf(t, d, dx0), buf(t, d, make([]float32, C)), buf(t, d, toBF16(dy))
		if err := d.Launch("rmsnorm_backward_dx", Dim3{X: N}, Dim3{X: 256}, 0, a.Reset().P(pdx).P(pdy).P(px).P(pw).P(pr).I(N).I(C)); err != nil {
			return err
		}
		if err := d.Launch("rmsnorm_backward_dw", Dim3{X: CeilDiv(C, 256), Y: CeilDiv(N, 5)}, Dim3{X: 256}, 0, a.Reset().P(pdw).P(pdy).P(px).P(pr).I(N).I(C).I(5)); err != nil {
			return err
		}
		check(t, "rmsnorm dx", get[float32](t, d, pdx, N*C), dx, 1e-5)
		check(t, "rmsnorm dw", get[float32](t, d, pdw, C), dw, 1e-5)
		return nil
	})
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 1))
	const B, T, H, KV, hd = 2, 19, 4, 2, 32
	W := (H + 2*KV) * hd
	x := roundBF16(randn(r, B*T*W, 1))
	cos, sin := make([]float32, T*hd/2), make([]float32, T*hd/2)
	kernels.RoPETables(cos, sin, T, hd, 500000)
	for _, sign := range []float32{1, -1} {
		want := append([]float32(nil), x...)
		if sign > 0 {
			kernels.RoPEForward(want, cos, sin, B, T, H+KV, hd, W)
		} else {
			kernels.RoPEBackward(want, cos, sin, B, T, H+KV, hd, W)
		}
		on(t, func(d *Device) error {
			px, pc, ps := buf(t, d, toBF16(x)), buf(t, d, cos), buf(t, d, sin)
			var a Args
			n := int64(B * T * (H + KV) * hd / 2)
			if err := d.Launch("rope", Dim3{X: Grid1D(n, 256, 64)}, Dim3{X: 256}, 0, a.P(px).P(pc).P(ps).I(B*T).I(T).I(H+KV).I(hd).I(W).F(sign)); err != nil {
				return err
			}
			check(t, "rope", fromBF16(get[BF16](t, d, px, B*T*W)), want, 5e-3)
			return nil
		})
	}
}

func TestSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 1))
	const N, F = 7, 333
	gu, dy := roundBF16(randn(r, N*2*F, 2)), roundBF16(randn(r, N*F, 1))
	out, dgu := make([]float32, N*F), make([]float32, N*2*F)
	kernels.SwiGLUForward(out, gu, N, F)
	kernels.SwiGLUBackward(dgu, dy, gu, N, F)
	on(t, func(d *Device) error {
		pg, po, pdy, pdg := buf(t, d, toBF16(gu)), buf(t, d, make([]BF16, N*F)), buf(t, d, toBF16(dy)), buf(t, d, make([]BF16, N*2*F))
		var a Args
		if err := d.Launch("swiglu_forward", Dim3{X: 3}, Dim3{X: 256}, 0, a.P(po).P(pg).I(N).I(F)); err != nil {
			return err
		}
		if err := d.Launch("swiglu_backward", Dim3{X: 3}, Dim3{X: 256}, 0, a.Reset().P(pdg).P(pdy).P(pg).I(N).I(F)); err != nil {
			return err
		}
		check(t, "swiglu out", fromBF16(get[BF16](t, d, po, N*F)), out, 5e-3)
		check(t, "swiglu dgu", fromBF16(get[BF16](t, d, pdg, N*2*F)), dgu, 5e-3)
		return nil
	})
}

func TestXent(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 1))
	const N, V = 9, 1531
	logits := randn(r, N*V, 3)
	tg := make([]int32, N)
	for i := range tg {
		tg[i] = int32(r.IntN(V))
	}
	const z, scale = 1e-2, 0.25
	losses, ce, dl := make([]float32, N), make([]float32, N), make([]float32, N*V)
	kernels.XEntForwardBackward(dl, losses, ce, logits, tg, N, V, z, scale)
	on(t, func(d *Device) error {
		pl, pt := buf(t, d, logits), buf(t, d, tg)
		pd, ploss, pce := buf(t, d, make([]BF16, N*V)), buf(t, d, make([]float32, N)), buf(t, d, make([]float32, N))
		var a Args
		if err := d.Launch("xent", Dim3{X: N}, Dim3{X: 1024}, 0, a.P(pd).P(ploss).P(pce).P(pl).P(pt).I(N).I(V).F(z).F(scale)); err != nil {
			return err
		}
		check(t, "xent loss", get[float32](t, d, ploss, N), losses, 1e-5)
		check(t, "xent ce", get[float32](t, d, pce, N), ce, 1e-5)
		check(t, "xent dlogits", fromBF16(get[BF16](t, d, pd, N*V)), dl, 5e-3)
		return nil
	})
}

func TestAdamW(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 1))
	const n = 10007
	p, g, m, v := randn(r, n, 1), randn(r, n, 1), randn(r, n, 0.1), make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64() * 0.01)
	}
	var lr, b1, b2, eps, wd, gscale float32 = 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.5
	const step = 7
	pw, mw, vw := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
	kernels.AdamW(pw, g, mw, vw, lr, b1, b2, eps, wd, gscale, step)
	ib1 := 1 / float32(1-math.Pow(float64(b1), step)) // as kernels.AdamW computes them
	ib2 := 1 / float32(1-math.Pow(float64(b2), step))
	on(t, func(d *Device) error {
		pp, pb, pg, pm, pv := buf(t, d, p), buf(t, d, make([]BF16, n)), buf(t, d, g), buf(t, d, m), buf(t, d, v)
		var a Args
		if err := d.Launch("adamw", Dim3{X: 7}, Dim3{X: 256}, 0, a.P(pp).P(pb).P(pg).P(pm).P(pv).L(int64(n)).F(lr).F(b1).F(1-b1).F(b2).F(1-b2).F(ib1).F(ib2).F(eps).F(wd).F(gscale)); err != nil {
			return err
		}
		for name, pair := range map[string][2][]float32{"p": {get[float32](t, d, pp, n), pw},
			"m": {get[float32](t, d, pm, n), mw}, "v": {get[float32](t, d, pv, n), vw}} {
			for i := range pair[1] {
				if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
					t.Fatalf("adamw %s[%d] = %v, CPU gives %v: must be bit-identical", name, i, pair[0][i], pair[1][i])
				}
			}
		}
		check(t, "adamw bf16 copy", fromBF16(get[BF16](t, d, pb, n)), roundBF16(pw), 1e-6)
		return nil
	})
}

func TestEmbedding(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 1))
	const V, C, N = 11, 70, 31
	wte, dout := randn(r, V*C, 1), randn(r, N*C, 1)
	tok := make([]int32, N)
	for i := range tok {
		tok[i] = int32(r.IntN(V))
	}
	out, dw := make([]float32, N*C), make([]float32, V*C)
	for n, tk := range tok {
		copy(out[n*C:(n+1)*C], wte[int(tk)*C:])
		for i := 0; i < C; i++ {
			dw[int(tk)*C+i] += dout[n*C+i]
		}
	}
	on(t, func(d *Device) error {
		pw, pt, po, pd, pdw := buf(t, d, wte), buf(t, d, tok), buf(t, d, make([]float32, N*C)), buf(t, d, dout), buf(t, d, make([]float32, V*C))
		var a Args
		if err := d.Launch("embed_forward", Dim3{X: N}, Dim3{X: 256}, 0, a.P(po).P(pt).P(pw).I(N).I(C)); err != nil {
			return err
		}
		if err := d.Launch("embed_backward", Dim3{X: N}, Dim3{X: 256}, 0, a.Reset().P(pdw).P(pt).P(pd).I(N).I(C)); err != nil {
			return err
		}
		check(t, "embed out", get[float32](t, d, po, N*C), out, 0)
		check(t, "embed dw", get[float32](t, d, pdw, V*C), dw, 1e-6)
		return nil
	})
}

// TestAttention checks forward and backward of both implementations (CUDA
// cores, tensor cores) against the CPU kernels for every instantiated head
// size, with grouped-query heads and lengths that are not a multiple of the tile.
func TestAttention(t *testing.T) {
	for _, tc := range []bool{false, true} {
		for _, hd := range AttnHeadDims {
			for _, c := range []struct{ B, T, H, KV int }{{2, 77, 4, 2}, {1, 130, 2, 2}, {1, 1, 2, 1}, {1, 200, 4, 1}} {
				attentionCase(t, tc, hd, c.B, c.T, c.H, c.KV)
			}
		}
	}
}

// TestAttnTCSmem checks AttnTCSmem against the sizes the kernels were compiled with.
func TestAttnTCSmem(t *testing.T) {
	for _, hd := range AttnHeadDims {
		on(t, func(d *Device) error {
			p := buf(t, d, make([]int32, 3))
			var a Args
			if err := d.Launch(fmt.Sprintf("attn_tc_smem_hd%d", hd), Dim3{X: 1}, Dim3{X: 1}, 0, a.P(p)); err != nil {
				return err
			}
			got := get[int32](t, d, p, 3)
			for i, part := range []string{"fwd", "bwd_dq", "bwd_dkdv"} {
				if int(got[i]) != AttnTCSmem(part, hd) {
					t.Errorf("hd %d %s: kernel needs %d bytes, AttnTCSmem says %d", hd, part, got[i], AttnTCSmem(part, hd))
				}
			}
			return nil
		})
	}
}

// attnLaunch launches one attention kernel with the geometry and shared
// memory of its implementation.
func attnLaunch(d *Device, part string, tc bool, hd, T, heads, B int, a *Args) error {
	name, err := AttnKernel(part, hd, tc)
	if err != nil {
		return err
	}
	if !tc {
		return d.Launch(name, Dim3{CeilDiv(T, AttnTile), heads, B}, Dim3{X: AttnTile}, 0, a)
	}
	smem := AttnTCSmem(part, hd)
	if err := d.SetMaxDynamicShared(name, smem); err != nil {
		return err
	}
	return d.Launch(name, Dim3{CeilDiv(T, AttnTile), heads, B}, Dim3{X: AttnTCThreads}, smem, a)
}

func attentionCase(t *testing.T, tc bool, hd, B, T, H, KV int) {
	r := rand.New(rand.NewPCG(uint64(hd), uint64(T)))
	W, Q := (H+2*KV)*hd, H*hd
	qkv, dout := roundBF16(randn(r, B*T*W, 1)), roundBF16(randn(r, B*T*Q, 1))
	out, lse := make([]float32, B*T*Q), make([]float32, B*H*T)
	kernels.AttentionForward(out, lse, qkv, B, T, H, KV, hd)
	outB := roundBF16(out) // the backward pass reads the stored bf16 output
	dqkv := make([]float32, B*T*W)
	kernels.AttentionBackward(dqkv, dout, outB, lse, qkv, B, T, H, KV, hd)
	what := fmt.Sprintf("attention tc=%v hd=%d B=%d T=%d H=%d KV=%d", tc, hd, B, T, H, KV)
	on(t, func(d *Device) error {
		pq, po, pl := buf(t, d, toBF16(qkv)), buf(t, d, make([]BF16, B*T*Q)), buf(t, d, make([]float32, B*H*T))
		var a Args
		if err := attnLaunch(d, "fwd", tc, hd, T, H, B, a.P(po).P(pl).P(pq).I(T).I(H).I(KV)); err != nil {
			return err
		}
		check(t, what+" out", fromBF16(get[BF16](t, d, po, B*T*Q)), out, 1e-2)
		check(t, what+" lse", get[float32](t, d, pl, B*H*T), lse, 1e-5)
		pdo, pD, pdq := buf(t, d, toBF16(dout)), buf(t, d, make([]float32, B*H*T)), buf(t, d, make([]BF16, B*T*W))
		pob := buf(t, d, toBF16(outB))
		if err := d.Launch("attn_bwd_d", Dim3{X: Grid1D(int64(B*T*H), 256, 64)}, Dim3{X: 256}, 0, a.Reset().P(pD).P(pdo).P(pob).I(B).I(T).I(H).I(hd)); err != nil {
			return err
		}
		if err := attnLaunch(d, "bwd_dq", tc, hd, T, H, B, a.Reset().P(pdq).P(pq).P(pdo).P(pl).P(pD).I(T).I(H).I(KV)); err != nil {
			return err
		}
		if err := attnLaunch(d, "bwd_dkdv", tc, hd, T, KV, B, a.Reset().P(pdq).P(pq).P(pdo).P(pl).P(pD).I(T).I(H).I(KV)); err != nil {
			return err
		}
		check(t, what+" dqkv", fromBF16(get[BF16](t, d, pdq, B*T*W)), dqkv, 2e-2)
		return nil
	})
}

// sqrtCodeRef is mesh's sqrtCode (mesh/quant.go), restated: kernels/ may not
// import mesh. float32() conversions forbid fused multiply-adds.
func sqrtCodeRef(x, mu, invR float32) uint8 {
	d := float32((x - mu) * invR)
	y := float32(math.Sqrt(float64(min(float32(math.Abs(float64(d))), 1))))
	if d < 0 {
		y = -y
	}
	return uint8(int32(float32(y*127.5) + 128))
}

// TestQuantInt8 checks the GPU encoder against the CPU codec's bucket rule
// (identical codes) and the decoder's error, and that decoding with add=1 accumulates.
func TestQuantInt8(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	const n, chunk = 100003, 4096
	x := randn(r, n, 1e-3)
	nch := CeilDiv(n, chunk)
	on(t, func(d *Device) error {
		px, pc, ptab := buf(t, d, x), buf(t, d, make([]uint8, n)), buf(t, d, make([]float32, nch*256))
		if err := d.QuantizeInt8(pc, ptab, px, n, chunk); err != nil {
			return err
		}
		codes, tabs := get[uint8](t, d, pc, n), get[float32](t, d, ptab, nch*256)
		for c := 0; c < nch; c++ {
			lo, hi := c*chunk, min(n, (c+1)*chunk)
			var s float64
			mn, mx := x[lo], x[lo]
			for _, v := range x[lo:hi] {
				s += float64(v)
				mn, mx = min(mn, v), max(mx, v)
			}
			mean := s / float64(hi-lo)
			rr := max(float64(mx)-mean, mean-float64(mn))
			for i := lo; i < hi; i++ {
				if want := sqrtCodeRef(x[i], float32(mean), float32(1/rr)); codes[i] != want {
					t.Fatalf("code[%d] = %d, CPU rule gives %d", i, codes[i], want)
				}
			}
		}
		dec := make([]float32, n)
		for i := range dec {
			dec[i] = tabs[(i/chunk)*256+int(codes[i])]
		}
		check(t, "int8 round trip", dec, x, 0.05)
		pd := buf(t, d, x)
		if err := d.DequantizeInt8(pd, pc, ptab, n, chunk, true); err != nil {
			return err
		}
		got := get[float32](t, d, pd, n)
		for i := range got {
			if got[i] != x[i]+dec[i] {
				t.Fatalf("dequant add [%d] = %v, want %v", i, got[i], x[i]+dec[i])
			}
		}
		bad := append([]float32(nil), x...)
		bad[n/2] = float32(math.NaN())
		if err := Upload(d, px, bad); err != nil {
			return err
		}
		if err := d.QuantizeInt8(pc, ptab, px, n, chunk); !errors.Is(err, ErrNonFinite) {
			t.Errorf("QuantizeInt8 of a NaN: %v, want ErrNonFinite", err)
		}
		return nil
	})
}
