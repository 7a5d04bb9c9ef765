//go:build cuda || cudaemu

package gpu

import (
	"github.com/intellect-node/intellect-node/kernels/cuda"
)

// The forward and backward passes: flat lists of kernel launches and cuBLAS
// calls mirroring train's model.forward / model.backward line by line. All
// run inside Device.Do on the device's stream; errors are the first launch or
// cuBLAS failure.

const (
	ewBlock   = 256  // block size of element-wise kernels
	maxBlocks = 8192 // cap of element-wise grids (they grid-stride)
	rowBlock  = 256  // block size of per-row kernels (norms)
	xentBlock = 1024 // block size of the loss kernel
	dwRows    = 256  // rows per block of rmsnorm_backward_dw
)

// launcher accumulates the first error of a sequence of launches, so the
// passes read as plain lists.
type launcher struct {
	e    *Engine
	err  error
	args cuda.Args
}

func (k *launcher) run(name string, grid, block cuda.Dim3, a *cuda.Args) {
	if k.err == nil {
		k.err = k.e.dev.Launch(name, grid, block, 0, a)
	}
}

func (k *launcher) ew(name string, n int64, a *cuda.Args) {
	k.run(name, cuda.Dim3{X: cuda.Grid1D(n, ewBlock, maxBlocks)}, cuda.Dim3{X: ewBlock}, a)
}

func (k *launcher) gemm(ta, tb bool, m, n, kk int, A, B cuda.Mat, beta float32, C cuda.Mat) {
	if k.err == nil {
		k.err = k.e.dev.Blas.Gemm(ta, tb, m, n, kk, 1, A, B, beta, C)
	}
}

// matmul: out (N, OC) = inp (N, IC) · wᵀ + beta·out; w (OC, IC) bf16 at element offset woff.
func (k *launcher) matmul(out cuda.Mat, inp cuda.DevicePtr, woff, N, IC, OC int, beta float32) {
	k.gemm(false, true, N, OC, IC, bf16(inp, 0, IC), bf16(k.e.pb, woff, IC), beta, out)
}

// matmulBackward: dinp (N, IC) bf16 = dout (N, OC) · w; dw (OC, IC) f32 += doutᵀ · inp.
func (k *launcher) matmulBackward(dinp, dout, inp cuda.DevicePtr, woff, N, IC, OC int) {
	k.gemm(false, false, N, IC, OC, bf16(dout, 0, OC), bf16(k.e.pb, woff, IC), 0, bf16(dinp, 0, IC))
	k.gemm(true, false, OC, IC, N, bf16(dout, 0, OC), bf16(inp, 0, IC), 1, f32(k.e.g, woff, IC))
}

func (k *launcher) rmsnorm(out, rstd, inp cuda.DevicePtr, woff, N, C int) {
	e := k.e
	k.run("rmsnorm_forward", cuda.Dim3{X: N}, cuda.Dim3{X: rowBlock},
		k.args.Reset().P(out).P(rstd).P(inp).P(at(e.p, woff)).I(N).I(C).F(float32(e.cfg.NormEps)))
}

// rmsnormBackward: dresid += ∂/∂inp, g[woff:] += ∂/∂w, from dout (bf16).
func (k *launcher) rmsnormBackward(dresid, dout, inp, rstd cuda.DevicePtr, woff, N, C int) {
	e := k.e
	k.run("rmsnorm_backward_dx", cuda.Dim3{X: N}, cuda.Dim3{X: rowBlock},
		k.args.Reset().P(dresid).P(dout).P(inp).P(at(e.p, woff)).P(rstd).I(N).I(C))
	k.run("rmsnorm_backward_dw", cuda.Dim3{X: cuda.CeilDiv(C, rowBlock), Y: cuda.CeilDiv(N, dwRows)}, cuda.Dim3{X: rowBlock},
		k.args.Reset().P(at(e.g, woff)).P(dout).P(inp).P(rstd).I(N).I(C).I(dwRows))
}

func (k *launcher) rope(x cuda.DevicePtr, sign float32) {
	e, c := k.e, k.e.cfg
	hd, N := c.HeadDim(), e.B*e.T
	W := (c.Heads + 2*c.KVHeads) * hd
	k.ew("rope", int64(N)*int64(c.Heads+c.KVHeads)*int64(hd/2),
		k.args.Reset().P(x).P(e.a.cos).P(e.a.sin).I(N).I(e.T).I(c.Heads+c.KVHeads).I(hd).I(W).F(sign))
}

// attn launches attention kernel part ("fwd", "bwd_dq", "bwd_dkdv") named
// name over heads heads, with the geometry of the selected implementation.
func (k *launcher) attn(name, part string, heads int, a *cuda.Args) {
	if k.err != nil {
		return
	}
	grid := cuda.Dim3{X: cuda.CeilDiv(k.e.T, cuda.AttnTile), Y: heads, Z: k.e.B}
	if k.e.attnTC {
		k.err = k.e.dev.Launch(name, grid, cuda.Dim3{X: cuda.AttnTCThreads}, cuda.AttnTCSmem(part, k.e.cfg.HeadDim()), a)
		return
	}
	k.err = k.e.dev.Launch(name, grid, cuda.Dim3{X: cuda.AttnTile}, 0, a)
}

