package kernels

import (
	"math"
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

// AttentionForward computes out = softmax(q·kᵀ/√hd + causal mask)·v for every
// (batch, head), in parallel over (batch, head), O(T·hd) per query.
//
//	out (B, T, H·hd)           written
//	lse (B, H, T)              written: log Σ_s exp(score_s) per query
//	qkv (B, T, (H+2·KVH)·hd)
func AttentionForward(out, lse, qkv []float32, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	grp := H / KVH
	scale := float32(1 / math.Sqrt(float64(hd)))
	layerJobs(B*H, func(job int) {
		b, h := job/H, job%H
		kh := h / grp
		scores := make([]float32, T)
		for t := 0; t < T; t++ {
			q := qkv[(b*T+t)*W+h*hd : (b*T+t)*W+(h+1)*hd]
			sc := scores[:t+1]
			maxv := float32(math.Inf(-1))
			for s := range sc {
				k := qkv[(b*T+s)*W+(H+kh)*hd : (b*T+s)*W+(H+kh+1)*hd]
				sc[s] = dot32(q, k)
				maxv = max(maxv, sc[s])
			}
			expAffine(sc, sc, scale, -maxv*scale) // exp(scale·(score − max))
			var sum float32
			for _, e := range sc {
				sum += e
			}
			o := out[(b*T+t)*H*hd+h*hd : (b*T+t)*H*hd+(h+1)*hd]
			clear(o)
			inv := 1 / sum
			for s, e := range sc {
				v := qkv[(b*T+s)*W+(H+KVH+kh)*hd : (b*T+s)*W+(H+KVH+kh+1)*hd]
				axpy32(e*inv, v, o)
			}
			lse[(b*H+h)*T+t] = maxv*scale + float32(math.Log(float64(sum)))
		}
	})
}

// AttentionBackward writes dqkv, the gradient with respect to qkv, given dout.
// It runs in parallel over (batch, key/value head): each job owns the dk and dv
// of its key/value head and the dq of the H/KVH query heads that share it, so no
// two goroutines write the same memory and the result does not depend on
// scheduling. Per query it recomputes p_s = exp(score_s − lse) and uses
// D = dout·out (so Σ_s p_s·dp_s costs one dot product): O(T·hd) per query.
//
//	dqkv (B, T, (H+2·KVH)·hd)  written (overwritten)
//	dout (B, T, H·hd)
//	out  (B, T, H·hd)          from the forward pass
//	lse  (B, H, T)             from the forward pass
//	qkv  (B, T, (H+2·KVH)·hd)
func AttentionBackward(dqkv, dout, out, lse, qkv []float32, B, T, H, KVH, hd int) {
	W := (H + 2*KVH) * hd
	grp := H / KVH
	scale := float32(1 / math.Sqrt(float64(hd)))
	layerJobs(B*KVH, func(job int) {
		b, kh := job/KVH, job%KVH
		koff, voff := (H+kh)*hd, (H+KVH+kh)*hd
		for t := 0; t < T; t++ { // zero this job's dk, dv and dq regions
			row := dqkv[(b*T+t)*W:]
			clear(row[koff : koff+hd])
			clear(row[voff : voff+hd])
			clear(row[kh*grp*hd : (kh+1)*grp*hd])
		}
		p := make([]float32, T)
		for h := kh * grp; h < (kh+1)*grp; h++ {
			for t := 0; t < T; t++ {
				r := (b*T + t) * W
				q := qkv[r+h*hd : r+(h+1)*hd]
				dq := dqkv[r+h*hd : r+(h+1)*hd]
				do := dout[(b*T+t)*H*hd+h*hd : (b*T+t)*H*hd+(h+1)*hd]
				o := out[(b*T+t)*H*hd+h*hd : (b*T+t)*H*hd+(h+1)*hd]
				D := dot32(do, o)
				pt := p[:t+1]
				for s := range pt {
					rs := (b*T + s) * W
					pt[s] = dot32(q, qkv[rs+koff:rs+koff+hd])
				}
				expAffine(pt, pt, scale, -lse[(b*H+h)*T+t]) // probabilities
				for s, ps := range pt {
					rs := (b*T + s) * W
					dp := dot32(do, qkv[rs+voff:rs+voff+hd])
					ds := ps * (dp - D) * scale
					axpy32(ds, qkv[rs+koff:rs+koff+hd], dq)
					axpy32(ds, q, dqkv[rs+koff:rs+koff+hd])
					axpy32(ps, do, dqkv[rs+voff:rs+voff+hd])
				}
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
