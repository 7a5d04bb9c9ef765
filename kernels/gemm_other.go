//go:build !amd64

package kernels

// archGemmKernels returns no assembly micro-kernels on this architecture.
func archGemmKernels(cpuFeatures) []*gemmKernel { return nil }
