package kernels

import (
	"math/rand/v2"
	"testing"
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
