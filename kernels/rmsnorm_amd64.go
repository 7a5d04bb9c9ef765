package kernels

// The vector loops of rmsnorm.go over the first n&^7 elements
// (rmsnorm_amd64.s). Require AVX.

//go:noescape
func rmsScaleAVX2(out, x, w *float32, n int, r float32)

//go:noescape
func rmsDotAVX2(dy, w, x *float32, n int, lanes *[8]float32)

//go:noescape
func rmsDxAVX2(dx, w, dy, x *float32, n int, r, k float32)

//go:noescape
func rmsDwAVX2(dw, dy, x *float32, n int, r float32)
