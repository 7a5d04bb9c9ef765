#include "textflag.h"

// Constants of expAffineAVX2 (float32 bit patterns).
DATA expConsts<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expConsts<>+4(SB)/4, $0x3f317200  // ln2 high part
DATA expConsts<>+8(SB)/4, $0x35bfbe8e  // ln2 low part
DATA expConsts<>+12(SB)/4, $0xc2ac0000 // -86 (clamp)
DATA expConsts<>+16(SB)/4, $0x42ac0000 // +86 (clamp)
DATA expConsts<>+20(SB)/4, $0x3ab60b61 // 1/720
DATA expConsts<>+24(SB)/4, $0x3c088889 // 1/120
DATA expConsts<>+28(SB)/4, $0x3d2aaaab // 1/24
DATA expConsts<>+32(SB)/4, $0x3e2aaaab // 1/6
DATA expConsts<>+36(SB)/4, $0x3f000000 // 1/2
DATA expConsts<>+40(SB)/4, $0x3f800000 // 1
DATA expConsts<>+44(SB)/4, $0xc2800000 // -64 (flush to 0 below)
GLOBL expConsts<>(SB), RODATA|NOPTR, $48

// func expAffineAVX2(dst, src *float32, n int, a, b float32)
// dst[i] = exp(a·src[i] + b) for i < n rounded down to a multiple of 8: the
// same algorithm as expf32 (argument clamped to [−86, 86], 0 below −64).
TEXT ·expAffineAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS a+24(FP), Y14
	VBROADCASTSS b+28(FP), Y15
	VBROADCASTSS expConsts<>+0(SB), Y5
	VBROADCASTSS expConsts<>+4(SB), Y6
	VBROADCASTSS expConsts<>+8(SB), Y7
	VBROADCASTSS expConsts<>+12(SB), Y8
	VBROADCASTSS expConsts<>+16(SB), Y9
	VBROADCASTSS expConsts<>+20(SB), Y10
	VBROADCASTSS expConsts<>+24(SB), Y11
	VBROADCASTSS expConsts<>+28(SB), Y12
	VBROADCASTSS expConsts<>+32(SB), Y13
loop:
	CMPQ CX, $8
	JL   done
	VMOVUPS (SI), Y0
	VFMADD213PS Y15, Y14, Y0  // x = a·src + b
	VBROADCASTSS expConsts<>+44(SB), Y3
	VCMPPS $5, Y3, Y0, Y4     // keep = !(x < −64): below, the result is 0
	VMAXPS Y8, Y0, Y0
	VMINPS Y9, Y0, Y0
	VMULPS Y5, Y0, Y1
	VROUNDPS $0, Y1, Y1       // k = round(x·log2e)
	VFNMADD231PS Y6, Y1, Y0   // r = x − k·ln2hi
	VFNMADD231PS Y7, Y1, Y0   // r −= k·ln2lo
	VMOVAPS Y10, Y2           // Horner: 1/720
	VFMADD213PS Y11, Y0, Y2   // ·r + 1/120
	VFMADD213PS Y12, Y0, Y2   // ·r + 1/24
	VFMADD213PS Y13, Y0, Y2   // ·r + 1/6
	VBROADCASTSS expConsts<>+36(SB), Y3
	VFMADD213PS Y3, Y0, Y2    // ·r + 1/2
	VBROADCASTSS expConsts<>+40(SB), Y3
	VFMADD213PS Y3, Y0, Y2    // ·r + 1
	VFMADD213PS Y3, Y0, Y2    // ·r + 1
	VCVTPS2DQ Y1, Y1
	VPSLLD $23, Y1, Y1
	VPADDD Y1, Y2, Y2         // ·2^k
	VANDPS Y4, Y2, Y2         // 0 where x < −64
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop
done:
	VZEROUPPER
	RET

// func maxLanesAVX2(x *float32, n int, lanes *[8]float32)
// lanes[j] = x[i] where x[i] > lanes[j], over i < n&^7 with i ≡ j mod 8, in
// order (a NaN never replaces a lane, as in max8's scalar loop).
TEXT ·maxLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VMOVUPS (DI), Y1
maxloop:
	CMPQ CX, $8
	JL   maxdone
	VMOVUPS (SI), Y0
	VMAXPS Y1, Y0, Y1 // (x > m) ? x : m
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  maxloop
maxdone:
	VMOVUPS Y1, (DI)
	VZEROUPPER
	RET

// func sumLanesAVX2(x *float32, n int, lanes *[8]float32)
// lanes[j] += x[i] over i < n&^7 with i ≡ j mod 8, in order.
TEXT ·sumLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VMOVUPS (DI), Y1
sumloop:
	CMPQ CX, $8
	JL   sumdone
	VADDPS (SI), Y1, Y1
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  sumloop
sumdone:
	VMOVUPS Y1, (DI)
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, a float32)
// x[i] *= a for i < n&^7.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Y15
scaleloop:
	CMPQ CX, $8
	JL   scaledone
	VMULPS (SI), Y15, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  scaleloop
scaledone:
	VZEROUPPER
	RET
