package kernels

// adamwAVX2 runs adamwGo's arithmetic eight elements at a time over the first
// n&^7 elements. Defined in adamw_amd64.s.
//
//go:noescape
func adamwAVX2(p, grad, m, v *float32, n int, h *adamwHyper)

// sumSquaresAVX2 sets lanes[j] = Σ x[i]² over i < n&^7, i ≡ j (mod 8), in
// float64. Defined in adamw_amd64.s.
//
//go:noescape
func sumSquaresAVX2(x *float32, n int, lanes *[8]float64)
