package wire

import "encoding/binary"

// IP header lengths.
const (
	IPv4MinHeaderLen = 20 // without options
	IPv4MaxHeaderLen = 60
	IPv6HeaderLen    = 40 // the fixed header
)

// IPProtocolUDP is the IPv4 protocol and IPv6 next-header number of UDP.
const IPProtocolUDP = 17

// IPv4 flags (the 3 bits before the fragment offset).
const (
	IPv4DontFragment  = 0x2
	IPv4MoreFragments = 0x1
)

// IPv4 header offsets.
const (
	ipv4VersionIHL = 0
	ipv4TOS        = 1
	ipv4TotalLen   = 2
	ipv4ID         = 4
	ipv4FlagsFrag  = 6
	ipv4TTL        = 8
	ipv4Protocol   = 9
	ipv4Checksum   = 10
	ipv4Src        = 12
	ipv4Dst        = 16
)

// IPv4 is a view of an IPv4 header. The accessors need at least
// IPv4MinHeaderLen bytes; Valid checks a header before use.
type IPv4 []byte

// Version returns the IP version field, 4 for a valid header.
func (b IPv4) Version() uint8 { return b[ipv4VersionIHL] >> 4 }

// HeaderLen returns the header length in bytes (IHL × 4).
func (b IPv4) HeaderLen() int { return int(b[ipv4VersionIHL]&0x0F) * 4 }

// TOS returns the type-of-service byte (DSCP and ECN).
func (b IPv4) TOS() uint8 { return b[ipv4TOS] }

// TotalLength returns the length of the IP packet, header included.
func (b IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(b[ipv4TotalLen:]) }

// ID returns the identification field. The ICRC covers it: see ICRCv4.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[ipv4ID:]) }

// Flags returns the three flag bits (IPv4DontFragment, IPv4MoreFragments).
func (b IPv4) Flags() uint8 { return b[ipv4FlagsFrag] >> 5 }

// FragmentOffset returns the fragment offset in 8-byte units.
func (b IPv4) FragmentOffset() uint16 {
	return binary.BigEndian.Uint16(b[ipv4FlagsFrag:]) & 0x1FFF
}

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[ipv4TTL] }

// Protocol returns the protocol number of the payload.
func (b IPv4) Protocol() uint8 { return b[ipv4Protocol] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[ipv4Checksum:]) }

// Src returns the source address.
func (b IPv4) Src() [4]byte { return [4]byte(b[ipv4Src : ipv4Src+4]) }

// Dst returns the destination address.
func (b IPv4) Dst() [4]byte { return [4]byte(b[ipv4Dst : ipv4Dst+4]) }

// SetVersionIHL sets the version to 4 and the header length to n bytes (a
// multiple of 4).
func (b IPv4) SetVersionIHL(n int) { b[ipv4VersionIHL] = 4<<4 | byte(n/4)&0x0F }

// SetTOS sets the type-of-service byte.
func (b IPv4) SetTOS(v uint8) { b[ipv4TOS] = v }

// SetTotalLength sets the total length.
func (b IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(b[ipv4TotalLen:], n) }

// SetID sets the identification field.
func (b IPv4) SetID(id uint16) { binary.BigEndian.PutUint16(b[ipv4ID:], id) }

// SetFlagsFragmentOffset sets the flags (3 bits) and the fragment offset (13
// bits).
func (b IPv4) SetFlagsFragmentOffset(flags uint8, off uint16) {
	binary.BigEndian.PutUint16(b[ipv4FlagsFrag:], uint16(flags&7)<<13|off&0x1FFF)
}

// SetTTL sets the time to live.
func (b IPv4) SetTTL(v uint8) { b[ipv4TTL] = v }

// SetProtocol sets the protocol number.
func (b IPv4) SetProtocol(p uint8) { b[ipv4Protocol] = p }

// SetChecksum sets the header checksum field.
func (b IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[ipv4Checksum:], c) }

// SetSrc sets the source address.
func (b IPv4) SetSrc(a [4]byte) { copy(b[ipv4Src:], a[:]) }

// SetDst sets the destination address.
func (b IPv4) SetDst(a [4]byte) { copy(b[ipv4Dst:], a[:]) }

