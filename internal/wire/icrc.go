package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The invariant CRC (IBTA Annex A17, rxe_icrc.c) is the standard CRC-32
// (IEEE 802.3, as zlib and hash/crc32.ChecksumIEEE compute it; not
// Castagnoli) of a pseudo-packet:
//
//	8 bytes 0xFF                   the LRH of native InfiniBand, masked
//	IP header                      IPv4: TOS, TTL, header checksum set to all 1s
//	                               IPv6: traffic class, flow label, hop limit set to all 1s
//	UDP header                     checksum set to 0xFFFF
//	BTH                            byte 4 (FECN, BECN, reserved) set to 0xFF
//	extension headers, payload, pad
//
// stored least significant byte first in the last 4 bytes of the packet.
//
// The functions here never copy the packet: they mask a stack copy of the
// IP, UDP and BTH headers (at most 60 bytes) and continue the CRC over the
// caller's slices with crc32.Update, which yields the same value as a CRC of
// the concatenation. The masked copy is hashed by updateSmall rather than
// crc32.Update, because crc32.Update makes its argument escape, which would
// move the copy to the heap: one allocation per packet.

// icrcSeed is the CRC-32 of the eight 0xFF bytes that open the pseudo-packet,
// as crc32.Update returns it. rxe starts from 0xdebb20e3, the same state before
// the final inversion.
const icrcSeed = 0x2144DF1C

// zeroPad supplies the pad bytes the send path never stores.
var zeroPad [3]byte

// ICRC returns the invariant CRC of a packet: ipHeader is the IPv4 header
// (20-60 bytes, options included) or the IPv6 fixed header (40 bytes),
// udpHeader the 8-byte UDP header, and transport the UDP payload without its
// last 4 bytes (BTH through pad).
//
// It returns 0 if the arguments are not of that shape (wrong IP version or
// header length, a UDP header that is not 8 bytes, transport shorter than a
// BTH); CheckICRC tells such inputs apart from a real ICRC of 0.
func ICRC(ipHeader, udpHeader, transport []byte) uint32 {
	crc, _ := icrc(ipHeader, udpHeader, transport, nil, nil)
	return crc
}

// ICRCParts is ICRC for a packet whose transport headers, payload and pad are
// in separate buffers, as on the send path; hdrs must start with the BTH.
// Any of payload and pad may be empty.
func ICRCParts(ipHeader, udpHeader, hdrs, payload, pad []byte) uint32 {
	crc, _ := icrc(ipHeader, udpHeader, hdrs, payload, pad)
	return crc
}

// CheckICRC reports whether the last 4 bytes of transportWithICRC (the whole
// UDP payload) hold the ICRC of the packet. It returns false for arguments
// ICRC does not accept.
func CheckICRC(ipHeader, udpHeader, transportWithICRC []byte) bool {
	n := len(transportWithICRC) - ICRCLen
	if n < BTHLen {
		return false
	}
	crc, ok := icrc(ipHeader, udpHeader, transportWithICRC[:n], nil, nil)
	return ok && crc == binary.LittleEndian.Uint32(transportWithICRC[n:])
}

// icrc computes the ICRC over the IP and UDP headers and the transport bytes
// hdrs ++ payload ++ pad. ok is false for malformed arguments.
func icrc(ip, udp, hdrs, payload, pad []byte) (crc uint32, ok bool) {
	if len(udp) != UDPHeaderLen || len(hdrs) < BTHLen || len(ip) == 0 {
		return 0, false
	}
	var buf [IPv6HeaderLen + UDPHeaderLen + BTHLen]byte
	var n int
	var opts []byte
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < IPv4MinHeaderLen || len(ip) > IPv4MaxHeaderLen {
			return 0, false
		}
		n = copy(buf[:], ip[:IPv4MinHeaderLen])
		maskIPv4(buf[:n])
		opts = ip[IPv4MinHeaderLen:]
	case 6:
		if len(ip) != IPv6HeaderLen {
			return 0, false
		}
		n = copy(buf[:], ip)
		maskIPv6(buf[:n])
	default:
		return 0, false
	}
	crc = icrcSeed
	if len(opts) > 0 {
		// IPv4 options are invariant: hash them in place. updateSmall, not
		// crc32.Update, so that ip does not escape and a caller may build
		// the header on its stack without an allocation per packet.
		crc = updateSmall(crc, buf[:n])
		crc = updateSmall(crc, opts)
		n = 0
	}
	n += copy(buf[n:], udp)
	maskUDP(buf[n-UDPHeaderLen : n])
	n += copy(buf[n:], hdrs[:BTHLen])
	maskBTH(buf[n-BTHLen : n])
	crc = updateSmall(crc, buf[:n])
	return icrcTail(crc, hdrs[BTHLen:], payload, pad), true
}

