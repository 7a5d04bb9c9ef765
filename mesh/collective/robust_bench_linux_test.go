//go:build linux

package collective

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"math/rand/v2"
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
	ow := newOwnerWork(k, n)
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
		out, _, err := ow.combine(&rc, w, msgs, 1, 0)
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
