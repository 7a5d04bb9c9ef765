package kernels

import (
	"math"
	"sync"
)

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
// tile is attTile × (keys up to the tile's end), so memory per job is O(T) and
// the work per query is O(T·hd), done as matrix products by Sgemm.
const attTile = 64

// scratchPool recycles the score tiles of attention jobs, so a training step
// does not allocate them again.
var scratchPool sync.Pool // of *[]float32

// getScratch returns a slice of n float32 with arbitrary contents.
func getScratch(n int) []float32 {
	if p, ok := scratchPool.Get().(*[]float32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]float32, n)
}

func putScratch(s []float32) { scratchPool.Put(&s) }

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
// attTile: S = scale·Q·Kᵀ and O = P·V are Sgemm calls over the keys up to the
// tile's end, the row softmax is vectorised; O(T·hd) work per query.
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
		S := getScratch(min(attTile, T) * T)
		defer putScratch(S)
		for t0 := 0; t0 < T; t0 += attTile {
			t1 := min(t0+attTile, T)
			tq := t1 - t0
			Workers(1).Sgemm(false, true, tq, t1, hd, scale, v.q(t0), W, v.k(), W, 0, S, t1)
			for i := 0; i < tq; i++ {
				row := S[i*t1 : (i+1)*t1]
				lse[(v.b*H+v.h)*T+t0+i] = softmaxCausal(row, t0+i)
			}
			Workers(1).Sgemm(false, false, tq, hd, t1, 1, S, t1, v.v(), W, 0, v.o(t0), H*hd)
		}
	})
}

// softmaxCausal replaces row[:t+1] by its softmax and zeroes row[t+1:];
// it returns the log-sum-exp of row[:t+1].
func softmaxCausal(row []float32, t int) float32 {
	vis := row[:t+1]
	maxv := max8(vis)
	expAffine(vis, vis, 1, -maxv)
	sum := sum8(vis)
	scale32(vis, 1/sum)
	clear(row[t+1:])
	return maxv + float32(math.Log(float64(sum)))
}

// AttentionBackward writes dqkv, the gradient with respect to qkv, given dout.
// It runs in parallel over (batch, key/value head): each job owns the dk and dv
// of its key/value head and the dq of the H/KVH query heads that share it, so no
// two goroutines write the same memory and the result does not depend on
// scheduling. Per query tile it recomputes P = exp(S − lse) from the saved
// log-sum-exp (FlashAttention style, no (T, T) matrix kept) and uses
// D = rowsum(dout∘out): dS = P∘(dout·vᵀ − D), dq = scale·dS·k, dk += scale·dSᵀ·q,
// dv += Pᵀ·dout — Sgemm calls, O(T·hd) work per query.
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
		for t := 0; t < T; t++ { // this job's dk and dv accumulate: zero them
			row := dqkv[(b*T+t)*W:]
			clear(row[(H+kh)*hd : (H+kh+1)*hd])
			clear(row[(H+KVH+kh)*hd : (H+KVH+kh+1)*hd])
		}
		n := min(attTile, T) * T
		P, dP := getScratch(n), getScratch(n)
		defer putScratch(P)
		defer putScratch(dP)
		for h := kh * grp; h < (kh+1)*grp; h++ {
			v := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: qkv, out: out, b: b, h: h, kh: kh}
			d := attView{T: T, H: H, KVH: KVH, hd: hd, W: W, qkv: dqkv, out: dout, b: b, h: h, kh: kh}
			for t0 := 0; t0 < T; t0 += attTile {
				t1 := min(t0+attTile, T)
				tq := t1 - t0
				Workers(1).Sgemm(false, true, tq, t1, hd, scale, v.q(t0), W, v.k(), W, 0, P, t1)
				Workers(1).Sgemm(false, true, tq, t1, hd, 1, d.o(t0), H*hd, v.v(), W, 0, dP, t1)
				for i := 0; i < tq; i++ {
					t := t0 + i
					p, dp := P[i*t1:(i+1)*t1], dP[i*t1:(i+1)*t1]
					expAffine(p[:t+1], p[:t+1], 1, -lse[(b*H+h)*T+t])
					clear(p[t+1:])
					D := dot32(d.o(t)[:hd], v.o(t)[:hd])
					for s := range dp {
						dp[s] = p[s] * (dp[s] - D) * scale // dS (0 where masked)
					}
				}
				Workers(1).Sgemm(false, false, tq, hd, t1, 1, dP, t1, v.k(), W, 0, d.q(t0), W)
				Workers(1).Sgemm(true, false, t1, hd, tq, 1, dP, t1, v.q(t0), W, 1, d.k(), W)
				Workers(1).Sgemm(true, false, t1, hd, tq, 1, P, t1, d.o(t0), H*hd, 1, d.v(), W)
			}
		}
	})
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
