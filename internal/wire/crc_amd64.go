//go:build !purego

package wire

import "golang.org/x/sys/cpu"

// hasFoldAVX512 reports whether foldAVX512 can run here.
var hasFoldAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ

// foldAVX512 is in crc_amd64.s.
//
//go:noescape
func foldAVX512(head *[64]byte, p []byte) (n int, raw uint32)

// foldMin is the shortest input crcUpdate hands to foldAVX512: below it,
// the fixed cost of the final reduction outweighs the faster loop.
const foldMin = 512

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p), faster for packet
// payloads on CPUs with 512-bit carry-less multiplication (measured: 4 KiB
// in about half the time of hash/crc32, see BenchmarkCRCUpdate).
func crcUpdate(crc uint32, p []byte) uint32 {
	if len(p) < foldMin || !hasFoldAVX512 {
		return crcUpdateGeneric(crc, p)
	}
	var head [64]byte
	copy(head[:], p)
	xorRaw(&head, 0, crc)
	return foldTail(&head, p[64:])
}

// foldTail returns the CRC, in crc32.Update's convention, of the stream
// head || p (len(p) >= 192) whose raw CRC starts from zero.
func foldTail(head *[64]byte, p []byte) uint32 {
	n, raw := foldAVX512(head, p)
	// crc32.Update's convention inverts the raw register.
	return crcUpdateGeneric(^raw, p[n:])
}

// xorRaw merges a CRC in crc32.Update's convention into the four bytes of
// head at off, so that the raw CRC of the stream from zero continues it:
// its raw register value (the inverted crc) is XORed in, little-endian.
func xorRaw(head *[64]byte, off int, crc uint32) {
	r := ^crc
	head[off] ^= byte(r)
	head[off+1] ^= byte(r >> 8)
	head[off+2] ^= byte(r >> 16)
	head[off+3] ^= byte(r >> 24)
}

// icrcFold returns the ICRC of a packet whose masked pseudo-header and BTH
// are hdr, followed by ext (extension headers) and rest, with hdr and ext
// hashed in the first 512-bit block of the fold instead of byte by byte;
// ok is false when it cannot (hdr and ext longer than a block, short rest,
// or no AVX-512 here). Leading zero bytes leave a raw CRC started from zero
// at zero, so hdr and ext are placed at the end of the block, with the
// seed merged into hdr's first bytes.
func icrcFold(hdr, ext, rest []byte) (crc uint32, ok bool) {
	if !hasFoldAVX512 || len(rest) < foldMin || len(hdr)+len(ext) > 64 {
		return 0, false
	}
	var head [64]byte
	off := 64 - len(hdr) - len(ext)
	copy(head[off:], hdr)
	copy(head[off+len(hdr):], ext)
	xorRaw(&head, off, icrcSeed)
	return foldTail(&head, rest), true
}

// foldsHeaders reports whether icrcFold hashes a packet whose masked
// headers (pseudo-header and BTH) are hdrLen bytes, its extension headers
// extLen and its remainder restLen bytes: the headers go in the fold's
// first block.
func foldsHeaders(hdrLen, extLen, restLen int) bool {
	return hasFoldAVX512 && restLen >= foldMin && hdrLen+extLen <= 64
}
