//go:build !amd64

package kernels

// expAffine sets dst[i] = exp(a·src[i] + b) over len(src) (dst may alias src).
func expAffine(dst, src []float32, a, b float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf32(a*v + b)
	}
}

func maxLanesAVX2(x *float32, n int, lanes *[8]float32) { panic("unreachable") }
func sumLanesAVX2(x *float32, n int, lanes *[8]float32) { panic("unreachable") }
func scaleAVX2(x *float32, n int, a float32)            { panic("unreachable") }
