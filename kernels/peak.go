package kernels

import (
	"runtime"
	"sync"
	"time"
)

// FMAPeak measures the float32 fused-multiply-add throughput of threads
// cores running at once, in GFLOP/s: on each, 24 independent 16-lane FMA
// chains on a locked thread; the best of five 20 ms rounds. It is the ceiling
// the micro-kernels are measured against, and lets a benchmark state a speed
// as a fraction of the machine it ran on: machines of the same kind differ by
// 2× here (MEASURED's Zen 5 ≈ 470 on 2 cores, the Intel VMs ≈ 220–240), and
// one busy core runs faster than two. It returns 0 where no probe exists (no
// AVX-512).
func FMAPeak(threads int) float64 {
	if fmaProbe(1) == 0 {
		return 0
	}
	threads = max(1, threads)
	const iters = 20000 // ≈ 0.1 ms per call
	best := 0.0
	for range 5 {
		flops := make([]float64, threads)
		var wg sync.WaitGroup
		start := time.Now()
		for t := range threads {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for time.Since(start) < 20*time.Millisecond {
					flops[t] += fmaProbe(iters)
				}
			})
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		var sum float64
		for _, f := range flops {
			sum += f
		}
		best = max(best, sum/el/1e9)
	}
	return best
}
