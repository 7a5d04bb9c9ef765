package kernels

import "math"

// Causal grouped-query attention over the fused q/k/v projection output.
//
// Layout of one token's row in qkv (width (H+2·KVH)·hd):
//
//	[ q: H heads × hd | k: KVH heads × hd | v: KVH heads × hd ]
//
// Query head h uses key/value head h / (H/KVH). Scores are scaled by 1/sqrt(hd).
// The forward pass keeps the log-sum-exp of each query's scores so the backward
// pass recomputes the probabilities in O(T) per query instead of storing the
// (T, T) matrix, FlashAttention style.

// attTile is the number of queries processed together: the score block of a
// tile is attTile × (keys up to the tile's end), so memory per job is O(T·hd)
// and the work per query is O(T·hd), done as matrix products on the GEMM
// micro-kernels (attMul) that skip the masked part of each block.
const attTile = 64

// attView locates the q, k, v of one (batch, query head) inside qkv and out.
type attView struct {
	T, H, KVH, hd, W int
	qkv, out         []float32
	b, h, kh         int
}

func (v *attView) q(t int) []float32 { return v.qkv[(v.b*v.T+t)*v.W+v.h*v.hd:] }
func (v *attView) k() []float32      { return v.qkv[v.b*v.T*v.W+(v.H+v.kh)*v.hd:] }
func (v *attView) v() []float32      { return v.qkv[v.b*v.T*v.W+(v.H+v.KVH+v.kh)*v.hd:] }
func (v *attView) o(t int) []float32 { return v.out[(v.b*v.T+t)*v.H*v.hd+v.h*v.hd:] }

// AttentionForward computes out = softmax(q·kᵀ/√hd + causal mask)·v for every
// (batch, head), in parallel over (batch, head). Queries go in tiles of
// attTile and the tiles in blocks of mr rows: S = scale·Q·Kᵀ and O = P·V are
// products over the keys the block's queries see, the row softmax is
// vectorised; O(T·hd) work per query.
//
//	out (B, T, H·hd)           written
//	lse (B, H, T)              written: log Σ_s exp(score_s) per query
//	qkv (B, T, (H+2·KVH)·hd)
func AttentionForward(out, lse, qkv []float32, B, T, H, KVH, hd int) {
	Workers(0).AttentionForward(out, lse, qkv, B, T, H, KVH, hd)
}

// AttentionForward is the package's AttentionForward on at most w goroutines.
func (w Workers) AttentionForward(out, lse, qkv []float32, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	w.jobs(B*H, func(job int) {
		v := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: qkv, out: out, b: job / H, h: job % H}
		v.kh = v.h / (H / KVH)
		m := newAttMul(activeGemm, max(T, hd))
		defer m.free()
		kt := m.packB(v.k(), W, true, hd, T)  // Kᵀ: depth hd, a column per key
		vp := m.packB(v.v(), W, false, T, hd) // V: depth T (keys), hd columns
		S := m.scratch(min(attTile, T) * T)
		for t0 := 0; t0 < T; t0 += attTile {
			t1 := min(t0+attTile, T)
			tq := t1 - t0
			for i0 := 0; i0 < tq; i0 += m.mr() {
				rows := min(m.mr(), tq-i0)
				kend := t0 + i0 + rows // keys the block's last query sees
				m.rows(v.q(t0), W, false, i0, rows, 0, hd, kt, hd, m.cols(kend, t1), S, t1, scale, 0)
				for i := i0; i < i0+rows; i++ {
					lse[(v.b*H+v.h)*T+t0+i] = softmaxCausal(S[i*t1:(i+1)*t1], t0+i)
				}
				m.rows(S, t1, false, i0, rows, 0, kend, vp, T, hd, v.o(t0), H*hd, 1, 0)
			}
		}
	})
}

// softmaxCausal replaces row[:t+1] by its softmax and zeroes row[t+1:];
// it returns the log-sum-exp of row[:t+1].
func softmaxCausal(row []float32, t int) float32 {
	vis := row[:t+1]
	maxv := max8(vis)
	ev := row[:vecLen(t+1, len(row))]
	expAffine(ev, ev, 1, -maxv)
	sum := sum8(vis)
	scale32(vis, 1/sum)
	clear(row[t+1:])
	return maxv + log32(sum)
}

