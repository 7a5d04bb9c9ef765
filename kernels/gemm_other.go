//go:build !amd64

package kernels

// archGemmKernels returns no assembly micro-kernels on this architecture.
func archGemmKernels(cpuFeatures) []*gemmKernel { return nil }

// fmaProbe has no probe on this architecture.
func fmaProbe(int) float64 { return 0 }
