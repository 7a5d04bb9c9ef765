//go:build !amd64

package kernels

func adamwAVX2(p, g, m, v *float32, n int, h *adamwHyper) {}

func sumSquaresAVX2(x *float32, n int, lanes *[8]float64) {}
