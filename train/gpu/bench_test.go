//go:build cuda

package gpu

import (
	"fmt"
	"os"
	"testing"

	"gorgonia.org/cu"

	"github.com/intellect-node/intellect-node/kernels/cuda"
	"github.com/intellect-node/intellect-node/train"
)

// peakTFLOPs is the dense bf16 figure MFU is quoted against: an 8192³ bf16
// matmul measured ≈ 790 TFLOP/s on the H100/H200 machines (shared/MEASURED.md).
const peakTFLOPs = 790

// gemmBaseline measures, in the same run, the TFLOP/s of cuBLAS on an
// n×n×n bf16 matmul with fp32 accumulation: the best this device does on
// the operation the training step is made of.
func gemmBaseline(b *testing.B, d *cuda.Device, n int) float64 {
	var tflops float64
	err := d.Do(func() error {
		a, err := d.Alloc(int64(2 * n * n))
		if err != nil {
			return err
		}
		defer d.Free(a)
		c, err := d.Alloc(int64(2 * n * n))
		if err != nil {
			return err
		}
		defer d.Free(c)
		if err := d.Zero(a, int64(2*n*n)); err != nil {
			return err
		}
		m := cuda.Mat{T: cuda.BF16T, P: a, LD: n}
		out := cuda.Mat{T: cuda.BF16T, P: c, LD: n}
		for i := 0; i < 3; i++ { // warm up
			if err := d.Blas.Gemm(false, true, n, n, n, 1, m, m, 0, out); err != nil {
				return err
			}
		}
		tm, err := d.NewTimer()
		if err != nil {
			return err
		}
		defer tm.Close()
		const reps = 20
		tm.Start(d)
		for i := 0; i < reps; i++ {
			if err := d.Blas.Gemm(false, true, n, n, n, 1, m, m, 0, out); err != nil {
				return err
			}
		}
		ms, err := tm.Stop(d)
		tflops = 2 * float64(n) * float64(n) * float64(n) * reps / (ms / 1e3) / 1e12
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return tflops
}

// BenchmarkStep measures whole optimizer steps of the 150m and 1b presets
// (their default batch and sequence) and reports tokens/s, MFU against the
// nominal 790 TFLOP/s, the ratio to a same-run cuBLAS 8192³ baseline, and
// device memory. Set INTELLECT_BENCH_PRESETS to a comma list to choose.
func BenchmarkStep(b *testing.B) {
	presets := []string{"150m", "1b"}
	if s := os.Getenv("INTELLECT_BENCH_PRESETS"); s != "" {
		presets = splitComma(s)
	}
	for _, preset := range presets {
		b.Run("preset="+preset, func(b *testing.B) {
			o, err := train.DefaultOptions(preset)
			if err != nil {
				b.Fatal(err)
			}
			e, err := New(o, train.DefaultSource(), Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			base := gemmBaseline(b, e.Device(), 8192)
			if _, err := e.Step(); err != nil { // warm up (JIT of the PTX happened at Open)
				b.Fatal(err)
			}
			b.ResetTimer()
			var tokens int
			for i := 0; i < b.N; i++ {
				st, err := e.Step()
				if err != nil {
					b.Fatal(err)
				}
				tokens += st.Tokens
			}
			sec := b.Elapsed().Seconds()
			flops := o.Model.StepFLOPs(o.Batch*o.GradAccum, o.Seq) * float64(b.N)
			achieved := flops / sec / 1e12
			var free, total int64
			e.Device().Do(func() error { free, total, err = cu.MemInfo(); return err })
			b.ReportMetric(float64(tokens)/sec, "tok/s")
			b.ReportMetric(100*cuda.MFU(flops, sec, peakTFLOPs), "MFU%")
			b.ReportMetric(achieved/base, "x_gemm_baseline")
			b.ReportMetric(base, "gemm_TFLOP/s")
			b.ReportMetric(float64(e.MemUsed())/(1<<30), "alloc_GiB")
			b.ReportMetric(float64(total-free)/(1<<30), "used_GiB")
			fmt.Printf("%s: %.0f tok/s, %.1f model TFLOP/s = %.1f%% MFU of %d, %.2f× the same-run cuBLAS 8192³ (%.0f TFLOP/s); %.1f GiB allocated, %.1f GiB in use on the device\n",
				preset, float64(tokens)/sec, achieved, 100*cuda.MFU(flops, sec, peakTFLOPs), peakTFLOPs, achieved/base, base,
				float64(e.MemUsed())/(1<<30), float64(total-free)/(1<<30))
		})
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
