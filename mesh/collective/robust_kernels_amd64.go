package collective

//go:noescape
func distNorms4AVX2(s, q *[4]float64, v *float64, t64 *[256]float64, c0, c1, c2, c3 *byte, n int)

//go:noescape
func stepAVX2(v *float64, out *float32, t64 *[256]float64, codes **byte, coef *float64, a, n int, sc *stepScan)

//go:noescape
func medianNetAVX2(v *[medianBlock]float64, kt *int32, codes **byte, a int, cs *int32, ncs, p int, rows *int32)
