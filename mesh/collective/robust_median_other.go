//go:build !amd64

package collective

// medianAVX2 is empty off amd64: the Go kernels of robust_median.go run.
var medianAVX2 [0]func(v *[medianBlock]float64, kt *int32, codes **byte)
