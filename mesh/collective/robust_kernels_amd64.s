#include "textflag.h"

// AVX2 twins of the robust rule's float64 loops (robust_kernels.go); the Go
// loops are the reference they are tested against, bit for bit. Each
// keeps the Go loop's operations and their order per value: distNorms4AVX2
// holds four members' sums in the lanes of one register (each lane still
// sums its member's values in order), stepAVX2 four coordinates (each lane
// still adds the members' terms in order).

// func distNorms4AVX2(s, q *[4]float64, v *float64, t64 *[256]float64, c0, c1, c2, c3 *byte, n int)
// For t < n, x_j = t64[j][c_j[t]] (the four tables follow each other):
// q[j] += x_j·x_j; s[j] += (x_j − v[t])².
TEXT ·distNorms4AVX2(SB), NOSPLIT, $0-72
	MOVQ v+16(FP), DI
	MOVQ t64+24(FP), SI
	MOVQ c0+32(FP), R8
	MOVQ c1+40(FP), R9
	MOVQ c2+48(FP), R10
	MOVQ c3+56(FP), R11
	MOVQ n+64(FP), CX
	MOVQ s+0(FP), AX
	VMOVUPD (AX), Y0 // the distances' sums
	MOVQ q+8(FP), AX
	VMOVUPD (AX), Y5 // the norms' sums
	XORQ DX, DX

dnloop:
	CMPQ DX, CX
	JGE  dndone
	MOVBLZX (R8)(DX*1), AX
	MOVBLZX (R9)(DX*1), BX
	MOVBLZX (R10)(DX*1), R12
	MOVBLZX (R11)(DX*1), R13
	VMOVSD  (SI)(AX*8), X1
	VMOVHPD 2048(SI)(BX*8), X1, X1
	VMOVSD  4096(SI)(R12*8), X2
	VMOVHPD 6144(SI)(R13*8), X2, X2
	VINSERTF128 $1, X2, Y1, Y1 // x
	VBROADCASTSD (DI)(DX*8), Y3
	VMULPD Y1, Y1, Y4
	VADDPD Y4, Y5, Y5
	VSUBPD Y3, Y1, Y2
	VMULPD Y2, Y2, Y2
	VADDPD Y2, Y0, Y0
	INCQ DX
	JMP  dnloop

dndone:
	MOVQ s+0(FP), AX
	VMOVUPD Y0, (AX)
	MOVQ q+8(FP), AX
	VMOVUPD Y5, (AX)
	VZEROUPPER
	RET

// func stepAVX2(v *float64, out *float32, t64 *[256]float64, codes **byte, coef *float64, a, n int, sc *stepScan)
// For t < n (a multiple of 4): acc = Σ_r coef[r]·(t64[r][codes[r][t]] − v[t])
// over r = 0..a−1 in order, from +0; v[t] += acc; out[t] = float32(v[t]);
// and scanChunk's pass over out: sc.s[t mod 4] += out[t], from +0, and
// per lane t mod 4 the first least and greatest out[t] (sc.mn, sc.mx,
// from ±Inf).
TEXT ·stepAVX2(SB), NOSPLIT, $0-64
	MOVQ v+0(FP), DI
	MOVQ out+8(FP), SI
	MOVQ t64+16(FP), R8
	MOVQ codes+24(FP), R9
	MOVQ coef+32(FP), R10
	MOVQ a+40(FP), R11
	MOVQ n+48(FP), CX
	VXORPD Y7, Y7, Y7 // Σ out per lane
	MOVL $0x7f800000, AX // +Inf
	MOVD AX, X8
	VPBROADCASTD X8, X8 // least per lane
	MOVL $0xff800000, AX // −Inf
	MOVD AX, X9
	VPBROADCASTD X9, X9 // greatest per lane
	XORQ DX, DX

stloop:
	CMPQ DX, CX
	JGE  stdone
	VXORPD  Y0, Y0, Y0       // acc
	VMOVUPD (DI)(DX*8), Y5   // v[t..t+3]
	XORQ BX, BX
	MOVQ R8, R12

strloop:
	CMPQ BX, R11
	JGE  strdone
	MOVQ (R9)(BX*8), R13
	MOVBLZX (R13)(DX*1), AX
	VMOVSD  (R12)(AX*8), X1
	MOVBLZX 1(R13)(DX*1), AX
	VMOVHPD (R12)(AX*8), X1, X1
	MOVBLZX 2(R13)(DX*1), AX
	VMOVSD  (R12)(AX*8), X2
	MOVBLZX 3(R13)(DX*1), AX
	VMOVHPD (R12)(AX*8), X2, X2
	VINSERTF128 $1, X2, Y1, Y1
	VSUBPD Y5, Y1, Y1
	VBROADCASTSD (R10)(BX*8), Y3
	VMULPD Y3, Y1, Y1
	VADDPD Y1, Y0, Y0
	ADDQ $2048, R12
	INCQ BX
	JMP  strloop