// forward runs the model on the uploaded tokens; with withGrad it leaves
// dlogits = scale·∂(Σ objective)/∂logits for backward. It adds Σ cross-entropy
// of the micro-batch to scalars[0].
func (e *Engine) forward(withGrad bool, scale float32) error {
	k := &launcher{e: e}
	c, a, N := e.cfg, &e.a, e.B*e.T
	C, F, H, KV, hd := c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim()
	Q, W := H*hd, (H+2*KV)*hd
	k.run("embed_forward", cuda.Dim3{X: N}, cuda.Dim3{X: rowBlock},
		k.args.Reset().P(a.resid[0]).P(a.in).P(at(e.p, e.lay.wte)).I(N).I(C))
	for l, w := range e.lay.layers {
		k.rmsnorm(a.ln1[l], a.rstd1[l], a.resid[l], w.ln1, N, C)
		k.matmul(bf16(a.qkv[l], 0, W), a.ln1[l], w.qkv, N, C, W, 0)
		k.rope(a.qkv[l], 1)
		k.attn(e.attnFwd, "fwd", H, k.args.Reset().P(a.att[l]).P(a.lse[l]).P(a.qkv[l]).I(e.T).I(H).I(KV))
		k.copy(a.mid[l], a.resid[l], 4*int64(N*C))
		k.matmul(f32(a.mid[l], 0, C), a.att[l], w.o, N, Q, C, 1)
		k.rmsnorm(a.ln2[l], a.rstd2[l], a.mid[l], w.ln2, N, C)
		k.matmul(bf16(a.gu[l], 0, 2*F), a.ln2[l], w.gu, N, C, 2*F, 0)
		k.ew("swiglu_forward", int64(N)*int64(F), k.args.Reset().P(a.h[l]).P(a.gu[l]).I(N).I(F))
		k.copy(a.resid[l+1], a.mid[l], 4*int64(N*C))
		k.matmul(f32(a.resid[l+1], 0, C), a.h[l], w.down, N, F, C, 1)
	}
	k.rmsnorm(a.lnf, a.rstdf, a.resid[c.Layers], e.lay.lnf, N, C)
	k.matmul(f32(a.logits, 0, c.Vocab), a.lnf, e.lay.lm, N, C, c.Vocab, 0)
	var dl cuda.DevicePtr
	if withGrad {
		dl = a.dlogits
	}
	k.run("xent", cuda.Dim3{X: N}, cuda.Dim3{X: xentBlock},
		k.args.Reset().P(dl).P(a.losses).P(a.ce).P(a.logits).P(a.tgt).I(N).I(c.Vocab).F(float32(c.ZLoss)).F(scale))
	// One block: a fixed summation order, so Eval is the same for the same parameters.
	k.run("sum_f32", cuda.Dim3{X: 1}, cuda.Dim3{X: xentBlock}, k.args.Reset().P(a.scalars).P(a.ce).I(N))
	return k.err
}

// backward accumulates into e.g the gradient whose dlogits forward left.
func (e *Engine) backward() error {
	k := &launcher{e: e}
	c, a, N := e.cfg, &e.a, e.B*e.T
	C, F, H, KV, hd := c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim()
	Q, W := H*hd, (H+2*KV)*hd
	k.matmulBackward(a.dln, a.dlogits, a.lnf, e.lay.lm, N, C, c.Vocab)
	if k.err == nil {
		k.err = e.dev.Zero(a.dresid, 4*int64(N*C))
	}
	k.rmsnormBackward(a.dresid, a.dln, a.resid[c.Layers], a.rstdf, e.lay.lnf, N, C)
	for l := c.Layers - 1; l >= 0; l-- {
		w := e.lay.layers[l]
		k.ew("cast_f32_bf16", int64(N*C), k.args.Reset().P(a.dresb).P(a.dresid).L(int64(N*C)))
		k.matmulBackward(a.dh, a.dresb, a.h[l], w.down, N, F, C)
		k.ew("swiglu_backward", int64(N)*int64(F), k.args.Reset().P(a.dgu).P(a.dh).P(a.gu[l]).I(N).I(F))
		k.matmulBackward(a.dln, a.dgu, a.ln2[l], w.gu, N, C, 2*F)
		k.rmsnormBackward(a.dresid, a.dln, a.mid[l], a.rstd2[l], w.ln2, N, C)
		k.ew("cast_f32_bf16", int64(N*C), k.args.Reset().P(a.dresb).P(a.dresid).L(int64(N*C)))
		k.matmulBackward(a.datt, a.dresb, a.att[l], w.o, N, Q, C)
		k.ew("attn_bwd_d", int64(N*H), k.args.Reset().P(a.D).P(a.datt).P(a.att[l]).I(e.B).I(e.T).I(H).I(hd))
		k.attn(e.attnDQ, "bwd_dq", H, k.args.Reset().P(a.dqkv).P(a.qkv[l]).P(a.datt).P(a.lse[l]).P(a.D).I(e.T).I(H).I(KV))
		k.attn(e.attnDKDV, "bwd_dkdv", KV, k.args.Reset().P(a.dqkv).P(a.qkv[l]).P(a.datt).P(a.lse[l]).P(a.D).I(e.T).I(H).I(KV))
		k.rope(a.dqkv, -1)
		k.matmulBackward(a.dln, a.dqkv, a.ln1[l], w.qkv, N, C, W)
		k.rmsnormBackward(a.dresid, a.dln, a.resid[l], a.rstd1[l], w.ln1, N, C)
	}
	k.run("embed_backward", cuda.Dim3{X: N}, cuda.Dim3{X: rowBlock},
		k.args.Reset().P(at(e.g, e.lay.wte)).P(a.in).P(a.dresid).I(N).I(C))
	return k.err
}

func (k *launcher) copy(dst, src cuda.DevicePtr, bytes int64) {
	if k.err == nil {
		k.err = k.e.dev.CopyD(dst, src, bytes)
	}
}