// Valid reports whether b starts with a well-formed IPv4 header: version 4,
// a header length of at least 20 bytes that b holds, and a total length that
// covers the header and fits in b.
func (b IPv4) Valid() bool {
	if len(b) < IPv4MinHeaderLen || b.Version() != 4 {
		return false
	}
	hl := b.HeaderLen()
	tl := int(b.TotalLength())
	return hl >= IPv4MinHeaderLen && hl <= len(b) && tl >= hl && tl <= len(b)
}

// ComputeChecksum returns the correct header checksum of b (whose checksum
// field is ignored), for SetChecksum.
func (b IPv4) ComputeChecksum() uint16 {
	hl := min(b.HeaderLen(), len(b))
	var sum uint32
	for i := 0; i+1 < hl; i += 2 {
		if i == ipv4Checksum {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// IPv4Fields holds the values of an IPv4 header without options.
type IPv4Fields struct {
	TOS         uint8
	TotalLength uint16
	ID          uint16
	Flags       uint8 // IPv4DontFragment, IPv4MoreFragments
	FragOffset  uint16
	TTL         uint8
	Protocol    uint8
	Checksum    uint16 // written as given; see ComputeChecksum
	Src, Dst    [4]byte
}

// Encode writes f into the first 20 bytes of b, as a header without options.
func (b IPv4) Encode(f *IPv4Fields) {
	_ = b[IPv4MinHeaderLen-1]
	b.SetVersionIHL(IPv4MinHeaderLen)
	b.SetTOS(f.TOS)
	b.SetTotalLength(f.TotalLength)
	b.SetID(f.ID)
	b.SetFlagsFragmentOffset(f.Flags, f.FragOffset)
	b.SetTTL(f.TTL)
	b.SetProtocol(f.Protocol)
	b.SetChecksum(f.Checksum)
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
}

// Append appends a 20-byte header and returns the extended slice.
func (f *IPv4Fields) Append(b []byte) []byte {
	b, h := grow(b, IPv4MinHeaderLen)
	IPv4(h).Encode(f)
	return b
}

// IPv6 header offsets.
const (
	ipv6VersionTCFlow = 0 // 32-bit word: version 4, traffic class 8, flow label 20
	ipv6PayloadLen    = 4
	ipv6NextHeader    = 6
	ipv6HopLimit      = 7
	ipv6Src           = 8
	ipv6Dst           = 24
)

// IPv6 is a view of an IPv6 fixed header; the accessors need IPv6HeaderLen
// bytes.
type IPv6 []byte

func (b IPv6) word0() uint32 { return binary.BigEndian.Uint32(b[ipv6VersionTCFlow:]) }

// Version returns the IP version field, 6 for a valid header.
func (b IPv6) Version() uint8 { return b[0] >> 4 }

// TrafficClass returns the traffic class (DSCP and ECN).
func (b IPv6) TrafficClass() uint8 { return uint8(b.word0() >> 20) }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return b.word0() & 0xFFFFF }

// PayloadLength returns the length of what follows the fixed header.
func (b IPv6) PayloadLength() uint16 { return binary.BigEndian.Uint16(b[ipv6PayloadLen:]) }

// NextHeader returns the protocol number of what follows the fixed header.
func (b IPv6) NextHeader() uint8 { return b[ipv6NextHeader] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[ipv6HopLimit] }

// Src returns the source address.
func (b IPv6) Src() [16]byte { return [16]byte(b[ipv6Src : ipv6Src+16]) }

// Dst returns the destination address.
func (b IPv6) Dst() [16]byte { return [16]byte(b[ipv6Dst : ipv6Dst+16]) }

// SetVersionTCFlow sets the version to 6, the traffic class and the flow
// label (low 20 bits).
func (b IPv6) SetVersionTCFlow(tc uint8, flow uint32) {
	binary.BigEndian.PutUint32(b[ipv6VersionTCFlow:], 6<<28|uint32(tc)<<20|flow&0xFFFFF)
}

// SetPayloadLength sets the payload length.
func (b IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(b[ipv6PayloadLen:], n) }

// SetNextHeader sets the next header.
func (b IPv6) SetNextHeader(p uint8) { b[ipv6NextHeader] = p }

// SetHopLimit sets the hop limit.
func (b IPv6) SetHopLimit(v uint8) { b[ipv6HopLimit] = v }

// SetSrc sets the source address.
func (b IPv6) SetSrc(a [16]byte) { copy(b[ipv6Src:], a[:]) }

// SetDst sets the destination address.
func (b IPv6) SetDst(a [16]byte) { copy(b[ipv6Dst:], a[:]) }

// Valid reports whether b starts with a well-formed IPv6 fixed header whose
// payload fits in b.
func (b IPv6) Valid() bool {
	return len(b) >= IPv6HeaderLen && b.Version() == 6 &&
		IPv6HeaderLen+int(b.PayloadLength()) <= len(b)
}

// IPv6Fields holds the values of an IPv6 fixed header.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      [16]byte
}

// Encode writes f into the first 40 bytes of b.
func (b IPv6) Encode(f *IPv6Fields) {
	_ = b[IPv6HeaderLen-1]
	b.SetVersionTCFlow(f.TrafficClass, f.FlowLabel)
	b.SetPayloadLength(f.PayloadLength)
	b.SetNextHeader(f.NextHeader)
	b.SetHopLimit(f.HopLimit)
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
}

// Append appends a 40-byte header and returns the extended slice.
func (f *IPv6Fields) Append(b []byte) []byte {
	b, h := grow(b, IPv6HeaderLen)
	IPv6(h).Encode(f)
	return b
}

// Errors of SplitIPUDP.
var (
	errIPTruncated   = &ParseError{"IP", "packet shorter than its IP header or length field", ErrTruncated}
	errIPVersion     = &ParseError{"IP", "IP version is neither 4 nor 6", ErrIPHeader}
	errIPv4Length    = &ParseError{"IPv4", "header or total length field too small", ErrIPHeader}
	errIPv4Fragment  = &ParseError{"IPv4", "fragment", ErrNotUDP}
	errIPNotUDP      = &ParseError{"IP", "payload is not UDP", ErrNotUDP}
	errUDPTruncated  = &ParseError{"UDP", "packet shorter than the UDP header or its length field", ErrTruncated}
	errUDPLengthTiny = &ParseError{"UDP", "length field smaller than the header", ErrIPHeader}
)

// SplitIPUDP splits an IP packet carrying a UDP datagram into the IP header
// (IPv4 with options, or the IPv6 fixed header), the UDP header and the UDP
// payload. Bytes beyond the IP total length (Ethernet padding) and beyond the
// UDP length are ignored. It rejects IPv4 fragments and IPv6 extension
// headers (RoCEv2 uses neither) with ErrNotUDP. It does not verify
// checksums. Like Parse, it does not allocate.
func SplitIPUDP(b []byte) (ip []byte, udp UDP, payload []byte, err error) {
	if len(b) == 0 {
		return nil, nil, nil, errIPTruncated
	}
	var rest []byte
	switch b[0] >> 4 {
	case 4:
		h := IPv4(b)
		if len(b) < IPv4MinHeaderLen {
			return nil, nil, nil, errIPTruncated
		}
		hl, tl := h.HeaderLen(), int(h.TotalLength())
		if hl < IPv4MinHeaderLen || tl < hl {
			return nil, nil, nil, errIPv4Length
		}
		if hl > len(b) || tl > len(b) {
			return nil, nil, nil, errIPTruncated
		}
		if h.Flags()&IPv4MoreFragments != 0 || h.FragmentOffset() != 0 {
			return nil, nil, nil, errIPv4Fragment
		}
		if h.Protocol() != IPProtocolUDP {
			return nil, nil, nil, errIPNotUDP
		}
		ip, rest = b[:hl:hl], b[hl:tl:tl]
	case 6:
		h := IPv6(b)
		if len(b) < IPv6HeaderLen {
			return nil, nil, nil, errIPTruncated
		}
		end := IPv6HeaderLen + int(h.PayloadLength())
		if end > len(b) {
			return nil, nil, nil, errIPTruncated
		}
		if h.NextHeader() != IPProtocolUDP {
			return nil, nil, nil, errIPNotUDP
		}
		ip, rest = b[:IPv6HeaderLen:IPv6HeaderLen], b[IPv6HeaderLen:end:end]
	default:
		return nil, nil, nil, errIPVersion
	}
	if len(rest) < UDPHeaderLen {
		return nil, nil, nil, errUDPTruncated
	}
	u := UDP(rest[:UDPHeaderLen:UDPHeaderLen])
	ul := int(u.Length())
	if ul < UDPHeaderLen {
		return nil, nil, nil, errUDPLengthTiny
	}
	if ul > len(rest) {
		return nil, nil, nil, errUDPTruncated
	}
	return ip, u, rest[UDPHeaderLen:ul:ul], nil
}
