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

// TestGatherPackersRefuseHugeLd checks that the gather packers decline
// leading dimensions whose int32 lane offsets would overflow, leaving the
// panel to the portable loop.
func TestGatherPackersRefuseHugeLd(t *testing.T) {
	src, dst := make([]float32, 64), make([]float32, 32*4)
	if packA14(4, src, maxGatherLd+1, 14, dst) {
		t.Error("packA14 accepted ld > maxGatherLd")
	}
	if packB32(4, src, maxGatherLd+1, 32, dst) {
		t.Error("packB32 accepted ld > maxGatherLd")
	}
	for _, v := range dst {
		if v != 0 {
			t.Fatal("a refused pack wrote to dst")
		}
	}
}

// TestFMAPeak: the probe reports a plausible figure where it runs.
func TestFMAPeak(t *testing.T) {
	p := FMAPeak(1)
	if !cpu.avx512F {
		if p != 0 {
			t.Fatalf("FMAPeak = %v without AVX-512, want 0", p)
		}
		return
	}
	if p < 1 || p > 2000 {
		t.Fatalf("FMAPeak = %v GFLOP/s, implausible for one core", p)
	}
}
