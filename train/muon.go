package train

import (
	"math"

	"github.com/intellect-node/intellect-node/kernels"
)

// Muon (Jordan et al. 2024; the Moonlight recipe of Liu et al. 2025) for the
// hidden weight matrices, Options.Optimizer = OptimizerMuon. Per matrix W
// (rows × cols) with gradient g (clipped as AdamW's):
//
//	m ← μ·m + g                      momentum buffer (μ = 0.95)
//	u ← g + μ·m                      Nesterov
//	O ← NewtonSchulz5(u)             ≈ U·Vᵀ of u = U·S·Vᵀ
//	W ← W − lr·(0.2·√max(rows, cols)·O + wd·W)
//
// The factor 0.2·√max(rows, cols) gives the update the RMS of a typical
// AdamW update (Moonlight), so Muon shares AdamW's learning rate, schedule
// and decoupled weight decay. The buffer m is kept in the slots of AdamW's
// first moment (unused for these tensors), so it is inner optimizer state
// like AdamW's moments: local to a worker, carried across DiLoCo phases,
// saved and loaded by checkpoints as "exp_avg" (the matrices' "exp_avg_sq"
// slots stay zero). Every operation is float32 in a fixed order (Sgemm's
// result does not depend on its thread count): the same seed gives the
// same bits.

const (
	muonMomentum = 0.95
	// nsSteps Newton–Schulz iterations with the quintic coefficients of
	// Keller Jordan's Muon (chosen for the slope at 0, not convergence to 1:
	// the singular values end in roughly [0.7, 1.2]).
	nsSteps          = 5
	nsA, nsB, nsC    = 3.4445, -4.7750, 2.0315
	muonRMSMatch     = 0.2
	nsNormEps        = 1e-7
	embedTensorName  = "model.embed_tokens.weight"
	lmHeadTensorName = "lm_head.weight"
)

// IsHidden reports whether a tensor is a hidden weight matrix (attention or
// MLP), the tensors Muon updates; embeddings, the head and norms are not.
// The CUDA engine (train/gpu) picks Muon's tensors with it too.
func (t TensorInfo) IsHidden() bool {
	return len(t.Shape) == 2 && t.Name != embedTensorName && t.Name != lmHeadTensorName
}

// muonState is Muon's scratch space (its state proper lives in Trainer.mom).
type muonState struct {
	u, o []float32 // Nesterov direction and its orthogonalization, rows·cols
	ns   nsScratch
}

func newMuonState(lay []TensorInfo) *muonState {
	n, r := 0, 0
	for _, ti := range lay {
		if ti.IsHidden() {
			n = max(n, ti.Size())
			r = max(r, min(ti.Shape[0], ti.Shape[1]))
		}
	}
	return &muonState{u: make([]float32, n), o: make([]float32, n), ns: newNSScratch(n, r)}
}

// nsScratch holds the Newton–Schulz iterates of matrices of at most n
// elements whose smaller side is at most r.
type nsScratch struct {
	x, xn, a, b []float32
}

func newNSScratch(n, r int) nsScratch {
	return nsScratch{x: make([]float32, n), xn: make([]float32, n), a: make([]float32, r*r), b: make([]float32, r*r)}
}

// muonMatrix applies one Muon step to the rows × cols matrix p with
// gradient gscale·g and momentum buffer m (updated in place).
func muonMatrix(p, g, m []float32, rows, cols int, lr, wd, gscale float32, st *muonState) {
	n := rows * cols
	p, g, m = p[:n], g[:n], m[:n]
	u, o := st.u[:n], st.o[:n]
	const mu = float32(muonMomentum)
	// The float32() conversions are explicit roundings: they forbid fused
	// multiply-add, so the bits do not depend on GOARCH/GOAMD64.
	for i := range p {
		gi := g[i] * gscale
		mi := float32(mu*m[i]) + gi
		m[i] = mi
		u[i] = gi + float32(mu*mi)
	}
	newtonSchulz(o, u, rows, cols, &st.ns)
	scale := float32(muonRMSMatch * math.Sqrt(float64(max(rows, cols))))
	for i := range p {
		p[i] -= float32(lr * (float32(scale*o[i]) + float32(wd*p[i])))
	}
}

// newtonSchulz writes into dst (rows × cols) the quintic Newton–Schulz
// orthogonalization of u (rows × cols): X = u/‖u‖_F, transposed so that it
// has no more rows than columns, then nsSteps times
//
//	A = X·Xᵀ ;  X ← a·X + (b·A + c·A·A)·X
//
// with the products on kernels.Sgemm, in float32.
func newtonSchulz(dst, u []float32, rows, cols int, s *nsScratch) {
	n := rows * cols
	r, c, trans := rows, cols, rows > cols
	if trans {
		r, c = cols, rows
	}
	x, xn, a, b := s.x[:n], s.xn[:n], s.a[:r*r], s.b[:r*r]
	var ss float64
	for _, v := range u[:n] {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / (math.Sqrt(ss) + nsNormEps))
	if trans { // x (r × c) = uᵀ, u is c × r
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				x[i*c+j] = u[j*r+i] * inv
			}
		}
	} else {
		for i, v := range u[:n] {
			x[i] = v * inv
		}
	}
	for k := 0; k < nsSteps; k++ {
		kernels.Sgemm(false, true, r, r, c, 1, x, c, x, c, 0, a, r) // A = X·Xᵀ
		copy(b, a)
		kernels.Sgemm(false, false, r, r, r, nsC, a, r, a, r, nsB, b, r) // B = b·A + c·A·A
		copy(xn, x)
		kernels.Sgemm(false, false, r, c, r, 1, b, r, x, c, nsA, xn, c) // X' = a·X + B·X
		x, xn = xn, x
	}
	if trans {
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				dst[j*r+i] = x[i*c+j]
			}
		}
		return
	}
	copy(dst[:n], x)
}