strdone:
	VADDPD Y0, Y5, Y5
	VMOVUPD Y5, (DI)(DX*8)
	VCVTPD2PSY Y5, X5
	VMOVUPS X5, (SI)(DX*4)
	VMINPS X8, X5, X8 // out < least ? out : least
	VMAXPS X9, X5, X9 // out > greatest ? out : greatest
	VCVTPS2PD X5, Y6
	VADDPD Y6, Y7, Y7
	ADDQ $4, DX
	JMP  stloop

stdone:
	MOVQ sc+56(FP), AX
	VMOVUPD Y7, (AX)
	VMOVUPS X8, 32(AX)
	VMOVUPS X9, 48(AX)
	VZEROUPPER
	RET

// func medianNetAVX2(v *[medianBlock]float64, kt *int32, codes **byte, a int, cs *int32, ncs, p int, rows *int32)
// medianRows for any a, 8 coordinates at a time: rows[r] (8 keys) loaded
// from kt[r·256 + codes[r][t]], then for each comparator j the line at byte
// offset cs[2j] of rows gets the least, the one at cs[2j+1] the greatest
// (for a comparator of medianNetwork that needs one output only, the other
// line is not read again), then v = float64(keyFloat(the line at p)).
TEXT ·medianNetAVX2(SB), NOSPLIT, $0-64
	MOVQ v+0(FP), DI
	MOVQ kt+8(FP), SI
	MOVQ codes+16(FP), DX
	MOVQ a+24(FP), R8
	MOVQ cs+32(FP), R9
	MOVQ ncs+40(FP), R10
	MOVQ rows+56(FP), R12
	XORQ CX, CX

mnloop:
	CMPQ CX, $256
	JGE  mndone
	XORQ BX, BX

mngather:
	CMPQ BX, R8
	JGE  mgdone
	MOVQ (DX)(BX*8), R13
	ADDQ CX, R13 // codes[r][t:]
	MOVQ BX, R11
	SHLQ $10, R11
	ADDQ SI, R11 // kt[r·256:]
	MOVBLZX (R13), AX
	VMOVD (R11)(AX*4), X0
	MOVBLZX 1(R13), AX
	VPINSRD $1, (R11)(AX*4), X0, X0
	MOVBLZX 2(R13), AX
	VPINSRD $2, (R11)(AX*4), X0, X0
	MOVBLZX 3(R13), AX
	VPINSRD $3, (R11)(AX*4), X0, X0
	MOVBLZX 4(R13), AX
	VMOVD (R11)(AX*4), X1
	MOVBLZX 5(R13), AX
	VPINSRD $1, (R11)(AX*4), X1, X1
	MOVBLZX 6(R13), AX
	VPINSRD $2, (R11)(AX*4), X1, X1
	MOVBLZX 7(R13), AX
	VPINSRD $3, (R11)(AX*4), X1, X1
	VINSERTI128 $1, X1, Y0, Y0
	MOVQ BX, R13
	SHLQ $5, R13
	VMOVDQU Y0, (R12)(R13*1)
	INCQ BX
	JMP  mngather

mgdone:
	XORQ BX, BX

mncmp:
	CMPQ BX, R10
	JGE  mncdone
	MOVLQSX (R9)(BX*8), AX
	MOVLQSX 4(R9)(BX*8), R13
	VMOVDQU (R12)(AX*1), Y0
	VMOVDQU (R12)(R13*1), Y1
	VPMINSD Y1, Y0, Y2
	VPMAXSD Y1, Y0, Y1
	VMOVDQU Y2, (R12)(AX*1)
	VMOVDQU Y1, (R12)(R13*1)
	INCQ BX
	JMP  mncmp

mncdone:
	MOVQ p+48(FP), R11
	SHLQ $5, R11
	VMOVDQU (R12)(R11*1), Y0
	VPSRAD $31, Y0, Y1
	VPSRLD $1, Y1, Y1
	VPXOR Y0, Y1, Y0
	VCVTPS2PD X0, Y1
	VMOVUPD Y1, (DI)(CX*8)
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VMOVUPD Y2, 32(DI)(CX*8)
	ADDQ $8, CX
	JMP  mnloop

mndone:
	VZEROUPPER
	RET
