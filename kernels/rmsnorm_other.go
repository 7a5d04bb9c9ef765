//go:build !amd64

package kernels

func rmsScaleAVX2(out, x, w *float32, n int, r float32)      { panic("unreachable") }
func rmsDotAVX2(dy, w, x *float32, n int, lanes *[8]float32) { panic("unreachable") }
func rmsDxAVX2(dx, w, dy, x *float32, n int, r, k float32)   { panic("unreachable") }
func rmsDwAVX2(dw, dy, x *float32, n int, r float32)         { panic("unreachable") }
