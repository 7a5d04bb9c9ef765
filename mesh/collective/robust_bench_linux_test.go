//go:build linux

package collective

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// ownerChunkInput returns k members' int8 chunk messages of n honest
// pseudo-gradient values each, as an owner receives them.
func ownerChunkInput(b *testing.B, k, n int) [][]byte {
	xs, _ := pseudoGrads(rand.New(rand.NewPCG(uint64(k), uint64(n))), k, n)
	msgs := make([][]byte, k)
	var qz quantizer
	var t [256]float32
	for i, x := range xs {
		msgs[i] = make([]byte, CodecInt8.msgSize(n))
		putHeader(msgs[i], chunkHeader{codec: CodecInt8, phase: phaseDirectScatter, step: 1, n: uint32(n)})
		if err := qz.encodeInt8(msgs[i][chunkHeaderSize:], &t, x); err != nil {
			b.Fatal(err)
		}
	}
	return msgs
}

// BenchmarkOwnerChunk reports the CPU an owner spends on one chunk of k
// contributions (scatterShard.own's work without the transport: SHA-256 of
// the k − 1 messages received, ownerWork.combine — decode, robust rule,
// encode — SHA-256 of the result, decoding it into Dst) per contribution
// value, against the ring's work per received value (decode, add,
// re-encode: what each of the k−1 members on a segment's way does)
// measured the same way in the same run (x-ring). Thread CPU time, one
// core, DefaultChunkElems values; each the least of 5 rounds, interleaved,
// so that other work on the machine counts as little as it can.
func BenchmarkOwnerChunk(b *testing.B) {
	const n = DefaultChunkElems
	for _, k := range []int{4, 8, 16} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			owner := ownerChunkStep(b, k, n)
			ring := ringChunkStep(b, n)
			b.SetBytes(int64(4 * k * n))
			for b.Loop() {
				owner()
			}
			to, tr := minCPUPer(owner, ring)
			perValue := float64(to.Nanoseconds()) / float64(k*n)
			b.ReportMetric(perValue, "cpu-ns/value")
			b.ReportMetric(float64(tr.Nanoseconds())/n, "ring-cpu-ns/value")
			b.ReportMetric(perValue/(float64(tr.Nanoseconds())/n), "x-ring")
		})
	}
}

// ownerChunkStep returns one owner's work on one chunk of k contributions.
func ownerChunkStep(b *testing.B, k, n int) func() {
	msgs := ownerChunkInput(b, k, n)
	w := honestWeights(k)
	rc := RobustConfig{MaxWeight: testH}
	if err := rc.Validate(); err != nil {
		b.Fatal(err)
	}
	ow := newOwnerWork(codecParams{codec: CodecInt8}, k, n)
	hs := make([]hash.Hash, k+1)
	for i := range hs {
		hs[i] = sha256.New()
	}
	dst := make([]float32, n)
	return func() {
		for i, m := range msgs {
			if i != 1 { // the owner's own is hashed by encode already
				hs[i].Write(m)
			}
		}
		out, _, err := ow.combine(&rc, w, msgs, 1, 1, 0)
		if err != nil {
			b.Fatal(err)
		}
		hs[k].Write(out)
		decodeInt8Set(dst, &ow.t, out[chunkHeaderSize+int8TableSize:])
	}
}

// ringChunkStep returns the ring's work on one received chunk: decode it,
// add it to this member's values and re-encode the sum.
func ringChunkStep(b *testing.B, n int) func() {
	msgs := ownerChunkInput(b, 2, n)
	own, _ := pseudoGrads(rand.New(rand.NewPCG(9, 9)), 1, n)
	x := make([]float32, n)
	out := make([]byte, CodecInt8.msgSize(n))
	var c coder
	c.init(CodecInt8)
	return func() {
		copy(x, own[0])
		if err := c.prepareAdd(x, nil, 0.25, msgs[1][chunkHeaderSize:]); err != nil {
			b.Fatal(err)
		}
		if err := c.encodeSent(out[chunkHeaderSize:], x, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// minCPUPer returns the least CPU time per call of f and g over 5
// interleaved rounds of cpuPer.
func minCPUPer(f, g func()) (tf, tg time.Duration) {
	tf, tg = time.Hour, time.Hour
	for range 5 {
		tf, tg = min(tf, cpuPer(10, f)), min(tg, cpuPer(10, g))
	}
	return tf, tg
}

// processCPU is the CPU time of the whole process, every thread.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScatterVsRingCPU is BenchmarkScatterVsRing in CPU time: the
// process's CPU (all members, all threads) per all-reduce of the ring and
// of the robust scatter, interleaved in the same loop, and their ratio
// (x-cpu). On a machine shared with other work, CPU time moves less than
// wall time.
func BenchmarkScatterVsRingCPU(b *testing.B) {
	for _, k := range []int{4, 8} {
		const n = 4 << 20
		b.Run(fmt.Sprintf("k=%d/n=%dM", k, n>>20), func(b *testing.B) {
			xs := benchVecs(k, n)
			w := honestWeights(k)
			dst := make([][]float32, k)
			for i := range dst {
				dst[i] = make([]float32, n)
			}
			ctx := context.Background()
			scfg := ScatterConfig{Robust: RobustConfig{MaxWeight: testH}}
			var ringC, scatC time.Duration
			b.ResetTimer()
			for range b.N {
				c0 := processCPU()
				benchRing(b, ctx, xs, dst, w, newPacers(k, 0))
				c1 := processCPU()
				benchScatter(b, ctx, xs, dst, w, scfg, newPacers(k, 0))
				c2 := processCPU()
				ringC += c1 - c0
				scatC += c2 - c1
			}
			b.ReportMetric(float64(ringC.Nanoseconds())/float64(b.N), "ring-cpu-ns/op")
			b.ReportMetric(float64(scatC.Nanoseconds())/float64(b.N), "scatter-cpu-ns/op")
			b.ReportMetric(float64(scatC)/float64(ringC), "x-cpu")
		})
	}
}
