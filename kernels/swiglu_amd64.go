package kernels

// swigluFwdAVX2 and swigluBwdAVX2 are the vector loops of swigluFwdRow and
// swigluBwdRow over the first n&^7 elements (swiglu_amd64.s). Require AVX.
//
//go:noescape
func swigluFwdAVX2(out, gate, u *float32, n int)

//go:noescape
func swigluBwdAVX2(dg, du, dy, gate, u *float32, n int)