// icrcTail continues crc over the unmasked remainder of the packet.
func icrcTail(crc uint32, hdrs, payload, pad []byte) uint32 {
	if len(hdrs) > 0 {
		crc = crcUpdate(crc, hdrs)
	}
	if len(payload) > 0 {
		crc = crcUpdate(crc, payload)
	}
	if len(pad) > 0 {
		crc = crcUpdate(crc, pad)
	}
	return crc
}

func maskIPv4(h []byte) {
	h[ipv4TOS] = 0xFF
	h[ipv4TTL] = 0xFF
	h[ipv4Checksum] = 0xFF
	h[ipv4Checksum+1] = 0xFF
}

func maskIPv6(h []byte) {
	h[0] |= 0x0F // low nibble of the first byte: high half of the traffic class
	h[1] = 0xFF  // rest of the traffic class and the flow label
	h[2] = 0xFF
	h[3] = 0xFF
	h[ipv6HopLimit] = 0xFF
}

func maskUDP(h []byte) {
	h[udpChecksum] = 0xFF
	h[udpChecksum+1] = 0xFF
}

func maskBTH(h []byte) {
	h[bthQPN] = 0xFF // FECN, BECN, resv6
}

// ICRCv4 computes the ICRC of a packet the send path has not wrapped in IP
// and UDP yet, from the values the kernel will put in its IPv4 and UDP
// headers: no options, DF set, protocol UDP, total and UDP lengths derived
// from the transport length. TOS, TTL and both checksums are masked by the
// ICRC, so they need not be known.
//
// hdrs holds the BTH and the extension headers, payload the payload without
// pad. The pad, BTH PadCount zero bytes, is included here: the send path never
// stores it. ipID must be the identification the kernel will send: 0 for an
// unconnected UDP socket with DF set (IP_PMTUDISC_DO), the behaviour rxe
// peers need (see rxe-vm/README.md). It returns 0 if hdrs is shorter than a
// BTH.
func ICRCv4(src, dst [4]byte, ipID uint16, srcPort, dstPort uint16, hdrs, payload []byte) uint32 {
	if len(hdrs) < BTHLen {
		return 0
	}
	pad := zeroPad[:BTH(hdrs).PadCount()]
	udpLen := UDPHeaderLen + len(hdrs) + len(payload) + len(pad) + ICRCLen

	var buf [IPv4MinHeaderLen + UDPHeaderLen + BTHLen]byte
	maskedIPv4(IPv4(buf[:IPv4MinHeaderLen]), src, dst, ipID, udpLen)
	return icrcAddrs(buf[:], IPv4MinHeaderLen, srcPort, dstPort, udpLen, hdrs, payload, pad)
}

// maskedIPv4 writes into ip the IPv4 header, masked as the ICRC covers
// it, that the kernel sends for a UDP datagram of udpLen bytes from src to
// dst with identification id: no options, DF set. It copies the fixed
// fields from a template and sets the four others, so that it inlines into
// ICRCv4's per-packet path (not inlined, the call cost 5 ns of 54 at 1 KiB,
// BenchmarkICRCv4/1024).
func maskedIPv4(ip IPv4, src, dst [4]byte, id uint16, udpLen int) {
	*(*[IPv4MinHeaderLen]byte)(ip) = maskedIPv4Template
	binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(IPv4MinHeaderLen+udpLen))
	binary.BigEndian.PutUint16(ip[ipv4ID:], id)
	*(*[4]byte)(ip[ipv4Src:]) = src
	*(*[4]byte)(ip[ipv4Dst:]) = dst
}

