// Packing routines for the AVX-512 SGEMM path: gathers that transpose rows
// of A (or of Bᵀ) into the micro-kernel's panels. Written by hand.

#include "textflag.h"

// gemmIota holds the int32 lane numbers 0..15.
DATA gemmIota<>+0(SB)/4, $0
DATA gemmIota<>+4(SB)/4, $1
DATA gemmIota<>+8(SB)/4, $2
DATA gemmIota<>+12(SB)/4, $3
DATA gemmIota<>+16(SB)/4, $4
DATA gemmIota<>+20(SB)/4, $5
DATA gemmIota<>+24(SB)/4, $6
DATA gemmIota<>+28(SB)/4, $7
DATA gemmIota<>+32(SB)/4, $8
DATA gemmIota<>+36(SB)/4, $9
DATA gemmIota<>+40(SB)/4, $10
DATA gemmIota<>+44(SB)/4, $11
DATA gemmIota<>+48(SB)/4, $12
DATA gemmIota<>+52(SB)/4, $13
DATA gemmIota<>+56(SB)/4, $14
DATA gemmIota<>+60(SB)/4, $15
GLOBL gemmIota<>(SB), RODATA|NOPTR, $64

// func packRows14AVX512(kc int, a *float32, lda int, dst *float32)
//
// dst[p*14+r] = a[r*lda+p] for r < 14, p < kc ≥ 1. Requires 15·lda < 2³¹.
TEXT ·packRows14AVX512(SB), NOSPLIT, $0-32
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), AX
	MOVQ dst+24(FP), DI
	VPBROADCASTD AX, Z30
	VPMULLD gemmIota<>(SB), Z30, Z31 // Z31 = r·lda
	MOVL $0x3fff, BX
	KMOVW BX, K7                     // 14 lanes
	MOVQ CX, R9
	SHRQ $2, R9
	JZ   tail14
loop14:
	KMOVW K7, K1
	KMOVW K7, K2
	KMOVW K7, K3
	KMOVW K7, K4
	VGATHERDPS 0(SI)(Z31*4), K1, Z0
	VGATHERDPS 4(SI)(Z31*4), K2, Z1
	VGATHERDPS 8(SI)(Z31*4), K3, Z2
	VGATHERDPS 12(SI)(Z31*4), K4, Z3
	VMOVUPS Z0, K7, 0(DI)
	VMOVUPS Z1, K7, 56(DI)
	VMOVUPS Z2, K7, 112(DI)
	VMOVUPS Z3, K7, 168(DI)
	ADDQ $16, SI
	ADDQ $224, DI
	DECQ R9
	JNZ  loop14
tail14:
	ANDQ $3, CX
	JZ   done14
tailloop14:
	KMOVW K7, K1
	VGATHERDPS (SI)(Z31*4), K1, Z0
	VMOVUPS Z0, K7, (DI)
	ADDQ $4, SI
	ADDQ $56, DI
	DECQ CX
	JNZ  tailloop14
done14:
	VZEROUPPER
	RET

// func packRows32AVX512(kc int, b *float32, ldb int, dst *float32)
//
// dst[p*32+j] = b[j*ldb+p] for j < 32, p < kc ≥ 1. Requires 16·ldb < 2³¹.
TEXT ·packRows32AVX512(SB), NOSPLIT, $0-32
	MOVQ kc+0(FP), CX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), AX
	MOVQ dst+24(FP), DI
	VPBROADCASTD AX, Z30
	VPMULLD gemmIota<>(SB), Z30, Z31 // Z31 = j·ldb
	MOVQ AX, R10
	SHLQ $6, R10
	ADDQ SI, R10                     // R10 = b + 16·ldb floats
	MOVL $0xffff, BX
	KMOVW BX, K7
	MOVQ CX, R9
	SHRQ $1, R9
	JZ   tail32
loop32:
	KMOVW K7, K1
	KMOVW K7, K2
	KMOVW K7, K3
	KMOVW K7, K4
	VGATHERDPS 0(SI)(Z31*4), K1, Z0
	VGATHERDPS 0(R10)(Z31*4), K2, Z1
	VGATHERDPS 4(SI)(Z31*4), K3, Z2
	VGATHERDPS 4(R10)(Z31*4), K4, Z3
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $8, SI
	ADDQ $8, R10
	ADDQ $256, DI
	DECQ R9
	JNZ  loop32
tail32:
	ANDQ $1, CX
	JZ   done32
	KMOVW K7, K1
	KMOVW K7, K2
	VGATHERDPS (SI)(Z31*4), K1, Z0
	VGATHERDPS (R10)(Z31*4), K2, Z1
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
done32:
	VZEROUPPER
	RET

// func packDepth14AVX512(kc int, src *float32, ld int, dst *float32)
//
// dst[p*14+r] = src[p*ld+r] for r < 14, p < kc ≥ 1: masked 14-lane copies.
TEXT ·packDepth14AVX512(SB), NOSPLIT, $0-32
	MOVQ kc+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), AX
	SHLQ $2, AX
	MOVQ dst+24(FP), DI
	MOVL $0x3fff, BX
	KMOVW BX, K1
depth14:
	VMOVUPS (SI), K1, Z0
	VMOVUPS Z0, K1, (DI)
	ADDQ AX, SI
	ADDQ $56, DI
	DECQ CX
	JNZ  depth14
	VZEROUPPER
	RET

// func packDepth32AVX512(kc int, src *float32, ld int, dst *float32)
//
// dst[p*32+j] = src[p*ld+j] for j < 32, p < kc ≥ 1.
TEXT ·packDepth32AVX512(SB), NOSPLIT, $0-32
	MOVQ kc+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), AX
	SHLQ $2, AX
	MOVQ dst+24(FP), DI
depth32:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ AX, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  depth32
	VZEROUPPER
	RET
