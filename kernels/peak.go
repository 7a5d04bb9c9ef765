package kernels

import (
	"runtime"
	"time"
)

// FMAPeak measures the float32 fused-multiply-add throughput of one core, in
// GFLOP/s: 24 independent 16-lane FMA chains on a locked thread, the best of
// five 10 ms rounds. It is the ceiling the micro-kernels are measured
// against, and lets a benchmark state a speed as a fraction of the machine it
// ran on (machines of the same kind differ by 2× here: MEASURED's Zen 5 at
// ≈ 235 per core, an Intel VM at ≈ 118–128). It returns 0 where no probe
// exists (no AVX-512).
func FMAPeak() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if fmaProbe(1) == 0 {
		return 0
	}
	const iters = 20000 // ≈ 0.1 ms per call
	best := 0.0
	for range 5 {
		var flops float64
		start := time.Now()
		for time.Since(start) < 10*time.Millisecond {
			flops += fmaProbe(iters)
		}
		best = max(best, flops/time.Since(start).Seconds()/1e9)
	}
	return best
}
