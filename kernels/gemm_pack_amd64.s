// Packing routines for the AVX-512 SGEMM path (written by hand): copy a
// panel of A or B into the micro-kernel's layout, zero past its last row or
// column. The "rows" packers transpose with gathers; the "depth" packers copy
// with masked loads.

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

// func packRows14AVX512(kc int, a *float32, lda, rows int, dst *float32)
//
// dst[p*14+r] = a[r*lda+p] for r < rows, 0 for rows ≤ r < 14; p < kc ≥ 1.
// Requires 1 ≤ rows ≤ 14 and 15·lda < 2³¹.
TEXT ·packRows14AVX512(SB), NOSPLIT, $0-40
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), AX
	MOVQ rows+24(FP), BX
	MOVQ dst+32(FP), DI
	VPBROADCASTD AX, Z30
	VPMULLD gemmIota<>(SB), Z30, Z31 // Z31 = r·lda
	MOVQ BX, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K7                     // rows to gather
	MOVL $0x3fff, AX
	KMOVW AX, K6                     // 14 lanes to store
	MOVQ kc+0(FP), CX
	MOVQ CX, R9
	SHRQ $2, R9
	JZ   tail14
loop14:
	KMOVW K7, K1
	KMOVW K7, K2
	KMOVW K7, K3
	KMOVW K7, K4
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VGATHERDPS 0(SI)(Z31*4), K1, Z0
	VGATHERDPS 4(SI)(Z31*4), K2, Z1
	VGATHERDPS 8(SI)(Z31*4), K3, Z2
	VGATHERDPS 12(SI)(Z31*4), K4, Z3
	VMOVUPS Z0, K6, 0(DI)
	VMOVUPS Z1, K6, 56(DI)
	VMOVUPS Z2, K6, 112(DI)
	VMOVUPS Z3, K6, 168(DI)
	ADDQ $16, SI
	ADDQ $224, DI
	DECQ R9
	JNZ  loop14
tail14:
	ANDQ $3, CX
	JZ   done14
tailloop14:
	KMOVW K7, K1
	VPXORD Z0, Z0, Z0
	VGATHERDPS (SI)(Z31*4), K1, Z0
	VMOVUPS Z0, K6, (DI)
	ADDQ $4, SI
	ADDQ $56, DI
	DECQ CX
	JNZ  tailloop14
done14:
	VZEROUPPER
	RET

// func packRows32AVX512(kc int, b *float32, ldb, cols int, dst *float32)
//
// dst[p*32+j] = b[j*ldb+p] for j < cols, 0 for cols ≤ j < 32; p < kc ≥ 1.
// Requires 1 ≤ cols ≤ 32 and 16·ldb < 2³¹.
TEXT ·packRows32AVX512(SB), NOSPLIT, $0-40
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), AX
	MOVQ dst+32(FP), DI
	VPBROADCASTD AX, Z30
	VPMULLD gemmIota<>(SB), Z30, Z31 // Z31 = j·ldb
	MOVQ AX, R10
	SHLQ $6, R10
	ADDQ SI, R10                     // R10 = b + 16·ldb floats
	MOVQ cols+24(FP), CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K6                     // columns 0..15 to gather
	SHRQ $16, AX
	KMOVW AX, K7                     // columns 16..31 to gather
	MOVQ kc+0(FP), CX
	MOVQ CX, R9
	SHRQ $1, R9
	JZ   tail32
loop32:
	KMOVW K6, K1
	KMOVW K7, K2
	KMOVW K6, K3
	KMOVW K7, K4
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
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
	KMOVW K6, K1
	KMOVW K7, K2
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VGATHERDPS (SI)(Z31*4), K1, Z0
	VGATHERDPS (R10)(Z31*4), K2, Z1
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
done32:
	VZEROUPPER
	RET

// func packDepth14AVX512(kc int, src *float32, ld, rows int, dst *float32)
//
// dst[p*14+r] = src[p*ld+r] for r < rows, 0 for rows ≤ r < 14; p < kc ≥ 1.
// Requires 1 ≤ rows ≤ 14.
TEXT ·packDepth14AVX512(SB), NOSPLIT, $0-40
	MOVQ rows+24(FP), CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1                     // lanes to load
	MOVL $0x3fff, AX
	KMOVW AX, K2                     // 14 lanes to store
	MOVQ kc+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), AX
	SHLQ $2, AX
	MOVQ dst+32(FP), DI
depth14:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS Z0, K2, (DI)
	ADDQ AX, SI
	ADDQ $56, DI
	DECQ CX
	JNZ  depth14
	VZEROUPPER
	RET

// func packDepth32AVX512(kc int, src *float32, ld, cols int, dst *float32)
//
// dst[p*32+j] = src[p*ld+j] for j < cols, 0 for cols ≤ j < 32; p < kc ≥ 1.
// Requires 1 ≤ cols ≤ 32.
TEXT ·packDepth32AVX512(SB), NOSPLIT, $0-40
	MOVQ cols+24(FP), CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1                     // columns 0..15 to load
	SHRQ $16, AX
	KMOVW AX, K2                     // columns 16..31 to load
	MOVQ kc+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), AX
	SHLQ $2, AX
	MOVQ dst+32(FP), DI
depth32:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z 64(SI), K2, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ AX, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  depth32
	VZEROUPPER
	RET
