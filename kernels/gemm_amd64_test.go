package kernels

import "testing"

// BenchmarkGemmFMAPeak measures the FMA throughput of one core, the ceiling
// for BenchmarkGemmMicroKernel; run both in one go to get a ratio.
func BenchmarkGemmFMAPeak(b *testing.B) {
	if !cpu.avx512F {
		b.Skip("no AVX-512")
	}
	const iters = 1000
	reportCPU(b, 768*iters, func() { fmaPeakAVX512(iters) })
}
