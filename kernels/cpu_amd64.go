package kernels

// cpuid executes the CPUID instruction with the given leaf (EAX) and subleaf (ECX).
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

// xgetbv reads extended control register XCR0 (requires OSXSAVE).
func xgetbv() (eax, edx uint32)

// detectCPU reads CPUID and XCR0 and reports which vector extensions both the
// processor and the operating system (register state saved on context switch)
// support.
func detectCPU() cpuFeatures {
	var f cpuFeatures
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 1 {
		return f
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		fmaBit     = 1 << 12
		osxsaveBit = 1 << 27
		avxBit     = 1 << 28
	)
	if ecx1&osxsaveBit == 0 || ecx1&avxBit == 0 {
		return f
	}
	xcr0, _ := xgetbv()
	const (
		xmmYmmState = 1<<1 | 1<<2        // SSE and AVX state
		zmmState    = 1<<5 | 1<<6 | 1<<7 // opmask, ZMM0-15 upper halves, ZMM16-31
	)
	osAVX := xcr0&xmmYmmState == xmmYmmState
	osAVX512 := osAVX && xcr0&zmmState == zmmState
	if maxLeaf < 7 || !osAVX {
		return f
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const (
		avx2Bit    = 1 << 5
		avx512FBit = 1 << 16
	)
	f.avx2FMA = ecx1&fmaBit != 0 && ebx7&avx2Bit != 0
	f.avx512F = f.avx2FMA && osAVX512 && ebx7&avx512FBit != 0
	return f
}
