package cuda

// Tests of the CUDA kernels' logic without a GPU: emu/driver.cc compiles
// src/kernels.cu against emu/emu.h (a CPU emulation of the CUDA features the
// kernels use: threads and barriers, warp shuffles, shared memory, WMMA
// fragments, bf16) with the host C++ compiler, and these tests compare its
// results with the CPU kernels of package kernels, as device_test.go does on
// a GPU. They check indexing, masking, reductions and scaling; not speed,
// memory ordering subtleties or the PTX itself (TestPTX* and ptxas do that).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/intellect-node/intellect-node/kernels"
)

var emu struct {
	once sync.Once
	bin  string
	dir  string // removed by TestMain
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if emu.dir != "" {
		os.RemoveAll(emu.dir)
	}
	os.Exit(code)
}

// emuDriver builds emu/driver.cc once per test binary and returns its path;
// it skips the test when no C++20 compiler is available.
func emuDriver(t *testing.T) string {
	t.Helper()
	emu.once.Do(func() {
		cxx := os.Getenv("CXX")
		if cxx == "" {
			cxx = "g++"
		}
		if _, err := exec.LookPath(cxx); err != nil {
			emu.err = fmt.Errorf("skip: no C++ compiler (%s): %v", cxx, err)
			return
		}
		// Read the sources here so `go test`'s cache notices when they change
		// (it tracks files the test opens, not those the compiler reads).
		for _, glob := range []string{"emu/*", "src/*"} {
			names, _ := filepath.Glob(glob)
			for _, n := range names {
				if _, err := os.ReadFile(n); err != nil {
					emu.err = err
					return
				}
			}
		}
		dir, err := os.MkdirTemp("", "cuda-emu")
		if err != nil {
			emu.err = err
			return
		}
		emu.bin = filepath.Join(dir, "driver")
		cmd := exec.Command(cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-DIC_EMU", "-pthread",
			"-o", emu.bin, filepath.Join("emu", "driver.cc"))
		if out, err := cmd.CombinedOutput(); err != nil {
			emu.err = fmt.Errorf("build emu driver: %v\n%s", err, out)
		}
		emu.dir = dir
	})
	if emu.err != nil {
		if strings.HasPrefix(emu.err.Error(), "skip: ") {
			t.Skip(emu.err)
		}
		t.Fatal(emu.err)
	}
	return emu.bin
}

// runEmu runs the driver with args, feeding the arrays (float32 or int32)
// as stdin, and returns its float32 output split into parts of the given sizes.
func runEmu(t *testing.T, args []string, in []any, sizes ...int) [][]float32 {
	t.Helper()
	var stdin bytes.Buffer
	for _, a := range in {
		if err := binary.Write(&stdin, binary.LittleEndian, a); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(emuDriver(t), args...)
	cmd.Stdin = &stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("emu %v: %v\n%s", args, err, stderr.String())
	}
	total := 0
	for _, s := range sizes {
		total += s
	}
	if len(out) != 4*total {
		t.Fatalf("emu %v: %d bytes out, want %d", args, len(out), 4*total)
	}
	all := make([]float32, total)
	for i := range all {
		all[i] = math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
	}
	parts := make([][]float32, len(sizes))
	for i, s := range sizes {
		parts[i], all = all[:s], all[s:]
	}
	return parts
}

func itoa(vs ...any) []string {
	var s []string
	for _, v := range vs {
		s = append(s, fmt.Sprint(v))
	}
	return s
}

func emuRandn(r *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

func emuRound(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = ToBF16(v).Float32()
	}
	return y
}

func emuCheck(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	var num, den float64
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			t.Fatalf("%s[%d] = %v", what, i, got[i])
		}
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	e := math.Sqrt(num / math.Max(den, 1e-30))
	if e > tol {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// TestEmuAttention runs both attention implementations (CUDA-core and
// tensor-core) forward and backward for every head size, with grouped-query
// heads and lengths that are not a multiple of the 64-row tile.
func TestEmuAttention(t *testing.T) {
	cases := []struct{ hd, B, T, H, KV int }{
		{32, 2, 77, 4, 2}, {64, 1, 130, 2, 2}, {64, 1, 1, 2, 1}, {128, 1, 70, 2, 1},
	}
	if testing.Short() {
		cases = cases[:1]
	}
	for _, tc := range []int{0, 1} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("tc=%d/hd=%d/T=%d", tc, c.hd, c.T), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.hd), uint64(c.T)))
				B, T, H, KV, hd := c.B, c.T, c.H, c.KV, c.hd
				W, Q := (H+2*KV)*hd, H*hd
				qkv, dout := emuRound(emuRandn(r, B*T*W, 1)), emuRound(emuRandn(r, B*T*Q, 1))
				out, lse := make([]float32, B*T*Q), make([]float32, B*H*T)
				kernels.AttentionForward(out, lse, qkv, B, T, H, KV, hd)
				outB := emuRound(out)
				dqkv := make([]float32, B*T*W)
				kernels.AttentionBackward(dqkv, dout, outB, lse, qkv, B, T, H, KV, hd)
				got := runEmu(t, itoa("attn", tc, hd, B, T, H, KV), []any{qkv, dout, outB}, B*T*Q, B*H*T, B*T*W)
				emuCheck(t, "out", got[0], out, 1e-2)
				emuCheck(t, "lse", got[1], lse, 1e-5)
				emuCheck(t, "dqkv", got[2], dqkv, 2e-2)
			})
		}
	}
}