// vecLen is n rounded up to whole 8-float vectors, at most limit: elementwise
// loops over a row prefix of n run over vecLen floats when the row's masked
// rest may be overwritten, so no scalar tail is left.
func vecLen(n, limit int) int { return min((n+7)&^7, limit) }

// log32 is ln x for the row sums of softmaxCausal (x ≥ 1 there), within
// about one float32 rounding of math.Log and several times faster; x outside
// the normal positive floats goes to math.Log.
func log32(x float32) float32 {
	if !(x >= 0x1p-126 && x <= math.MaxFloat32) {
		return float32(math.Log(float64(x)))
	}
	b := math.Float32bits(x)
	e := int(b>>23) - 127
	m := float64(math.Float32frombits(b&0x7fffff | 0x3f800000)) // [1, 2)
	if m > math.Sqrt2 {
		m /= 2
		e++
	}
	// ln m = 2·atanh(s), s = (m−1)/(m+1) ∈ [−0.172, 0.172]: the series to
	// s¹¹ is exact to 1e-10.
	s := (m - 1) / (m + 1)
	s2 := s * s
	r := 2 * s * (1 + s2*(1.0/3+s2*(1.0/5+s2*(1.0/7+s2*(1.0/9+s2*(1.0/11))))))
	return float32(float64(e)*math.Ln2 + r)
}

// AttentionBackward writes dqkv, the gradient with respect to qkv, given dout.
// It runs in parallel over (batch, key/value head): each job owns the dk and dv
// of its key/value head and the dq of the H/KVH query heads that share it, so no
// two goroutines write the same memory and the result does not depend on
// scheduling. Per query tile it recomputes P = exp(S − lse) from the saved
// log-sum-exp (FlashAttention style, no (T, T) matrix kept) and uses
// D = rowsum(dout∘out): dS = P∘(dout·vᵀ − D), dq = scale·dS·k, dk += scale·dSᵀ·q,
// dv += Pᵀ·dout — products over the keys and queries each block sees (attMul), O(T·hd)
// work per query.
//
//	dqkv (B, T, (H+2·KVH)·hd)  written (overwritten)
//	dout (B, T, H·hd)
//	out  (B, T, H·hd)          from the forward pass
//	lse  (B, H, T)             from the forward pass
//	qkv  (B, T, (H+2·KVH)·hd)
func AttentionBackward(dqkv, dout, out, lse, qkv []float32, B, T, H, KVH, hd int) {
	Workers(0).AttentionBackward(dqkv, dout, out, lse, qkv, B, T, H, KVH, hd)
}

