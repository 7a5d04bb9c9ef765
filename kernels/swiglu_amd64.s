// Code written by hand: the element-wise loops of SwiGLU (swiglu.go). Plain
// AVX adds, multiplies and divides, no FMA, in the order of the Go loops, so
// both give the same bits.

#include "textflag.h"

DATA swigluOne<>+0(SB)/4, $0x3f800000 // 1
GLOBL swigluOne<>(SB), RODATA|NOPTR, $4

// func swigluFwdAVX2(out, gate, u *float32, n int)
// For i < n&^7, with out[i] holding exp(−g[i]): out[i] = g[i] / (1 + out[i]) · u[i].
TEXT ·swigluFwdAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ u+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS swigluOne<>+0(SB), Y15
fwd:
	CMPQ CX, $8
	JL   fwddone
	VADDPS (DI), Y15, Y0  // 1 + e
	VMOVUPS (SI), Y1
	VDIVPS Y0, Y1, Y1     // g / (1 + e)
	VMULPS (DX), Y1, Y1   // · u
	VMOVUPS Y1, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  fwd
fwddone:
	VZEROUPPER
	RET

// func swigluBwdAVX2(dg, du, dy, gate, u *float32, n int)
// For i < n&^7, with dg[i] holding exp(−g[i]):
//	s = 1 / (1 + dg[i]);  du[i] = dy[i] · (g[i] · s)
//	dg[i] = ((dy[i] · u[i]) · s) · (1 + g[i] · (1 − s))
TEXT ·swigluBwdAVX2(SB), NOSPLIT, $0-48
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), R8
	MOVQ dy+16(FP), SI
	MOVQ gate+24(FP), DX
	MOVQ u+32(FP), R9
	MOVQ n+40(FP), CX
	VBROADCASTSS swigluOne<>+0(SB), Y15
bwd:
	CMPQ CX, $8
	JL   bwddone
	VADDPS (DI), Y15, Y0  // 1 + e
	VDIVPS Y0, Y15, Y0    // s = 1 / (1 + e)
	VMOVUPS (DX), Y1      // g
	VMOVUPS (SI), Y2      // dy
	VMULPS Y0, Y1, Y3     // silu = g · s
	VMULPS Y3, Y2, Y3     // du = dy · silu
	VMOVUPS Y3, (R8)
	VMULPS (R9), Y2, Y4   // dy · u
	VMULPS Y0, Y4, Y4     // · s
	VSUBPS Y0, Y15, Y5    // 1 − s
	VMULPS Y5, Y1, Y5     // g · (1 − s)
	VADDPS Y15, Y5, Y5    // 1 + g · (1 − s)
	VMULPS Y5, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R9
	SUBQ $8, CX
	JMP  bwd
bwddone:
	VZEROUPPER
	RET