func TestEmuXent(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 1))
	const N, V = 5, 1531
	logits := emuRandn(r, N*V, 3)
	logits[2*V+7] = 50 // a clear argmax for the z-loss term
	tg := make([]int32, N)
	for i := range tg {
		tg[i] = int32(r.IntN(V))
	}
	const z, scale = 1e-2, 0.25
	losses, ce, dl := make([]float32, N), make([]float32, N), make([]float32, N*V)
	kernels.XEntForwardBackward(dl, losses, ce, logits, tg, N, V, z, scale)
	got := runEmu(t, itoa("xent", N, V, z, scale), []any{logits, tg}, N, N, N*V)
	emuCheck(t, "loss", got[0], losses, 1e-6)
	emuCheck(t, "ce", got[1], ce, 1e-6)
	emuCheck(t, "dlogits", got[2], dl, 5e-3)
}

func TestEmuRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 1))
	const N, C = 13, 300
	x, w := emuRandn(r, N*C, 1), emuRandn(r, C, 1)
	dy := emuRound(emuRandn(r, N*C, 1))
	out, rstd := make([]float32, N*C), make([]float32, N)
	kernels.RMSNormForward(out, rstd, x, w, N, C, 1e-5)
	dx0 := emuRandn(r, N*C, 1)
	dx, dw := append([]float32(nil), dx0...), make([]float32, C)
	kernels.RMSNormBackward(dx, dw, dy, x, w, rstd, N, C)
	got := runEmu(t, itoa("rmsnorm", N, C), []any{x, w, dy, dx0}, N*C, N, N*C, C)
	emuCheck(t, "out", got[0], out, 5e-3)
	emuCheck(t, "rstd", got[1], rstd, 1e-6)
	emuCheck(t, "dx", got[2], dx, 1e-5)
	emuCheck(t, "dw", got[3], dw, 1e-5)
}

func TestEmuRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 1))
	const B, T, H, KV, hd = 2, 19, 4, 2, 32
	W := (H + 2*KV) * hd
	x := emuRound(emuRandn(r, B*T*W, 1))
	cos, sin := make([]float32, T*hd/2), make([]float32, T*hd/2)
	kernels.RoPETables(cos, sin, T, hd, 500000)
	for _, sign := range []int{1, -1} {
		want := append([]float32(nil), x...)
		if sign > 0 {
			kernels.RoPEForward(want, cos, sin, B, T, H+KV, hd, W)
		} else {
			kernels.RoPEBackward(want, cos, sin, B, T, H+KV, hd, W)
		}
		got := runEmu(t, itoa("rope", B, T, H+KV, hd, W, sign), []any{x, cos, sin}, B*T*W)
		emuCheck(t, fmt.Sprintf("rope sign %d", sign), got[0], want, 5e-3)
	}
}

func TestEmuSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 1))
	const N, F = 7, 333
	gu, dy := emuRound(emuRandn(r, N*2*F, 2)), emuRound(emuRandn(r, N*F, 1))
	out, dgu := make([]float32, N*F), make([]float32, N*2*F)
	kernels.SwiGLUForward(out, gu, N, F)
	kernels.SwiGLUBackward(dgu, dy, gu, N, F)
	got := runEmu(t, itoa("swiglu", N, F), []any{gu, dy}, N*F, N*2*F)
	emuCheck(t, "out", got[0], out, 5e-3)
	emuCheck(t, "dgu", got[1], dgu, 5e-3)
}

// TestEmuAdamW checks that the AdamW kernel gives exactly kernels.AdamW's bits.
func TestEmuAdamW(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 1))
	const n = 3001
	p, g, m, v := emuRandn(r, n, 1), emuRandn(r, n, 1), emuRandn(r, n, 0.1), make([]float32, n)
	for i := range v {
		v[i] = float32(r.Float64() * 0.01)
	}
	var lr, b1, b2, eps, wd, gscale float32 = 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.5
	const step = 7
	pw, mw, vw := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
	kernels.AdamW(pw, g, mw, vw, lr, b1, b2, eps, wd, gscale, step)
	ib1 := 1 / float32(1-math.Pow(float64(b1), step))
	ib2 := 1 / float32(1-math.Pow(float64(b2), step))
	// %v of a float32 round-trips exactly through atof → float.
	got := runEmu(t, itoa("adamw", n, lr, b1, 1-b1, b2, 1-b2, ib1, ib2, eps, wd, gscale), []any{p, g, m, v}, n, n, n, n)
	for k, pair := range [][2][]float32{{got[0], pw}, {got[1], mw}, {got[2], vw}} {
		for i := range pair[1] {
			if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
				t.Fatalf("adamw output %d [%d] = %v, CPU gives %v: must be bit-identical", k, i, pair[0][i], pair[1][i])
			}
		}
	}
	emuCheck(t, "bf16 copy", got[3], emuRound(pw), 0)
}

