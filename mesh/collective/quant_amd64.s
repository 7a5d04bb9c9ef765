#include "textflag.h"

// AVX2 twins of the int8 codec's loops (quant_amd64.go); the Go loops in
// quant.go are the reference they are tested against, bit for bit.

// func quantCPUID(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·quantCPUID(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func quantXGETBV() (eax, edx uint32)
TEXT ·quantXGETBV(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// func sqrtCodesAVX2(codes *byte, src *float32, n int, mu, invR float32)
// codes[i] = int32(float32(sign(d)·√min(|d|, 1))·127.5 + 128), d = (src[i]−mu)·invR,
// for n a multiple of 8.
TEXT ·sqrtCodesAVX2(SB), NOSPLIT, $0-32
	MOVQ codes+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS mu+24(FP), Y0
	VBROADCASTSS invR+28(FP), Y1
	MOVL $0x7fffffff, AX
	MOVD AX, X2
	VPBROADCASTD X2, Y2
	MOVL $0x80000000, AX
	MOVD AX, X3
	VPBROADCASTD X3, Y3
	MOVL $0x3f800000, AX // 1.0
	MOVD AX, X4
	VPBROADCASTD X4, Y4
	MOVL $0x42ff0000, AX // 127.5
	MOVD AX, X5
	VPBROADCASTD X5, Y5
	MOVL $0x43000000, AX // 128.0
	MOVD AX, X6
	VPBROADCASTD X6, Y6

sqloop:
	CMPQ CX, $8
	JLT  sqdone
	VMOVUPS (SI), Y7
	VSUBPS  Y0, Y7, Y7
	VMULPS  Y1, Y7, Y7  // d
	VANDPS  Y2, Y7, Y8  // |d|
	VMINPS  Y4, Y8, Y8  // min(|d|, 1)
	VSQRTPS Y8, Y8
	VANDPS  Y3, Y7, Y9  // sign of d
	VORPS   Y9, Y8, Y8
	VMULPS  Y5, Y8, Y8
	VADDPS  Y6, Y8, Y8
	VCVTTPS2DQ Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPACKUSDW X9, X8, X8
	VPACKUSWB X8, X8, X8
	MOVQ X8, (DI)
	ADDQ $32, SI
	ADDQ $8, DI
	SUBQ $8, CX
	JMP  sqloop

sqdone:
	VZEROUPPER
	RET

// func prepScanAVX2(x, res *float32, n int, scale float32, acc *scanAcc)
// x[i] = x[i]·scale (+ res[i] if res != nil), for n a multiple of 8, folding
// x[i] into acc's lane-wise min, max and float64 sums.
TEXT ·prepScanAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), DI
	MOVQ res+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y0
	MOVQ acc+32(FP), DX
	VMOVUPS 0(DX), Y1   // min
	VMOVUPS 32(DX), Y2  // max
	VMOVUPD 64(DX), Y3  // sum lanes 0-3
	VMOVUPD 96(DX), Y4  // sum lanes 4-7

psloop:
	CMPQ CX, $8
	JLT  psdone
	VMOVUPS (DI), Y7
	VMULPS  Y0, Y7, Y7
	TESTQ   SI, SI
	JEQ     psnores
	VADDPS  (SI), Y7, Y7
	ADDQ    $32, SI

psnores:
	VMOVUPS Y7, (DI)
	VMINPS  Y7, Y1, Y1
	VMAXPS  Y7, Y2, Y2
	VCVTPS2PD X7, Y8
	VEXTRACTF128 $1, Y7, X9
	VCVTPS2PD X9, Y9
	VADDPD  Y8, Y3, Y3
	VADDPD  Y9, Y4, Y4
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  psloop

psdone:
	VMOVUPS Y1, 0(DX)
	VMOVUPS Y2, 32(DX)
	VMOVUPD Y3, 64(DX)
	VMOVUPD Y4, 96(DX)
	VZEROUPPER
	RET

// func prepAddScanAVX2(x, res *float32, t *[256]float32, codes *byte, n int, scale float32, acc *scanAcc)
// x[i] = x[i]·scale (+ res[i]) + t[codes[i]], for n a multiple of 8, folded
// into acc like prepScanAVX2.
TEXT ·prepAddScanAVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), DI
	MOVQ res+8(FP), SI
	MOVQ t+16(FP), BX
	MOVQ codes+24(FP), R8
	MOVQ n+32(FP), CX
	VBROADCASTSS scale+40(FP), Y0
	MOVQ acc+48(FP), DX
	VMOVUPS 0(DX), Y1
	VMOVUPS 32(DX), Y2
	VMOVUPD 64(DX), Y3
	VMOVUPD 96(DX), Y4

paloop:
	CMPQ CX, $8
	JLT  padone
	VPMOVZXBD (R8), Y10
	VPCMPEQD Y11, Y11, Y11
	VGATHERDPS Y11, (BX)(Y10*4), Y12
	VMOVUPS (DI), Y7
	VMULPS  Y0, Y7, Y7
	TESTQ   SI, SI
	JEQ     panores
	VADDPS  (SI), Y7, Y7
	ADDQ    $32, SI

panores:
	VADDPS  Y12, Y7, Y7
	VMOVUPS Y7, (DI)
	VMINPS  Y7, Y1, Y1
	VMAXPS  Y7, Y2, Y2
	VCVTPS2PD X7, Y8
	VEXTRACTF128 $1, Y7, X9
	VCVTPS2PD X9, Y9
	VADDPD  Y8, Y3, Y3
	VADDPD  Y9, Y4, Y4
	ADDQ $32, DI
	ADDQ $8, R8
	SUBQ $8, CX
	JMP  paloop

padone:
	VMOVUPS Y1, 0(DX)
	VMOVUPS Y2, 32(DX)
	VMOVUPD Y3, 64(DX)
	VMOVUPD Y4, 96(DX)
	VZEROUPPER
	RET

// func decodeSetAVX2(dst *float32, t *[256]float32, codes *byte, n int)
// dst[i] = t[codes[i]], for n a multiple of 8.
TEXT ·decodeSetAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ t+8(FP), BX
	MOVQ codes+16(FP), R8
	MOVQ n+24(FP), CX

dsloop:
	CMPQ CX, $8
	JLT  dsdone
	VPMOVZXBD (R8), Y10
	VPCMPEQD Y11, Y11, Y11
	VGATHERDPS Y11, (BX)(Y10*4), Y12
	VMOVUPS Y12, (DI)
	ADDQ $32, DI
	ADDQ $8, R8
	SUBQ $8, CX
	JMP  dsloop

dsdone:
	VZEROUPPER
	RET
