//go:build !amd64

package kernels

// expAffine sets dst[i] = exp(a·src[i] + b) over len(src) (dst may alias src).
func expAffine(dst, src []float32, a, b float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf32(a*v + b)
	}
}