// TestEmuMuon checks that Muon's element-wise kernels (muon_momentum,
// muon_normalize, muon_update) give exactly the bits of the CPU trainer's
// float32 steps (train/muon.go's muonMatrix and newtonSchulz, restated here:
// package kernels must not import train).
func TestEmuMuon(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 1))
	const n = 3001
	p, g, m, o := emuRandn(r, n, 1), emuRandn(r, n, 1), emuRandn(r, n, 0.1), emuRandn(r, n, 1)
	var mu, gscale, lr, scale, wd float32 = 0.95, 0.5, 1e-3, 0.2 * 21.166, 0.1
	u, mw, x, pw := make([]float32, n), append([]float32(nil), m...), make([]float32, n), append([]float32(nil), p...)
	var ss float64
	for i := range u {
		gi := g[i] * gscale
		mi := float32(mu*mw[i]) + gi
		mw[i] = mi
		u[i] = gi + float32(mu*mi)
		ss += float64(u[i]) * float64(u[i])
	}
	inv := float32(1 / (math.Sqrt(ss) + 1e-7))
	for i := range x {
		x[i] = u[i] * inv
		pw[i] -= float32(lr * (float32(scale*o[i]) + float32(wd*pw[i])))
	}
	got := runEmu(t, itoa("muon", n, mu, gscale, lr, scale, wd), []any{p, g, m, o}, n, n, n, n, n)
	for k, pair := range [][2][]float32{{got[0], u}, {got[1], mw}, {got[2], x}, {got[3], pw}} {
		for i := range pair[1] {
			if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
				t.Fatalf("muon output %d [%d] = %v, CPU gives %v: must be bit-identical", k, i, pair[0][i], pair[1][i])
			}
		}
	}
	emuCheck(t, "bf16 copy", got[4], emuRound(pw), 0)
}

// TestEmuQuantInt8 checks the GPU int8 encoder's codes against mesh's
// bucket rule (sqrtCodeRef) and the round-trip error of its tables.
func TestEmuQuantInt8(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	const n, chunk = 20003, 4096
	x := emuRandn(r, n, 1e-3)
	nch := CeilDiv(n, chunk)
	got := runEmu(t, itoa("quant", n, chunk), []any{x}, n, nch*256, n, 1)
	if got[3][0] != 0 {
		t.Fatal("finite input flagged as non-finite")
	}
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
			if want := emuSqrtCode(x[i], float32(mean), float32(1/rr)); uint8(got[0][i]) != want {
				t.Fatalf("code[%d] = %v, CPU rule gives %d", i, got[0][i], want)
			}
		}
	}
	emuCheck(t, "int8 round trip", got[2], x, 0.05)
}

// emuSqrtCode is mesh's sqrtCode (mesh/quant.go), restated: kernels/ may not
// import mesh. float32() conversions forbid fused multiply-adds.
func emuSqrtCode(x, mu, invR float32) uint8 {
	d := float32((x - mu) * invR)
	y := float32(math.Sqrt(float64(min(float32(math.Abs(float64(d))), 1))))
	if d < 0 {
		y = -y
	}
	return uint8(int32(float32(y*127.5) + 128))
}

// TestEmuSumSquares checks the two-stage gradient-norm reduction against
// kernels.SumSquares and that two runs agree bit for bit.
func TestEmuSumSquares(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 1))
	const n = 300007
	x := emuRandn(r, n, 1)
	got := runEmu(t, itoa("sumsq", n), []any{x}, 4) // two float64s
	a := math.Float64frombits(uint64(math.Float32bits(got[0][0])) | uint64(math.Float32bits(got[0][1]))<<32)
	b := math.Float64frombits(uint64(math.Float32bits(got[0][2])) | uint64(math.Float32bits(got[0][3]))<<32)
	want := kernels.SumSquares(x)
	if a != b {
		t.Errorf("two runs differ: %v vs %v", a, b)
	}
	if math.Abs(a-want) > 1e-12*want {
		t.Errorf("Σx² = %v, kernels.SumSquares gives %v", a, want)
	}
}

// TestEmuEmbedding checks the embedding lookup, its atomic backward (tokens
// repeat) and the f32 → bf16 cast.
func TestEmuEmbedding(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 1))
	const V, C, N = 11, 70, 31
	wte, dout := emuRandn(r, V*C, 1), emuRandn(r, N*C, 1)
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
	got := runEmu(t, itoa("embed", V, C, N), []any{wte, dout, tok}, N*C, V*C, V*C)
	emuCheck(t, "embed out", got[0], out, 0)
	emuCheck(t, "embed dw", got[1], dw, 1e-6)
	emuCheck(t, "cast", got[2], emuRound(wte), 0)
}
