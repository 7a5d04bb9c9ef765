package kernels

// ropeRowAVX2 is ropeRow's vector loop over the first n&^7 pairs
// (rope_amd64.s). Requires AVX.
//
//go:noescape
func ropeRowAVX2(a, b, c, s *float32, n int, sign float32)
