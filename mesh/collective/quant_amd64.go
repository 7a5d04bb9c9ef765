package collective

// useAVX2 selects the AVX2 loops of quant_amd64.s; tests switch it off to
// run the Go references.
var useAVX2 = hasAVX2()

// hasAVX2 reports whether the CPU has AVX2 and the OS saves YMM registers.
func hasAVX2() bool {
	_, _, c1, _ := quantCPUID(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if c1&osxsave == 0 || c1&avx == 0 {
		return false
	}
	if xcr0, _ := quantXGETBV(); xcr0&6 != 6 { // XMM and YMM state
		return false
	}
	_, b7, _, _ := quantCPUID(7, 0)
	return b7&(1<<5) != 0
}

//go:noescape
func quantCPUID(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

//go:noescape
func quantXGETBV() (eax, edx uint32)

//go:noescape
func sqrtCodesAVX2(codes *byte, src *float32, n int, mu, invR float32)

//go:noescape
func prepScanAVX2(x, res *float32, n int, scale float32, acc *scanAcc)

//go:noescape
func prepAddScanAVX2(x, res *float32, t *[256]float32, codes *byte, n int, scale float32, acc *scanAcc)

//go:noescape
func decodeSetAVX2(dst *float32, t *[256]float32, codes *byte, n int)
