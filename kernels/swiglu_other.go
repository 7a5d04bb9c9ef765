//go:build !amd64

package kernels

func swigluFwdAVX2(out, gate, u *float32, n int)        { panic("unreachable") }
func swigluBwdAVX2(dg, du, dy, gate, u *float32, n int) { panic("unreachable") }
