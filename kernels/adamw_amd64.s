#include "textflag.h"

// func adamwAVX2(p, grad, m, v *float32, n int, h *adamwHyper)
// Same operations, same order, no FMA as adamwGo:
//   gi = g·gscale; mi = β1·m + c1·gi; vi = β2·v + (c2·gi)·gi
//   den = sqrt(vi·ib2) + eps; p = p − lr·((mi·ib1)/den + wd·p)
TEXT ·adamwAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ h+40(FP), AX
	VBROADCASTSS 0(AX), Y6   // beta1
	VBROADCASTSS 4(AX), Y7   // c1
	VBROADCASTSS 8(AX), Y8   // beta2
	VBROADCASTSS 12(AX), Y9  // c2
	VBROADCASTSS 16(AX), Y10 // ib1
	VBROADCASTSS 20(AX), Y11 // ib2
	VBROADCASTSS 24(AX), Y12 // eps
	VBROADCASTSS 28(AX), Y13 // lr
	VBROADCASTSS 32(AX), Y14 // wd
	VBROADCASTSS 36(AX), Y15 // gscale
loop:
	CMPQ CX, $8
	JL   done
	VMULPS (SI), Y15, Y0     // gi
	VMULPS (R8), Y6, Y1      // β1·m
	VMULPS Y0, Y7, Y2        // c1·gi
	VADDPS Y2, Y1, Y1        // mi
	VMOVUPS Y1, (R8)
	VMULPS (R9), Y8, Y2      // β2·v
	VMULPS Y0, Y9, Y3        // c2·gi
	VMULPS Y0, Y3, Y3        // ·gi
	VADDPS Y3, Y2, Y2        // vi
	VMOVUPS Y2, (R9)
	VMULPS Y11, Y2, Y2       // vi·ib2
	VSQRTPS Y2, Y2
	VADDPS Y12, Y2, Y2       // den
	VMULPS Y10, Y1, Y1       // mi·ib1
	VDIVPS Y2, Y1, Y1        // /den
	VMOVUPS (DI), Y4         // p
	VMULPS Y4, Y14, Y5       // wd·p
	VADDPS Y5, Y1, Y1
	VMULPS Y1, Y13, Y1       // lr·(...)
	VSUBPS Y1, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	SUBQ $8, CX
	JMP  loop
done:
	VZEROUPPER
	RET

// func sumSquaresAVX2(x *float32, n int, lanes *[8]float64)
// Lanes 0–3 in Y0, 4–7 in Y1: convert to float64, multiply, add (no FMA),
// the same operations as sumSquaresBlock's Go loop.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
sqloop:
	CMPQ CX, $8
	JL   sqdone
	VCVTPS2PD (SI), Y2
	VCVTPS2PD 16(SI), Y3
	VMULPD Y2, Y2, Y2
	VMULPD Y3, Y3, Y3
	VADDPD Y2, Y0, Y0
	VADDPD Y3, Y1, Y1
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  sqloop
sqdone:
	VMOVUPD Y0, (DI)
	VMOVUPD Y1, 32(DI)
	VZEROUPPER
	RET
