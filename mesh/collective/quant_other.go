//go:build !amd64

package collective

// useAVX2 is false off amd64: the Go loops of quant.go run.
var useAVX2 = false

func sqrtCodesAVX2(codes *byte, src *float32, n int, mu, invR float32) { panic("mesh: no AVX2") }

func prepScanAVX2(x, res *float32, n int, scale float32, acc *scanAcc) { panic("mesh: no AVX2") }

func prepAddScanAVX2(x, res *float32, t *[256]float32, codes *byte, n int, scale float32, acc *scanAcc) {
	panic("mesh: no AVX2")
}

func decodeSetAVX2(dst *float32, t *[256]float32, codes *byte, n int) { panic("mesh: no AVX2") }
