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

// func transpose14AVX512(blocks int, a *float32, lda int, dst *float32)
//
// dst[p*14+r] = a[r*lda+p] for r < 14, p < 16·blocks: the 14-row panel
// packer of gemmRows14 for full 16-depth blocks, by 16×16 in-register
// transposes (rows 14 and 15 zero), stored 14 lanes at a time.
TEXT ·transpose14AVX512(SB), NOSPLIT, $0-32
	MOVQ blocks+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	SHLQ $2, R8                     // R8 = ld bytes
	MOVQ dst+24(FP), DI
	LEAQ (R8)(R8*2), R9             // 3·ld
	LEAQ (R8)(R8*4), R10            // 5·ld
	LEAQ (R9)(R8*4), BX             // 7·ld
	ADDQ SI, BX                     // BX = row 7
	MOVL $0x3fff, AX
	KMOVW AX, K1
tloop:
	VMOVUPS (SI), Z0
	VMOVUPS (SI)(R8*1), Z1
	VMOVUPS (SI)(R8*2), Z2
	VMOVUPS (SI)(R9*1), Z3
	VMOVUPS (SI)(R8*4), Z4
	VMOVUPS (SI)(R10*1), Z5
	VMOVUPS (SI)(R9*2), Z6
	VMOVUPS (BX), Z7
	VMOVUPS (BX)(R8*1), Z8
	VMOVUPS (BX)(R8*2), Z9
	VMOVUPS (BX)(R9*1), Z10
	VMOVUPS (BX)(R8*4), Z11
	VMOVUPS (BX)(R10*1), Z12
	VMOVUPS (BX)(R9*2), Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	// stage 1: interleave row pairs within 128-bit lanes
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VUNPCKLPS Z9, Z8, Z24
	VUNPCKHPS Z9, Z8, Z25
	VUNPCKLPS Z11, Z10, Z26
	VUNPCKHPS Z11, Z10, Z27
	VUNPCKLPS Z13, Z12, Z28
	VUNPCKHPS Z13, Z12, Z29
	VUNPCKLPS Z15, Z14, Z30
	VUNPCKHPS Z15, Z14, Z31
	// stage 2: gather 4 rows per 128-bit lane: u[4i+j] lane L = rows 4i..4i+3, depth 4L+j
	VSHUFPS $0x44, Z18, Z16, Z0
	VSHUFPS $0xee, Z18, Z16, Z1
	VSHUFPS $0x44, Z19, Z17, Z2
	VSHUFPS $0xee, Z19, Z17, Z3
	VSHUFPS $0x44, Z22, Z20, Z4
	VSHUFPS $0xee, Z22, Z20, Z5
	VSHUFPS $0x44, Z23, Z21, Z6
	VSHUFPS $0xee, Z23, Z21, Z7
	VSHUFPS $0x44, Z26, Z24, Z8
	VSHUFPS $0xee, Z26, Z24, Z9
	VSHUFPS $0x44, Z27, Z25, Z10
	VSHUFPS $0xee, Z27, Z25, Z11
	VSHUFPS $0x44, Z30, Z28, Z12
	VSHUFPS $0xee, Z30, Z28, Z13
	VSHUFPS $0x44, Z31, Z29, Z14
	VSHUFPS $0xee, Z31, Z29, Z15
	// stage 3: combine 128-bit lanes; store depth 4L+j
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0xdd, Z4, Z0, Z17
	VSHUFF32X4 $0x88, Z12, Z8, Z18
	VSHUFF32X4 $0xdd, Z12, Z8, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 0(DI)
	VMOVUPS Z22, 224(DI)
	VMOVUPS Z21, 448(DI)
	VMOVUPS Z23, 672(DI)
	VSHUFF32X4 $0x88, Z5, Z1, Z16
	VSHUFF32X4 $0xdd, Z5, Z1, Z17
	VSHUFF32X4 $0x88, Z13, Z9, Z18
	VSHUFF32X4 $0xdd, Z13, Z9, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 56(DI)
	VMOVUPS Z22, 280(DI)
	VMOVUPS Z21, 504(DI)
	VMOVUPS Z23, 728(DI)
	VSHUFF32X4 $0x88, Z6, Z2, Z16
	VSHUFF32X4 $0xdd, Z6, Z2, Z17
	VSHUFF32X4 $0x88, Z14, Z10, Z18
	VSHUFF32X4 $0xdd, Z14, Z10, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 112(DI)
	VMOVUPS Z22, 336(DI)
	VMOVUPS Z21, 560(DI)
	VMOVUPS Z23, 784(DI)
	VSHUFF32X4 $0x88, Z7, Z3, Z16
	VSHUFF32X4 $0xdd, Z7, Z3, Z17
	VSHUFF32X4 $0x88, Z15, Z11, Z18
	VSHUFF32X4 $0xdd, Z15, Z11, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, K1, 168(DI)
	VMOVUPS Z22, K1, 392(DI)
	VMOVUPS Z21, K1, 616(DI)
	VMOVUPS Z23, K1, 840(DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $896, DI
	DECQ CX
	JNZ  tloop
	VZEROUPPER
	RET

// func transpose16AVX512(blocks int, b *float32, ldb int, dst *float32)
//
// dst[p*32+j] = b[j*ldb+p] for j < 16, p < 16·blocks: half of a 32-column
// panel of a transposed B (the caller runs it again for columns 16..31 with
// b + 16·ldb and dst + 16), for full 16-depth blocks, by 16×16 in-register
// transposes.
TEXT ·transpose16AVX512(SB), NOSPLIT, $0-32
	MOVQ blocks+0(FP), CX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	SHLQ $2, R8                     // R8 = ld bytes
	MOVQ dst+24(FP), DI
	LEAQ (R8)(R8*2), R9             // 3·ld
	LEAQ (R8)(R8*4), R10            // 5·ld
	LEAQ (R9)(R8*4), R11            // 7·ld
	LEAQ (SI)(R8*8), BX             // BX = row 8
t16loop:
	VMOVUPS (SI), Z0
	VMOVUPS (SI)(R8*1), Z1
	VMOVUPS (SI)(R8*2), Z2
	VMOVUPS (SI)(R9*1), Z3
	VMOVUPS (SI)(R8*4), Z4
	VMOVUPS (SI)(R10*1), Z5
	VMOVUPS (SI)(R9*2), Z6
	VMOVUPS (SI)(R11*1), Z7
	VMOVUPS (BX), Z8
	VMOVUPS (BX)(R8*1), Z9
	VMOVUPS (BX)(R8*2), Z10
	VMOVUPS (BX)(R9*1), Z11
	VMOVUPS (BX)(R8*4), Z12
	VMOVUPS (BX)(R10*1), Z13
	VMOVUPS (BX)(R9*2), Z14
	VMOVUPS (BX)(R11*1), Z15
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VUNPCKLPS Z9, Z8, Z24
	VUNPCKHPS Z9, Z8, Z25
	VUNPCKLPS Z11, Z10, Z26
	VUNPCKHPS Z11, Z10, Z27
	VUNPCKLPS Z13, Z12, Z28
	VUNPCKHPS Z13, Z12, Z29
	VUNPCKLPS Z15, Z14, Z30
	VUNPCKHPS Z15, Z14, Z31
	VSHUFPS $0x44, Z18, Z16, Z0
	VSHUFPS $0xee, Z18, Z16, Z1
	VSHUFPS $0x44, Z19, Z17, Z2
	VSHUFPS $0xee, Z19, Z17, Z3
	VSHUFPS $0x44, Z22, Z20, Z4
	VSHUFPS $0xee, Z22, Z20, Z5
	VSHUFPS $0x44, Z23, Z21, Z6
	VSHUFPS $0xee, Z23, Z21, Z7
	VSHUFPS $0x44, Z26, Z24, Z8
	VSHUFPS $0xee, Z26, Z24, Z9
	VSHUFPS $0x44, Z27, Z25, Z10
	VSHUFPS $0xee, Z27, Z25, Z11
	VSHUFPS $0x44, Z30, Z28, Z12
	VSHUFPS $0xee, Z30, Z28, Z13
	VSHUFPS $0x44, Z31, Z29, Z14
	VSHUFPS $0xee, Z31, Z29, Z15
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0xdd, Z4, Z0, Z17
	VSHUFF32X4 $0x88, Z12, Z8, Z18
	VSHUFF32X4 $0xdd, Z12, Z8, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 0(DI)
	VMOVUPS Z22, 512(DI)
	VMOVUPS Z21, 1024(DI)
	VMOVUPS Z23, 1536(DI)
	VSHUFF32X4 $0x88, Z5, Z1, Z16
	VSHUFF32X4 $0xdd, Z5, Z1, Z17
	VSHUFF32X4 $0x88, Z13, Z9, Z18
	VSHUFF32X4 $0xdd, Z13, Z9, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 128(DI)
	VMOVUPS Z22, 640(DI)
	VMOVUPS Z21, 1152(DI)
	VMOVUPS Z23, 1664(DI)
	VSHUFF32X4 $0x88, Z6, Z2, Z16
	VSHUFF32X4 $0xdd, Z6, Z2, Z17
	VSHUFF32X4 $0x88, Z14, Z10, Z18
	VSHUFF32X4 $0xdd, Z14, Z10, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 256(DI)
	VMOVUPS Z22, 768(DI)
	VMOVUPS Z21, 1280(DI)
	VMOVUPS Z23, 1792(DI)
	VSHUFF32X4 $0x88, Z7, Z3, Z16
	VSHUFF32X4 $0xdd, Z7, Z3, Z17
	VSHUFF32X4 $0x88, Z15, Z11, Z18
	VSHUFF32X4 $0xdd, Z15, Z11, Z19
	VSHUFF32X4 $0x88, Z18, Z16, Z20
	VSHUFF32X4 $0xdd, Z18, Z16, Z21
	VSHUFF32X4 $0x88, Z19, Z17, Z22
	VSHUFF32X4 $0xdd, Z19, Z17, Z23
	VMOVUPS Z20, 384(DI)
	VMOVUPS Z22, 896(DI)
	VMOVUPS Z21, 1408(DI)
	VMOVUPS Z23, 1920(DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $2048, DI
	DECQ CX
	JNZ  t16loop
	VZEROUPPER
	RET
