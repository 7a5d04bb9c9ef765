//go:build cuda || cudaemu

package gpu

import (
	"github.com/intellect-node/intellect-node/kernels/cuda"
	"github.com/intellect-node/intellect-node/train"
)

// arena carves many buffers out of one device allocation, each aligned to 256 bytes.
type arena struct {
	base cuda.DevicePtr
	off  int64
	plan bool // first pass: only measure
}

func (a *arena) take(bytes int64) cuda.DevicePtr {
	p := a.base + cuda.DevicePtr(a.off)
	a.off += (bytes + 255) &^ 255
	if a.plan {
		return 0
	}
	return p
}

func (a *arena) f32(n int) cuda.DevicePtr  { return a.take(4 * int64(n)) }
func (a *arena) bf16(n int) cuda.DevicePtr { return a.take(2 * int64(n)) }

// acts are the device activations of one (B, T) micro-batch: what the
// backward pass needs from the forward pass plus scratch. Shapes as in
// package train's acts; N = B·T, W = (H+2·KV)·hd, Q = H·hd.
type acts struct {
	resid        []cuda.DevicePtr // L+1 × (N, C) f32
	mid          []cuda.DevicePtr // L × (N, C) f32
	ln1, ln2     []cuda.DevicePtr // L × (N, C) bf16
	rstd1, rstd2 []cuda.DevicePtr // L × (N) f32
	qkv          []cuda.DevicePtr // L × (N, W) bf16, q and k after RoPE
	att          []cuda.DevicePtr // L × (N, Q) bf16
	lse          []cuda.DevicePtr // L × (B, H, T) f32
	gu           []cuda.DevicePtr // L × (N, 2F) bf16
	h            []cuda.DevicePtr // L × (N, F) bf16
	lnf          cuda.DevicePtr   // (N, C) bf16
	rstdf        cuda.DevicePtr   // (N) f32
	logits       cuda.DevicePtr   // (N, V) f32
	dlogits      cuda.DevicePtr   // (N, V) bf16
	losses, ce   cuda.DevicePtr   // (N) f32
	dresid       cuda.DevicePtr   // (N, C) f32
	dresb, dln   cuda.DevicePtr   // (N, C) bf16
	dqkv         cuda.DevicePtr   // (N, W) bf16
	datt         cuda.DevicePtr   // (N, Q) bf16
	dh           cuda.DevicePtr   // (N, F) bf16
	dgu          cuda.DevicePtr   // (N, 2F) bf16
	D            cuda.DevicePtr   // (B, H, T) f32
	in, tgt      cuda.DevicePtr   // (N) int32
	cos, sin     cuda.DevicePtr   // (T, hd/2) f32
	scalars      cuda.DevicePtr   // 4 × f64: loss sum, grad sum of squares
	partials     cuda.DevicePtr   // cuda.NormBlocks × f64: per-block sums of squares
}

func carveActs(a *arena, c train.Config, B, T int) acts {
	L, N := c.Layers, B*T
	C, F, hd := c.Dim, c.FFN, c.HeadDim()
	Q, W := c.Heads*hd, (c.Heads+2*c.KVHeads)*hd
	var x acts
	many := func(k int, f func() cuda.DevicePtr) []cuda.DevicePtr {
		s := make([]cuda.DevicePtr, k)
		for i := range s {
			s[i] = f()
		}
		return s
	}
	x.resid = many(L+1, func() cuda.DevicePtr { return a.f32(N * C) })
	x.mid = many(L, func() cuda.DevicePtr { return a.f32(N * C) })
	x.ln1 = many(L, func() cuda.DevicePtr { return a.bf16(N * C) })
	x.ln2 = many(L, func() cuda.DevicePtr { return a.bf16(N * C) })
	x.rstd1 = many(L, func() cuda.DevicePtr { return a.f32(N) })
	x.rstd2 = many(L, func() cuda.DevicePtr { return a.f32(N) })
	x.qkv = many(L, func() cuda.DevicePtr { return a.bf16(N * W) })
	x.att = many(L, func() cuda.DevicePtr { return a.bf16(N * Q) })
	x.lse = many(L, func() cuda.DevicePtr { return a.f32(B * c.Heads * T) })
	x.gu = many(L, func() cuda.DevicePtr { return a.bf16(N * 2 * F) })
	x.h = many(L, func() cuda.DevicePtr { return a.bf16(N * F) })
	x.lnf, x.rstdf = a.bf16(N*C), a.f32(N)
	x.logits, x.dlogits = a.f32(N*c.Vocab), a.bf16(N*c.Vocab)
	x.losses, x.ce = a.f32(N), a.f32(N)
	x.dresid, x.dresb, x.dln = a.f32(N*C), a.bf16(N*C), a.bf16(N*C)
	x.dqkv, x.datt, x.dh, x.dgu = a.bf16(N*W), a.bf16(N*Q), a.bf16(N*F), a.bf16(N*2*F)
	x.D = a.f32(B * c.Heads * T)
	x.in, x.tgt = a.take(4*int64(N)), a.take(4*int64(N))
	x.cos, x.sin = a.f32(T*hd/2), a.f32(T*hd/2)
	x.scalars = a.take(32)
	x.partials = a.take(8 * cuda.NormBlocks)
	return x
}

// tensor is one entry of the flat parameter layout, by element offset.
type tensor struct {
	off, size  int
	norm       bool
	hidden     bool // a hidden matrix: Muon's with train.OptimizerMuon (TensorInfo.IsHidden)
	rows, cols int  // its shape when 2-D
}

// layerT are the offsets of one block's tensors, fused where adjacent (q|k|v, gate|up).
type layerT struct{ ln1, qkv, o, ln2, gu, down int }

type layout struct {
	all          []tensor
	wte, lnf, lm int
	layers       []layerT
}

func newLayout(c train.Config) layout {
	ts := c.Layout()
	var l layout
	for _, t := range ts {
		x := tensor{off: t.Offset, size: t.Size(), norm: len(t.Shape) == 1, hidden: t.IsHidden()}
		if len(t.Shape) == 2 {
			x.rows, x.cols = t.Shape[0], t.Shape[1]
		}
		l.all = append(l.all, x)
	}
	l.wte, l.lnf, l.lm = ts[0].Offset, ts[len(ts)-2].Offset, ts[len(ts)-1].Offset
	for i := 0; i < c.Layers; i++ {
		b := 1 + 9*i
		l.layers = append(l.layers, layerT{ln1: ts[b].Offset, qkv: ts[b+1].Offset, o: ts[b+4].Offset,
			ln2: ts[b+5].Offset, gu: ts[b+6].Offset, down: ts[b+8].Offset})
	}
	return l
}

// bf16 is a row-major bf16 matrix operand at element offset off of base.
func bf16(base cuda.DevicePtr, off, ld int) cuda.Mat {
	return cuda.Mat{T: cuda.BF16T, P: base + cuda.DevicePtr(2*off), LD: ld}
}

// f32 is a row-major fp32 matrix operand at element offset off of base.
func f32(base cuda.DevicePtr, off, ld int) cuda.Mat {
	return cuda.Mat{T: cuda.F32, P: base + cuda.DevicePtr(4*off), LD: ld}
}

// at returns base advanced by off float32 elements.
func at(base cuda.DevicePtr, off int) cuda.DevicePtr { return base + cuda.DevicePtr(4*off) }
