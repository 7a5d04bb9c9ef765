// Code written by hand: the rotation loop of RoPE (rope.go). AVX multiplies,
// adds and subtracts without FMA, in the order of ropeRow's Go loop.

#include "textflag.h"

// func ropeRowAVX2(a, b, c, s *float32, n int, sign float32)
// For i < n&^7, with si = sign·s[i]:
// a[i], b[i] = a[i]·c[i] − b[i]·si, b[i]·c[i] + a[i]·si.
TEXT ·ropeRowAVX2(SB), NOSPLIT, $0-44
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ c+16(FP), DX
	MOVQ s+24(FP), R8
	MOVQ n+32(FP), CX
	VBROADCASTSS sign+40(FP), Y15
rot:
	CMPQ CX, $8
	JL   rotdone
	VMOVUPS (DI), Y0         // a
	VMOVUPS (SI), Y1         // b
	VMOVUPS (DX), Y2         // c
	VMULPS (R8), Y15, Y3     // si = sign·s
	VMULPS Y2, Y0, Y4        // a·c
	VMULPS Y3, Y1, Y5        // b·si
	VSUBPS Y5, Y4, Y4        // a·c − b·si
	VMULPS Y2, Y1, Y6        // b·c
	VMULPS Y3, Y0, Y7        // a·si
	VADDPS Y7, Y6, Y6        // b·c + a·si
	VMOVUPS Y4, (DI)
	VMOVUPS Y6, (SI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	SUBQ $8, CX
	JMP  rot
rotdone:
	VZEROUPPER
	RET
