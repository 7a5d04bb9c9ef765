//go:build cuda || cudaemu

package gpu

import (
	"math"

	"github.com/intellect-node/intellect-node/kernels/cuda"
)

// Muon on the GPU (train.OptimizerMuon), the CPU trainer's muonMatrix
// (train/muon.go) step for step on each hidden matrix W (rows × cols) at
// element offset off, all on the device's stream with no host round trip:
//
//	muon_momentum    m ← μ·m + gscale·g, x = gscale·g + μ·m   (m = e.m[off:], AdamW's first-moment slots)
//	sumsq_partial,   ss = ‖x‖²_F in double, fixed grid, no atomics
//	sum_f64
//	muon_normalize   x ← x·float32(1/(√ss + ε))
//	5 × Newton–Schulz, fp32 cuBLAS GEMMs (fp32 compute, no TF32):
//	                 A = X·Xᵀ;  B = b·A + c·A·A;  X ← a·X + B·X
//	muon_update      W ← W − lr·(0.2·√max(rows, cols)·X + wd·W), bf16 copy refreshed
//
// The CPU trainer transposes a matrix with more rows than columns so that
// X·Xᵀ is the smaller Gram matrix; here X stays in W's layout Y = Xᵀ and the
// GEMMs transpose instead: A = Yᵀ·Y and Y ← a·Y + Y·Bᵀ, the same products.
// Embeddings, the head and norm gains take the adamw kernel, as with AdamW.

const (
	muonMomentum = 0.95
	nsSteps      = 5
	nsA, nsB     = 3.4445, -4.7750
	nsC          = 2.0315
	muonRMSMatch = 0.2
)

// muonBufs is Muon's device scratch, sized for the largest hidden matrix.
type muonBufs struct {
	x, xn cuda.DevicePtr // Nesterov direction, then the Newton–Schulz iterates (rows·cols f32 each)
	a, b  cuda.DevicePtr // Gram matrix and its polynomial (r·r f32, r = the smaller side)
	ss    cuda.DevicePtr // ‖x‖²_F, one f64
	bytes int64
}

// allocMuon allocates Muon's scratch (inside Do).
func (e *Engine) allocMuon() (*muonBufs, error) {
	n, r := 0, 0
	for _, t := range e.lay.all {
		if t.hidden {
			n = max(n, t.size)
			r = max(r, min(t.rows, t.cols))
		}
	}
	ar := &arena{plan: true}
	carve := func(ar *arena) muonBufs {
		return muonBufs{x: ar.f32(n), xn: ar.f32(n), a: ar.f32(r * r), b: ar.f32(r * r), ss: ar.take(8)}
	}
	carve(ar)
	bytes := ar.off
	base, err := e.dev.Alloc(bytes)
	if err != nil {
		return nil, err
	}
	ar = &arena{base: base}
	m := carve(ar)
	m.bytes = bytes
	return &m, nil
}

// muonStep updates the hidden matrices with Muon and every other tensor with
// AdamW, as train's Trainer.update does with Muon (inside Do).
func (e *Engine) muonStep(lr float64, gscale float32) error {
	for _, t := range e.lay.all {
		var err error
		if t.hidden {
			err = e.muonMatrix(t, float32(lr), float32(e.opts.WeightDecay), gscale)
		} else {
			err = e.adamwTensor(t, lr, gscale)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// muonMatrix applies one Muon step to the hidden matrix t.
func (e *Engine) muonMatrix(t tensor, lr, wd, gscale float32) error {
	k := &launcher{e: e}
	mb, n := e.muon, int64(t.size)
	k.ew("muon_momentum", n, k.args.Reset().P(mb.x).P(at(e.m, t.off)).P(at(e.g, t.off)).L(n).F(muonMomentum).F(gscale))
	k.run("sumsq_partial", cuda.Dim3{X: cuda.NormBlocks}, cuda.Dim3{X: ewBlock}, k.args.Reset().P(e.a.partials).P(mb.x).L(n))
	k.run("sum_f64", cuda.Dim3{X: 1}, cuda.Dim3{X: 1024}, k.args.Reset().P(mb.ss).P(e.a.partials).I(cuda.NormBlocks))
	k.ew("muon_normalize", n, k.args.Reset().P(mb.x).L(n).P(mb.ss))
	x := e.newtonSchulz(k, t.rows, t.cols)
	scale := float32(muonRMSMatch * math.Sqrt(float64(max(t.rows, t.cols))))
	k.ew("muon_update", n, k.args.Reset().P(at(e.p, t.off)).P(e.pb+cuda.DevicePtr(2*t.off)).P(x).L(n).F(lr).F(scale).F(wd))
	return k.err
}

// newtonSchulz runs the nsSteps quintic iterations on the normalized
// rows × cols matrix in e.muon.x and returns the buffer (x or xn) holding
// the result, in the same layout.
func (e *Engine) newtonSchulz(k *launcher, rows, cols int) cuda.DevicePtr {
	mb := e.muon
	x, xn := mb.x, mb.xn
	trans := rows > cols
	r, c := rows, cols // X is r × c with r ≤ c; stored as Xᵀ (c × r) when trans
	if trans {
		r, c = cols, rows
	}
	n := int64(rows * cols)
	A, B := f32(mb.a, 0, r), f32(mb.b, 0, r)
	for s := 0; s < nsSteps; s++ {
		X, Xn := f32(x, 0, cols), f32(xn, 0, cols)
		if trans {
			k.gemm(true, false, r, r, c, X, X, 0, A) // A = X·Xᵀ = Yᵀ·Y
		} else {
			k.gemm(false, true, r, r, c, X, X, 0, A) // A = X·Xᵀ
		}
		k.copy(mb.b, mb.a, 4*int64(r*r))
		k.gemmAlpha(false, false, r, r, r, nsC, A, A, nsB, B) // B = b·A + c·A·A
		k.copy(xn, x, 4*n)
		if trans {
			k.gemmAlpha(false, true, c, r, r, 1, X, B, nsA, Xn) // Yn = a·Y + Y·Bᵀ = (a·X + B·X)ᵀ
		} else {
			k.gemmAlpha(false, false, r, c, r, 1, B, X, nsA, Xn) // Xn = a·X + B·X
		}
		x, xn = xn, x
	}
	return x
}

// gemmAlpha is launcher.gemm with a factor alpha on the product.
func (k *launcher) gemmAlpha(ta, tb bool, m, n, kk int, alpha float32, A, B cuda.Mat, beta float32, C cuda.Mat) {
	if k.err == nil {
		k.err = k.e.dev.Blas.Gemm(ta, tb, m, n, kk, alpha, A, B, beta, C)
	}
}
