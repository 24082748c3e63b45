package wire

import "fmt"

// QPN is a 24-bit queue pair number, as carried in the BTH DestQP and the DETH
// SrcQP fields.
type QPN uint32

// QPNMask keeps the 24 significant bits of a QPN.
const QPNMask = 0xFFFFFF

// Well-known queue pair numbers.
const (
	// GSIQPN is QP1, the general services interface that carries
	// communication management MADs.
	GSIQPN QPN = 1
	// MulticastQPN is the DestQP of UD packets sent to a multicast group.
	MulticastQPN QPN = 0xFFFFFF
)

// String formats q as six hexadecimal digits, as tshark and perftest do.
func (q QPN) String() string {
	return fmt.Sprintf("0x%06x", uint32(q)&QPNMask)
}

// MSN is a 24-bit message sequence number, carried in the AETH: the responder
// counts completed request messages with it, modulo 2^24.
type MSN uint32

// MSNMask keeps the 24 significant bits of an MSN.
const MSNMask = 0xFFFFFF

// Next returns the MSN that follows m.
func (m MSN) Next() MSN {
	return (m + 1) & MSNMask
}

// String formats m in decimal.
func (m MSN) String() string {
	return fmt.Sprint(uint32(m) & MSNMask)
}
