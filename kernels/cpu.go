package kernels

// cpuFeatures lists the vector extensions the matrix kernels can use on this
// machine: present in the processor and enabled by the operating system.
type cpuFeatures struct {
	avx2FMA bool // AVX2 and FMA3 (256-bit)
	avx512F bool // AVX-512 Foundation (512-bit, 32 vector registers)
}

// cpu holds the features detected once at start-up.
var cpu = detectCPU()
