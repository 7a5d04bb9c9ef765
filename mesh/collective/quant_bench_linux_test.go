//go:build linux

package collective

import (
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// threadCPU is the CPU time of the calling OS thread. On a machine shared
// with other work it measures what a step costs, not how long it waited.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPer returns f's CPU time per call, on one locked thread, over at least
// reps calls and 100 ms of CPU (the clock's granularity is coarse).
func cpuPer(reps int, f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	n := 0
	for ; n < reps || threadCPU()-start < 100*time.Millisecond; n++ {
		f()
	}
	return (threadCPU() - start) / time.Duration(n)
}

// BenchmarkInt8Codec reports the int8 codec's steps on one core in GB/s of
// fp32 values, from thread CPU time (cpu-GB/s), and as a ratio (x-add) to a
// plain fp32 dst += src loop over the same values measured the same way in
// the same run:
//   - encode: this member's own chunk, scaled and quantized (scatter step 0);
//   - reduce: a received chunk decoded and added to ours, re-quantized
//     (every later scatter step);
//   - decode: a received all-gather chunk copied out.
func BenchmarkInt8Codec(b *testing.B) {
	const n = 64 << 10
	rng := rand.New(rand.NewPCG(3, 3))
	src := gaussian(rng, n, false)
	x := make([]float32, n)
	dst := make([]float32, n)
	var c coder
	c.init(CodecInt8)
	recvd := make([]byte, CodecInt8.msgSize(n))[chunkHeaderSize:]
	var q quantizer
	var tab [256]float32
	if err := q.encodeInt8(recvd, &tab, gaussian(rng, n, false)); err != nil {
		b.Fatal(err)
	}
	out := make([]byte, len(recvd))
	steps := []struct {
		name string
		f    func()
	}{
		{"encode", func() {
			copy(x, src)
			c.prepare(x, nil, 0.25)
			_ = c.encodeSent(out, x, nil)
		}},
		{"reduce", func() {
			copy(x, src)
			_ = c.prepareAdd(x, nil, 0.25, recvd)
			_ = c.encodeSent(out, x, nil)
		}},
		{"decode", func() { _ = c.decode(dst, recvd, false) }},
	}
	base := func() {
		for i := range dst {
			dst[i] += src[i]
		}
	}
	for _, st := range steps {
		b.Run(st.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				st.f()
			}
			tb, tf := cpuPer(200, base), cpuPer(50, st.f)
			b.ReportMetric(float64(tb)/float64(tf), "x-add")
			b.ReportMetric(4*n/tf.Seconds()/1e9, "cpu-GB/s")
			b.ReportMetric(float64(tf.Nanoseconds())/n, "cpu-ns/value")
		})
	}
}