// maskedIPv4Template is the masked IPv4 header of a UDP datagram with DF
// set and no options, lengths, identification and addresses zero.
var maskedIPv4Template = func() (h [IPv4MinHeaderLen]byte) {
	ip := IPv4(h[:])
	ip.SetVersionIHL(IPv4MinHeaderLen)
	ip.SetFlagsFragmentOffset(IPv4DontFragment, 0)
	ip.SetProtocol(IPProtocolUDP)
	maskIPv4(ip)
	return h
}()

// maskedUDP writes into u the UDP header, masked as the ICRC covers it
// (icrcAddrs writes the same inline).
func maskedUDP(u UDP, srcPort, dstPort uint16, udpLen int) {
	u.SetSrcPort(srcPort)
	u.SetDstPort(dstPort)
	u.SetLength(uint16(udpLen))
	maskUDP(u)
}

// ICRCv6 is ICRCv4 for IPv6: no extension headers, next header UDP, payload
// length derived from the transport length; traffic class, flow label and
// hop limit are masked.
func ICRCv6(src, dst [16]byte, srcPort, dstPort uint16, hdrs, payload []byte) uint32 {
	if len(hdrs) < BTHLen {
		return 0
	}
	pad := zeroPad[:BTH(hdrs).PadCount()]
	udpLen := UDPHeaderLen + len(hdrs) + len(payload) + len(pad) + ICRCLen

	var buf [IPv6HeaderLen + UDPHeaderLen + BTHLen]byte
	ip := IPv6(buf[:IPv6HeaderLen])
	ip.SetVersionTCFlow(0xFF, 0xFFFFF)
	ip.SetPayloadLength(uint16(udpLen))
	ip.SetNextHeader(IPProtocolUDP)
	ip.SetHopLimit(0xFF)
	ip.SetSrc(src)
	ip.SetDst(dst)
	return icrcAddrs(buf[:], IPv6HeaderLen, srcPort, dstPort, udpLen, hdrs, payload, pad)
}

// icrcAddrs completes buf, which holds a masked IP header of ipLen bytes,
// with the masked UDP header and BTH, and computes the ICRC.
func icrcAddrs(buf []byte, ipLen int, srcPort, dstPort uint16, udpLen int, hdrs, payload, pad []byte) uint32 {
	u := UDP(buf[ipLen : ipLen+UDPHeaderLen]) // maskedUDP, inline
	u.SetSrcPort(srcPort)
	u.SetDstPort(dstPort)
	u.SetLength(uint16(udpLen))
	maskUDP(u)
	b := buf[ipLen+UDPHeaderLen : ipLen+UDPHeaderLen+BTHLen]
	copy(b, hdrs[:BTHLen])
	maskBTH(b)
	hdr := buf[:ipLen+UDPHeaderLen+BTHLen]
	ext, rest := hdrs[BTHLen:], payload
	if len(payload) == 0 {
		ext, rest = nil, hdrs[BTHLen:] // the whole packet in hdrs
	}
	if crc, ok := icrcFold(hdr, ext, rest); ok {
		return crcUpdateGeneric(crc, pad)
	}
	crc := updateSmall(icrcSeed, hdr)
	return icrcTail(crc, hdrs[BTHLen:], payload, pad)
}

// slicing8 holds the tables of the slicing-by-8 CRC-32 algorithm for the IEEE
// polynomial: slicing8[0] is the classic byte-at-a-time table, and
// slicing8[k][i] is the CRC of byte i followed by k zero bytes.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		crc := t[0][i]
		for k := 1; k < 8; k++ {
			crc = t[0][byte(crc)] ^ crc>>8
			t[k][i] = crc
		}
	}
	return t
}()

// updateSmall is crc32.Update(crc, crc32.IEEETable, p) for the short masked
// header copies. It processes eight bytes per step; p does not escape.
func updateSmall(crc uint32, p []byte) uint32 {
	t := &slicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][crc>>24] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}
