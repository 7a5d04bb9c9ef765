// Code written by hand: the element-wise loops of RMSNorm (rmsnorm.go). AVX
// multiplies, adds and subtracts without FMA, in the order of the Go loops;
// rmsDotAVX2 keeps eight float32 partial sums (lane j takes the elements
// i ≡ j mod 8) exactly as rmsDot3Go does.

#include "textflag.h"

// func rmsScaleAVX2(out, x, w *float32, n int, r float32)
// out[i] = (x[i] · r) · w[i] for i < n&^7.
TEXT ·rmsScaleAVX2(SB), NOSPLIT, $0-36
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS r+32(FP), Y15
scale:
	CMPQ CX, $8
	JL   scaledone
	VMULPS (SI), Y15, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  scale
scaledone:
	VZEROUPPER
	RET

// func rmsDotAVX2(dy, w, x *float32, n int, lanes *[8]float32)
// lanes[j] += (dy[i] · w[i]) · x[i] for i < n&^7, i ≡ j mod 8.
TEXT ·rmsDotAVX2(SB), NOSPLIT, $0-40
	MOVQ dy+0(FP), SI
	MOVQ w+8(FP), DX
	MOVQ x+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ lanes+32(FP), DI
	VMOVUPS (DI), Y1
dot:
	CMPQ CX, $8
	JL   dotdone
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VMULPS (R8), Y0, Y0
	VADDPS Y0, Y1, Y1
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	SUBQ $8, CX
	JMP  dot
dotdone:
	VMOVUPS Y1, (DI)
	VZEROUPPER
	RET

// func rmsDxAVX2(dx, w, dy, x *float32, n int, r, k float32)
// dx[i] += ((r · w[i]) · dy[i]) − k · x[i] for i < n&^7.
TEXT ·rmsDxAVX2(SB), NOSPLIT, $0-48
	MOVQ dx+0(FP), DI
	MOVQ w+8(FP), DX
	MOVQ dy+16(FP), SI
	MOVQ x+24(FP), R8
	MOVQ n+32(FP), CX
	VBROADCASTSS r+40(FP), Y14
	VBROADCASTSS k+44(FP), Y15
dx:
	CMPQ CX, $8
	JL   dxdone
	VMULPS (DX), Y14, Y0  // r · w
	VMULPS (SI), Y0, Y0   // · dy
	VMULPS (R8), Y15, Y1  // k · x
	VSUBPS Y1, Y0, Y0
	VADDPS (DI), Y0, Y0   // dx + (…)
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, R8
	SUBQ $8, CX
	JMP  dx
dxdone:
	VZEROUPPER
	RET

// func rmsDwAVX2(dw, dy, x *float32, n int, r float32)
// dw[i] += (dy[i] · x[i]) · r for i < n&^7.
TEXT ·rmsDwAVX2(SB), NOSPLIT, $0-36
	MOVQ dw+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS r+32(FP), Y15
dw:
	CMPQ CX, $8
	JL   dwdone
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VMULPS Y15, Y0, Y0
	VADDPS (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  dw
dwdone:
	VZEROUPPER
	RET
