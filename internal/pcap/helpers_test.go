package pcap

import (
	"encoding/binary"
	"net/netip"
)

// Builders for the frames the tests feed to DecodeFrame and the Writer.
// They produce well-formed headers (lengths and IPv4 checksum right) so that
// each test can break exactly one thing.

func udpDatagram(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, udpHeaderLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	// Checksum 0, as rxe sends.
	copy(b[udpHeaderLen:], payload)
	return b
}

// ipv4Packet builds an IPv4 packet with DF set, TTL 64, id 0x1234 and the
// given options (a multiple of 4 bytes).
func ipv4Packet(src, dst string, proto uint8, options, payload []byte) []byte {
	hl := ipv4MinHeaderLen + len(options)
	b := make([]byte, hl+len(payload))
	b[0] = 0x40 | byte(hl/4)
	b[1] = 0x02 // ECN ECT(0), to show TOS is reported
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], 0x1234)
	binary.BigEndian.PutUint16(b[6:], 0x4000)
	b[8] = 64
	b[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	copy(b[20:], options)
	setIPv4Checksum(b[:hl])
	copy(b[hl:], payload)
	return b
}

func setIPv4Checksum(h []byte) {
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
}

// ipv6Packet builds an IPv6 packet with traffic class 0x02, flow label
// 0x12345 and hop limit 255; ext is a chain of extension headers already
// encoded, whose first header type is next.
func ipv6Packet(src, dst string, next uint8, ext, payload []byte) []byte {
	b := make([]byte, ipv6HeaderLen+len(ext)+len(payload))
	binary.BigEndian.PutUint32(b[0:], 6<<28|0x02<<20|0x12345)
	binary.BigEndian.PutUint16(b[4:], uint16(len(ext)+len(payload)))
	b[6] = next
	b[7] = 255
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	copy(b[40:], ext)
	copy(b[40+len(ext):], payload)
	return b
}

// ethernetFrame builds an Ethernet frame; each tag is pushed as an
// (EtherType, VID) pair before the final EtherType.
func ethernetFrame(etherType uint16, payload []byte, tags ...[2]uint16) []byte {
	b := []byte{
		0x52, 0x54, 0x00, 0x99, 0x00, 0x03, // destination
		0x52, 0x54, 0x00, 0x99, 0x00, 0x02, // source
	}
	for _, t := range tags {
		b = binary.BigEndian.AppendUint16(b, t[0])
		b = binary.BigEndian.AppendUint16(b, t[1])
	}
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, payload...)
}

func sllFrame(protocol uint16, payload []byte) []byte {
	b := make([]byte, sllHeaderLen, sllHeaderLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], 4) // sent by us
	binary.BigEndian.PutUint16(b[2:], 1) // ARPHRD_ETHER
	binary.BigEndian.PutUint16(b[4:], 6)
	copy(b[6:], []byte{0x52, 0x54, 0x00, 0x99, 0x00, 0x02})
	binary.BigEndian.PutUint16(b[14:], protocol)
	return append(b, payload...)
}

func sll2Frame(protocol uint16, payload []byte) []byte {
	b := make([]byte, sll2HeaderLen, sll2HeaderLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], protocol)
	binary.BigEndian.PutUint32(b[4:], 3) // interface index
	binary.BigEndian.PutUint16(b[8:], 1) // ARPHRD_ETHER
	b[10] = 0                            // to us
	b[11] = 6                            // address length
	copy(b[12:], []byte{0x52, 0x54, 0x00, 0x99, 0x00, 0x03})
	return append(b, payload...)
}

func nullFrame(family uint32, bigEndian bool, payload []byte) []byte {
	b := make([]byte, nullHeaderLen, nullHeaderLen+len(payload))
	if bigEndian {
		binary.BigEndian.PutUint32(b, family)
	} else {
		binary.LittleEndian.PutUint32(b, family)
	}
	return append(b, payload...)
}

// roceLike is a UDP payload shaped like a RoCEv2 ACK: BTH, AETH, ICRC.
var roceLike = []byte{
	0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x28, 0x00, 0x5a, 0x0c, 0xb1, // BTH
	0x1f, 0x00, 0x00, 0x01, // AETH
	0xde, 0xad, 0xbe, 0xef, // ICRC
}
