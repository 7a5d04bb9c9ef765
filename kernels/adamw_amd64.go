package kernels

// adamwAVX2 runs adamwGo's arithmetic eight elements at a time over the first
// n&^7 elements. Defined in adamw_amd64.s.
//
//go:noescape
func adamwAVX2(p, grad, m, v *float32, n int, h *adamwHyper)
