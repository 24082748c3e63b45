// Package psn implements arithmetic on InfiniBand packet sequence numbers.
//
// A PSN is a 24-bit counter that wraps around: the successor of 0xFFFFFF is 0.
// Two PSNs are ordered by their signed distance modulo 2^24, the way rxe
// compares them (psn_compare: (s32)((a - b) << 8)), so an ordering is only
// meaningful while the two values are less than 2^23 apart. The transport
// keeps its windows far smaller than that (rxe allows 128 unacknowledged
// PSNs), so the ambiguity never arises in practice.
//
// The package is modelled on gVisor's tcpip/seqnum.
package psn

import "fmt"

// Mask keeps the 24 significant bits of a PSN.
const Mask = 0xFFFFFF

// Modulus is the number of distinct PSNs.
const Modulus = 1 << 24

// PSN is a 24-bit packet sequence number. Every method returns a value masked
// to 24 bits and tolerates unmasked receivers and arguments (the high byte is
// ignored), so a PSN converted from a wider integer needs no explicit masking
// before arithmetic; use == only between masked values.
type PSN uint32

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN {
	return (p + PSN(n)) & Mask
}

// Next returns the PSN that follows p.
func (p PSN) Next() PSN {
	return (p + 1) & Mask
}

// Sub returns the signed distance p-q in [-2^23, 2^23): positive when p comes
// after q. Shifting the 24-bit difference into the top of an int32 and back
// sign-extends it, so the result is correct across the wrap.
func (p PSN) Sub(q PSN) int32 {
	return int32(uint32(p-q)<<8) >> 8
}

// Compare returns -1 if p comes before q, 0 if they are equal and +1 if p
// comes after q.
func (p PSN) Compare(q PSN) int {
	switch d := p.Sub(q); {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// LessThan reports whether p comes before q.
func (p PSN) LessThan(q PSN) bool {
	return p.Sub(q) < 0
}

// LessThanEq reports whether p comes before q or equals it.
func (p PSN) LessThanEq(q PSN) bool {
	return p.Sub(q) <= 0
}

// InWindow reports whether p lies in the window of size PSNs starting at
// first, that is first <= p < first+size modulo 2^24. Unlike LessThan it is
// exact for any size up to Modulus, because it measures the unsigned distance
// from the start of the window.
func (p PSN) InWindow(first PSN, size uint32) bool {
	return uint32(p-first)&Mask < size
}

// String formats p as six hexadecimal digits, as perftest and rxe print PSNs.
func (p PSN) String() string {
	return fmt.Sprintf("0x%06x", uint32(p)&Mask)
}
