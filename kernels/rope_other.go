//go:build !amd64

package kernels

func ropeRowAVX2(a, b, c, s *float32, n int, sign float32) { panic("unreachable") }
