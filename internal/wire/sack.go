package wire

import "github.com/goroce/goroce/internal/psn"

// A selective acknowledgement (opcode RCSACK) is goroce's answer to an RC
// request that arrived out of sequence, sent only between goroce peers
// that agreed to selective repeat: BTH, AETH, then a bitmap as payload.
//
//   - BTH PSN: the responder's expected PSN, the first one missing. Every
//     PSN before it is acknowledged, as by an ACK of the PSN before.
//   - AETH: an ACK syndrome and the responder's MSN, as in an ACK.
//   - Payload: 4 to SACKMaxLen bytes, whole 32-bit words. Bit i (byte
//     i/8, bit i%8, least significant first) set means that PSN+1+i is
//     held by the responder, to be executed once the PSNs before it
//     arrive: the requester need not send it again.
//
// The opcode lies in the manufacturer-specific range (0xC0-0xFF), so a
// peer that never agreed would drop it as unknown rather than misread it.

// SACKMaxLen is the longest bitmap of a SACK: 1,024 PSNs.
const SACKMaxLen = 128

// SACKBitmap is the bitmap of a SACK, a view of the packet's payload.
type SACKBitmap []byte

// Bits returns how many PSNs the bitmap describes.
func (b SACKBitmap) Bits() int { return len(b) * 8 }

// Held reports whether bit i is set: the responder holds the PSN i+1
// after the SACK's. Bits beyond the bitmap are clear.
func (b SACKBitmap) Held(i int) bool {
	return i >= 0 && i < len(b)*8 && b[i>>3]&(1<<(i&7)) != 0
}

// Set sets bit i; it does nothing beyond the bitmap.
func (b SACKBitmap) Set(i int) {
	if i >= 0 && i < len(b)*8 {
		b[i>>3] |= 1 << (i & 7)
	}
}

// HeldPSN reports whether the bitmap of a SACK whose BTH carries first
// marks p as held.
func (b SACKBitmap) HeldPSN(first, p psn.PSN) bool {
	return b.Held(int(p.Sub(first)) - 1)
}

// SACKLen returns the bitmap length for a reorder window of n PSNs: whole
// words, at least one, at most SACKMaxLen bytes.
func SACKLen(n int) int {
	return min(max((n+31)/32*4, 4), SACKMaxLen)
}
