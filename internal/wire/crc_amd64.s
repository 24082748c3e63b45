//go:build !purego

#include "textflag.h"

// Fold constants for the bit-reflected CRC-32 (IEEE 802.3, the ICRC's),
// each pair (x^(D+32) mod P, x^(D-32) mod P), bit-reflected and shifted
// left by one, for folding a 128-bit lane forward by D bits: the low
// quadword of a lane is multiplied by the first, the high one by the second.
// They were computed by crcFoldConstant (crc_test.go checks every one).
DATA fold2048<>+0(SB)/8, $0x11542778a
DATA fold2048<>+8(SB)/8, $0x1322d1430
GLOBL fold2048<>(SB), RODATA, $16

DATA fold512<>+0(SB)/8, $0x154442bd4
DATA fold512<>+8(SB)/8, $0x1c6e41596
GLOBL fold512<>(SB), RODATA, $16

DATA fold384<>+0(SB)/8, $0x3db1ecdc
DATA fold384<>+8(SB)/8, $0x174359406
GLOBL fold384<>(SB), RODATA, $16

DATA fold256<>+0(SB)/8, $0xf1da05aa
DATA fold256<>+8(SB)/8, $0x15a546366
GLOBL fold256<>(SB), RODATA, $16

DATA fold128<>+0(SB)/8, $0x1751997d0
DATA fold128<>+8(SB)/8, $0xccaa009e
GLOBL fold128<>(SB), RODATA, $16

// Constants of the final reduction of a 128-bit lane to the 32-bit CRC
// (crc_test.go recomputes them): x^96 and x^64 mod P in the fold
// constants' form, to fold the low quadword onto the high one and then
// the low 32 of the 96 bits left onto the rest; and the Barrett pair,
// floor(x^64 / P) and P itself, each bit-reflected over its 33 bits.
DATA reduce64<>+0(SB)/8, $0xccaa009e
DATA reduce64<>+8(SB)/8, $0x163cd6124
GLOBL reduce64<>(SB), RODATA, $16

DATA barrett<>+0(SB)/8, $0x1f7011641
DATA barrett<>+8(SB)/8, $0x1db710641
GLOBL barrett<>(SB), RODATA, $16

DATA low32<>+0(SB)/8, $0xffffffff
DATA low32<>+8(SB)/8, $0
GLOBL low32<>(SB), RODATA, $16

// func foldAVX512(head *[64]byte, p []byte) (n int, raw uint32)
//
// foldAVX512 returns the raw CRC (no initial value, no final inversion)
// of the stream head || p[:n], where n is the largest multiple of 64 not
// above len(p) (len(p) >= 192), and n. A starting CRC value is XORed into
// the stream's first four bytes by the caller.
//
// Four independent 512-bit accumulators each fold 64 bytes per 256-byte
// step, so the carry-less multiplies of one step don't wait for each
// other (hash/crc32's AVX-512 loop has one accumulator and waits for the
// multiply's latency every 64 bytes). Requires AVX512F, AVX512VL and
// VPCLMULQDQ.
TEXT ·foldAVX512(SB), NOSPLIT, $0-44
	MOVQ head+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ CX, BX

	VMOVDQU64 (AX), Z1
	VMOVDQU64 (SI), Z2
	VMOVDQU64 64(SI), Z3
	VMOVDQU64 128(SI), Z4
	ADDQ      $192, SI
	SUBQ      $192, CX
	VBROADCASTI32X4 fold2048<>(SB), Z0
	CMPQ      CX, $256
	JB        merge

loop256:
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPCLMULQDQ $0x00, Z0, Z2, Z6
	VPCLMULQDQ $0x11, Z0, Z2, Z2
	VPCLMULQDQ $0x00, Z0, Z3, Z7
	VPCLMULQDQ $0x11, Z0, Z3, Z3
	VPCLMULQDQ $0x00, Z0, Z4, Z8
	VPCLMULQDQ $0x11, Z0, Z4, Z4
	VMOVDQU64  (SI), Z11
	VMOVDQU64  64(SI), Z12
	VMOVDQU64  128(SI), Z13
	VMOVDQU64  192(SI), Z14
	VPTERNLOGD $0x96, Z11, Z5, Z1
	VPTERNLOGD $0x96, Z12, Z6, Z2
	VPTERNLOGD $0x96, Z13, Z7, Z3
	VPTERNLOGD $0x96, Z14, Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

merge:
	// Fold the four accumulators into Z1, 64 bytes at a time.
	VBROADCASTI32X4 fold512<>(SB), Z0
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPTERNLOGD $0x96, Z2, Z5, Z1
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPTERNLOGD $0x96, Z3, Z5, Z1
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPTERNLOGD $0x96, Z4, Z5, Z1
	CMPQ       CX, $64
	JB         reduce

loop64:
	VMOVDQU64  (SI), Z11
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPTERNLOGD $0x96, Z11, Z5, Z1
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

reduce:
	// Fold the four 128-bit lanes of Z1 into the last one: lane 0 by
	// 384 bits, lane 1 by 256, lane 2 by 128.
	VEXTRACTI32X4 $1, Z1, X2
	VEXTRACTI32X4 $2, Z1, X3
	VEXTRACTI32X4 $3, Z1, X4
	VMOVDQU       fold384<>(SB), X0
	VPCLMULQDQ    $0x00, X0, X1, X5
	VPCLMULQDQ    $0x11, X0, X1, X1
	VMOVDQU       fold256<>(SB), X0
	VPCLMULQDQ    $0x00, X0, X2, X6
	VPCLMULQDQ    $0x11, X0, X2, X2
	VMOVDQU       fold128<>(SB), X0
	VPCLMULQDQ    $0x00, X0, X3, X7
	VPCLMULQDQ    $0x11, X0, X3, X3
	VPTERNLOGD    $0x96, X5, X1, X4
	VPTERNLOGD    $0x96, X6, X2, X4
	VPTERNLOGD    $0x96, X7, X3, X4

	// The raw CRC of the 128 bits V = L + H*2^64 left in X4 is
	// V(x)*x^32 mod P. Fold L by 64 bits onto H: W = L*x^96 + H*x^32,
	// 96 bits. Fold W's low 32 bits (its top degrees) onto the rest:
	// U, 64 bits. Then Barrett: q = floor(floor(U / x^32) * mu / x^32),
	// the CRC = (U + q*P) mod x^32: the high dword of the last sum.
	VMOVDQU    reduce64<>(SB), X0
	VPCLMULQDQ $0x00, X0, X4, X1
	VPSRLDQ    $8, X4, X2
	VPXOR      X2, X1, X1
	VPAND      low32<>(SB), X1, X2
	VPSRLDQ    $4, X1, X1
	VPCLMULQDQ $0x10, X0, X2, X2
	VPXOR      X1, X2, X2
	VMOVDQU    barrett<>(SB), X0
	VPAND      low32<>(SB), X2, X3
	VPCLMULQDQ $0x00, X0, X3, X3
	VPAND      low32<>(SB), X3, X3
	VPCLMULQDQ $0x10, X0, X3, X3
	VPXOR      X2, X3, X3
	VPEXTRD    $1, X3, AX
	VZEROUPPER
	SUBQ       CX, BX
	MOVQ       BX, n+32(FP)
	MOVL       AX, raw+40(FP)
	RET