// AttentionBackward is the package's AttentionBackward on at most w goroutines.
func (w Workers) AttentionBackward(dqkv, dout, out, lse, qkv []float32, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	grp := H / KVH
	scale := float32(1 / math.Sqrt(float64(hd)))
	w.jobs(B*KVH, func(job int) {
		b, kh := job/KVH, job%KVH
		zeroKVGrads(dqkv, b, kh, T, H, KVH, hd) // this job's dk and dv accumulate
		m := newAttMul(activeGemm, max(T, hd))
		defer m.free()
		v0 := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: qkv, b: b, kh: kh}
		kt := m.packB(v0.k(), W, true, hd, T)  // Kᵀ for P = Q·Kᵀ
		vt := m.packB(v0.v(), W, true, hd, T)  // Vᵀ for dP = dO·Vᵀ
		kp := m.packB(v0.k(), W, false, T, hd) // K for dq = dS·K
		n := min(attTile, T)
		P, dP := m.scratch(n*T), m.scratch(n*T)
		qp, dop := m.scratch(n*m.roundCols(hd)), m.scratch(n*m.roundCols(hd))
		for h := kh * grp; h < (kh+1)*grp; h++ {
			v := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: qkv, out: out, b: b, h: h, kh: kh}
			d := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: dqkv, out: dout, b: b, h: h, kh: kh}
			for t0 := 0; t0 < T; t0 += attTile {
				t1 := min(t0+attTile, T)
				tq := t1 - t0
				m.packBInto(qp, v.q(t0), W, false, tq, hd)     // this tile's queries, for dk
				m.packBInto(dop, d.o(t0), H*hd, false, tq, hd) // this tile's dout, for dv
				for i0 := 0; i0 < tq; i0 += m.mr() {
					rows := min(m.mr(), tq-i0)
					kend := t0 + i0 + rows
					cols := m.cols(kend, t1)
					m.rows(v.q(t0), W, false, i0, rows, 0, hd, kt, hd, cols, P, t1, scale, 0)
					m.rows(d.o(t0), H*hd, false, i0, rows, 0, hd, vt, hd, cols, dP, t1, 1, 0)
					for i := i0; i < i0+rows; i++ {
						t := t0 + i
						p, dp := P[i*t1:(i+1)*t1], dP[i*t1:(i+1)*t1]
						ev := p[:vecLen(t+1, t1)]
						expAffine(ev, ev, 1, -lse[(b*H+h)*T+t])
						D := dot32(d.o(t)[:hd], v.o(t)[:hd])
						dS(dp[:t+1], p[:t+1], D, scale)
						clear(p[t+1:]) // masked: no gradient reaches these keys
						clear(dp[t+1:])
					}
					m.rows(dP, t1, false, i0, rows, 0, kend, kp, T, hd, d.q(t0), W, 1, 0)
				}
				// Keys [s0, s0+mr) get gradient from the tile's queries t ≥ s0 only.
				for s0 := 0; s0 < t1; s0 += m.mr() {
					rows := min(m.mr(), t1-s0)
					first := max(0, s0-t0)
					m.rows(dP, t1, true, s0, rows, first, tq, qp, tq, hd, d.k(), W, 1, 1)
					m.rows(P, t1, true, s0, rows, first, tq, dop, tq, hd, d.v(), W, 1, 1)
				}
			}
		}
	})
}

// zeroKVGrads clears the dk and dv of key/value head kh of batch row b in dqkv.
func zeroKVGrads(dqkv []float32, b, kh, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	for t := 0; t < T; t++ {
		row := dqkv[(b*T+t)*W:]
		clear(row[(H+kh)*hd : (H+kh+1)*hd])
		clear(row[(H+KVH+kh)*hd : (H+KVH+kh+1)*hd])
	}
}

// dS sets dp[s] = p[s]·(dp[s] − D)·scale: the gradient of the scaled scores.
func dS(dp, p []float32, D, scale float32) {
	p = p[:len(dp)]
	for s := range dp {
		dp[s] = p[s] * (dp[s] - D) * scale
	}
}

// AttentionForwardRef is the float64 reference of AttentionForward: it builds
// each (T, T) score matrix, masks, applies a softmax and multiplies by v.
//
//	out (B, T, H·hd)  written
//	qkv (B, T, (H+2·KVH)·hd)
func AttentionForwardRef(out, qkv []float64, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	scale := 1 / math.Sqrt(float64(hd))
	att := make([]float64, T*T)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			kh := h / (H / KVH)
			for t := 0; t < T; t++ {
				for s := 0; s < T; s++ {
					att[t*T+s] = math.Inf(-1)
					if s <= t {
						var d float64
						for i := 0; i < hd; i++ {
							d += qkv[(b*T+t)*W+h*hd+i] * qkv[(b*T+s)*W+(H+kh)*hd+i]
						}
						att[t*T+s] = d * scale
					}
				}
			}
			SoftmaxRowsRef(att, att, T, T)
			for t := 0; t < T; t++ {
				for i := 0; i < hd; i++ {
					var acc float64
					for s := 0; s <= t; s++ {
						acc += att[t*T+s] * qkv[(b*T+s)*W+(H+KVH+kh)*hd+i]
					}
					out[(b*T+t)*H*hd+h*hd+i] = acc
				}
			}
		}
	}
}
