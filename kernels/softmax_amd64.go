package kernels

// expAffineAVX2 sets dst[i] = exp(a·src[i] + b) for i < n&^7. Defined in softmax_amd64.s.
//
//go:noescape
func expAffineAVX2(dst, src *float32, n int, a, b float32)

// expAffine sets dst[i] = exp(a·src[i] + b) over len(src) (dst may alias src),
// eight at a time with AVX2+FMA where available, with the argument clamped to
// [−86, 86] there; the tail and other machines use expf32.
func expAffine(dst, src []float32, a, b float32) {
	dst = dst[:len(src)]
	i := 0
	if useVecAttention && len(src) >= 8 {
		expAffineAVX2(&dst[0], &src[0], len(src), a, b)
		i = len(src) &^ 7
	}
	for ; i < len(src); i++ {
		dst[i] = expf32(a*src[i] + b)
	}
}

// maxLanesAVX2, sumLanesAVX2 and scaleAVX2 are the vector loops of max8,
// sum8 and scale32 over the first n&^7 elements. Require AVX.
//
//go:noescape
func maxLanesAVX2(x *float32, n int, lanes *[8]float32)

//go:noescape
func sumLanesAVX2(x *float32, n int, lanes *[8]float32)

//go:noescape
func scaleAVX2(x *float32, n int, a float32)
