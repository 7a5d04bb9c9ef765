//go:build !amd64

package kernels

// detectCPU reports no vector extensions on architectures without assembly kernels.
func detectCPU() cpuFeatures { return cpuFeatures{} }
