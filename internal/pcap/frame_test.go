package pcap

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

type frameCase struct {
	name     string
	linkType LinkType
	data     []byte

	etherType  uint16
	version    int
	src, dst   string
	ipHdrLen   int
	extLen     int
	vlanTags   int
	vlanID     uint16
	linkHdrLen int
}

func frameCases() []frameCase {
	udp := udpDatagram(0xc123, 4791, roceLike)
	v4 := ipv4Packet("10.99.0.2", "10.99.0.3", ProtocolUDP, nil, udp)
	v6 := ipv6Packet("fd00::2", "fd00::3", ProtocolUDP, nil, udp)
	const a4, b4, a6, b6 = "10.99.0.2", "10.99.0.3", "fd00::2", "fd00::3"

	// 8 bytes of hop-by-hop options (PadN) then a destination options
	// header of 16 bytes, then UDP.
	ext := []byte{
		ipv6DestOptions, 0, 1, 4, 0, 0, 0, 0,
		ProtocolUDP, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	}
	// An atomic fragment (offset 0, M clear) is a whole packet (RFC 6946).
	atomicFrag := []byte{ProtocolUDP, 0, 0, 0, 0xca, 0xfe, 0xf0, 0x0d}
	options := []byte{0x94, 0x04, 0x00, 0x00} // router alert
	padded := ethernetFrame(EtherTypeIPv4, v4)
	padded = append(padded, make([]byte, 24)...) // padding, FCS, trailer

	return []frameCase{
		{name: "ethernet ipv4", linkType: LinkTypeEthernet, data: ethernetFrame(EtherTypeIPv4, v4),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20, linkHdrLen: 14},
		{name: "ethernet ipv4 with padding", linkType: LinkTypeEthernet, data: padded,
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20, linkHdrLen: 14},
		{name: "ethernet ipv4 options", linkType: LinkTypeEthernet,
			data:      ethernetFrame(EtherTypeIPv4, ipv4Packet(a4, b4, ProtocolUDP, options, udp)),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 24, linkHdrLen: 14},
		{name: "ethernet 802.1Q ipv6", linkType: LinkTypeEthernet,
			data:      ethernetFrame(EtherTypeIPv6, v6, [2]uint16{etherTypeVLAN, 0x2064}),
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40,
			vlanTags: 1, vlanID: 100, linkHdrLen: 18},
		{name: "ethernet QinQ ipv4", linkType: LinkTypeEthernet,
			data:      ethernetFrame(EtherTypeIPv4, v4, [2]uint16{etherTypeQinQ, 7}, [2]uint16{etherTypeVLAN, 0xf00 | 42}),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20,
			vlanTags: 2, vlanID: 0xf00 | 42, linkHdrLen: 22},
		{name: "ethernet ipv6 extension headers", linkType: LinkTypeEthernet,
			data:      ethernetFrame(EtherTypeIPv6, ipv6Packet(a6, b6, ipv6HopByHop, ext, udp)),
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40, extLen: len(ext), linkHdrLen: 14},
		{name: "ipv6 atomic fragment", linkType: LinkTypeRaw,
			data:      ipv6Packet(a6, b6, ipv6Fragment, atomicFrag, udp),
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40, extLen: 8},
		{name: "sll ipv4", linkType: LinkTypeLinuxSLL, data: sllFrame(EtherTypeIPv4, v4),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20, linkHdrLen: 16},
		{name: "sll vlan ipv4", linkType: LinkTypeLinuxSLL,
			data:      sllFrame(etherTypeVLAN, append([]byte{0, 5, 0x08, 0x00}, v4...)),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20, vlanTags: 1, vlanID: 5, linkHdrLen: 20},
		{name: "sll2 ipv6", linkType: LinkTypeLinuxSLL2, data: sll2Frame(EtherTypeIPv6, v6),
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40, linkHdrLen: 20},
		{name: "sll2 ipv4", linkType: LinkTypeLinuxSLL2, data: sll2Frame(EtherTypeIPv4, v4),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20, linkHdrLen: 20},
		{name: "raw ipv4", linkType: LinkTypeRaw, data: v4,
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20},
		{name: "raw ipv6", linkType: LinkTypeRaw, data: v6,
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40},
		{name: "DLT_RAW 12 ipv4", linkType: LinkTypeRawDLT12, data: v4,
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20},
		{name: "DLT_RAW 14 ipv6", linkType: LinkTypeRawDLT14, data: v6,
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40},
		{name: "LINKTYPE_IPV4", linkType: LinkTypeIPv4, data: v4,
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20},
		{name: "LINKTYPE_IPV6", linkType: LinkTypeIPv6, data: v6,
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40},
		{name: "null little-endian AF_INET", linkType: LinkTypeNull, data: nullFrame(2, false, v4),
			etherType: EtherTypeIPv4, version: 4, src: a4, dst: b4, ipHdrLen: 20, linkHdrLen: 4},
		{name: "null big-endian AF_INET6 darwin", linkType: LinkTypeNull, data: nullFrame(30, true, v6),
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40, linkHdrLen: 4},
		{name: "loop AF_INET6 openbsd", linkType: LinkTypeLoop, data: nullFrame(24, true, v6),
			etherType: EtherTypeIPv6, version: 6, src: a6, dst: b6, ipHdrLen: 40, linkHdrLen: 4},
	}
}

func TestDecodeFrame(t *testing.T) {
	for _, tc := range frameCases() {
		t.Run(tc.name, func(t *testing.T) {
			f, err := DecodeFrame(tc.linkType, tc.data)
			if err != nil {
				t.Fatalf("DecodeFrame: %v", err)
			}
			if f.LinkType != tc.linkType || f.EtherType != tc.etherType || f.IPVersion != tc.version {
				t.Errorf("link type %v ethertype %#04x version %d, want %v %#04x %d",
					f.LinkType, f.EtherType, f.IPVersion, tc.linkType, tc.etherType, tc.version)
			}
			if f.Src != netip.MustParseAddr(tc.src) || f.Dst != netip.MustParseAddr(tc.dst) {
				t.Errorf("addresses %v → %v, want %s → %s", f.Src, f.Dst, tc.src, tc.dst)
			}
			if len(f.LinkHeader) != tc.linkHdrLen || f.VLANTags != tc.vlanTags || f.VLANID != tc.vlanID {
				t.Errorf("link header %d bytes, %d VLAN tags, VID %d; want %d, %d, %d",
					len(f.LinkHeader), f.VLANTags, f.VLANID, tc.linkHdrLen, tc.vlanTags, tc.vlanID)
			}
			if len(f.IPHeader) != tc.ipHdrLen || len(f.IPv6ExtHeaders) != tc.extLen {
				t.Errorf("IP header %d bytes, extension headers %d; want %d, %d",
					len(f.IPHeader), len(f.IPv6ExtHeaders), tc.ipHdrLen, tc.extLen)
			}
			if f.Protocol != ProtocolUDP || f.SrcPort != 0xc123 || f.DstPort != 4791 || f.UDPChecksum != 0 {
				t.Errorf("protocol %d ports %d → %d checksum %#x", f.Protocol, f.SrcPort, f.DstPort, f.UDPChecksum)
			}
			if !bytes.Equal(f.UDPPayload, roceLike) {
				t.Errorf("UDP payload % x, want % x", f.UDPPayload, roceLike)
			}
			if len(f.UDPHeader) != udpHeaderLen {
				t.Errorf("UDP header %d bytes", len(f.UDPHeader))
			}
			wantIP := tc.ipHdrLen + tc.extLen + udpHeaderLen + len(roceLike)
			if len(f.IPPacket) != wantIP {
				t.Errorf("IP packet %d bytes, want %d (padding not trimmed?)", len(f.IPPacket), wantIP)
			}
			// Zero copy: every slice must point into the input.
			for name, s := range map[string][]byte{
				"IPHeader": f.IPHeader, "UDPHeader": f.UDPHeader, "UDPPayload": f.UDPPayload, "IPPacket": f.IPPacket,
			} {
				if !within(tc.data, s) {
					t.Errorf("%s is not a subslice of the frame", name)
				}
			}
			if tc.version == 4 {
				if f.HopLimit != 64 || f.TrafficClass != 0x02 || f.ID != 0x1234 || !f.DontFragment {
					t.Errorf("IPv4 TTL %d TOS %#x ID %#x DF %v", f.HopLimit, f.TrafficClass, f.ID, f.DontFragment)
				}
			} else if f.HopLimit != 255 || f.TrafficClass != 0x02 || f.FlowLabel != 0x12345 {
				t.Errorf("IPv6 hop limit %d traffic class %#x flow label %#x", f.HopLimit, f.TrafficClass, f.FlowLabel)
			}
		})
	}
}

// within reports whether sub is a subslice of whole (shares its memory).
func within(whole, sub []byte) bool {
	if len(sub) == 0 {
		return true
	}
	for i := range whole {
		if &whole[i] == &sub[0] {
			return i+len(sub) <= len(whole)
		}
	}
	return false
}

func TestDecodeFrameTruncatedAtEveryByte(t *testing.T) {
	for _, tc := range frameCases() {
		if tc.name == "ethernet ipv4 with padding" {
			continue // cutting the padding leaves a whole packet
		}
		t.Run(tc.name, func(t *testing.T) {
			for n := range len(tc.data) {
				_, err := DecodeFrame(tc.linkType, tc.data[:n])
				if !errors.Is(err, ErrTruncated) {
					t.Fatalf("cut at %d of %d bytes: err = %v, want ErrTruncated", n, len(tc.data), err)
				}
			}
		})
	}
}

func TestDecodeFrameErrors(t *testing.T) {
	udp := udpDatagram(1000, 4791, []byte("payload"))
	v4 := func(proto uint8, payload []byte) []byte {
		return ipv4Packet("192.0.2.1", "192.0.2.2", proto, nil, payload)
	}
	mod := func(b []byte, f func([]byte)) []byte {
		b = bytes.Clone(b)
		f(b)
		return b
	}
	arp := ethernetFrame(0x0806, make([]byte, 28))
	tests := []struct {
		name     string
		linkType LinkType
		data     []byte
		want     error
		// what the Frame must still say about the layers decoded.
		check func(t *testing.T, f Frame)
	}{
		{"arp", LinkTypeEthernet, arp, ErrNotIP, func(t *testing.T, f Frame) {
			if f.EtherType != 0x0806 {
				t.Errorf("EtherType %#x, want 0x0806", f.EtherType)
			}
		}},
		{"802.3 length field", LinkTypeEthernet, ethernetFrame(46, make([]byte, 46)), ErrNotIP, nil},
		{"vlan arp", LinkTypeEthernet, ethernetFrame(0x0806, make([]byte, 28), [2]uint16{etherTypeVLAN, 3}), ErrNotIP, nil},
		{"sll2 arp", LinkTypeLinuxSLL2, sll2Frame(0x0806, make([]byte, 28)), ErrNotIP, nil},
		{"tcp", LinkTypeEthernet, ethernetFrame(EtherTypeIPv4, v4(6, make([]byte, 20))), ErrNotUDP, func(t *testing.T, f Frame) {
			if f.Protocol != 6 || f.Src != netip.MustParseAddr("192.0.2.1") {
				t.Errorf("protocol %d src %v", f.Protocol, f.Src)
			}
		}},
		{"icmp", LinkTypeRaw, v4(1, make([]byte, 8)), ErrNotUDP, nil},
		{"ipv6 icmp", LinkTypeRaw, ipv6Packet("::1", "::2", 58, nil, make([]byte, 8)), ErrNotUDP, nil},
		{"ipv6 no next header", LinkTypeRaw, ipv6Packet("::1", "::2", 59, nil, nil), ErrNotUDP, nil},
		{"ipv4 more fragments", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[6] = 0x20 }), ErrFragment, func(t *testing.T, f Frame) {
			if !f.MoreFragments || f.FragmentOffset != 0 {
				t.Errorf("MF %v offset %d", f.MoreFragments, f.FragmentOffset)
			}
		}},
		{"ipv4 later fragment", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[6], b[7] = 0, 3 }), ErrFragment, func(t *testing.T, f Frame) {
			if f.FragmentOffset != 24 {
				t.Errorf("offset %d, want 24", f.FragmentOffset)
			}
		}},
		{"ipv6 first fragment", LinkTypeRaw, ipv6Packet("::1", "::2", ipv6Fragment, []byte{ProtocolUDP, 0, 0, 1, 0, 0, 0, 9}, udp), ErrFragment, func(t *testing.T, f Frame) {
			if !f.MoreFragments || f.ID != 9 || f.Protocol != ProtocolUDP {
				t.Errorf("MF %v ID %d protocol %d", f.MoreFragments, f.ID, f.Protocol)
			}
		}},
		{"ipv6 later fragment", LinkTypeRaw, ipv6Packet("::1", "::2", ipv6Fragment, []byte{ProtocolUDP, 0, 0, 8, 0, 0, 0, 9}, udp), ErrFragment, nil},
		{"ipv4 header length 16", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[0] = 0x44 }), ErrMalformed, nil},
		{"ipv4 options beyond the frame", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[0] = 0x4f })[:40], ErrTruncated, nil},
		{"ipv4 total length below header", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[2], b[3] = 0, 19 }), ErrMalformed, nil},
		{"ipv4 total length beyond capture", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[3]++ }), ErrTruncated, func(t *testing.T, f Frame) {
			if f.SrcPort != 1000 || f.DstPort != 4791 || f.UDPHeader != nil || len(f.IPHeader) != 20 {
				t.Errorf("ports %d → %d, UDP header %v, IP header %d bytes; want the captured ports and header", f.SrcPort, f.DstPort, f.UDPHeader, len(f.IPHeader))
			}
		}},
		{"ipv6 cut by the capture", LinkTypeRaw, ipv6Packet("::1", "::2", ProtocolUDP, nil, udp)[:46], ErrTruncated, func(t *testing.T, f Frame) {
			if f.DstPort != 4791 || f.Protocol != ProtocolUDP || f.Src != netip.MustParseAddr("::1") {
				t.Errorf("port %d protocol %d src %v", f.DstPort, f.Protocol, f.Src)
			}
		}},
		{"ethertype ipv4 carrying ipv6", LinkTypeEthernet, ethernetFrame(EtherTypeIPv4, ipv6Packet("::1", "::2", ProtocolUDP, nil, udp)), ErrMalformed, nil},
		{"ethertype ipv6 carrying ipv4", LinkTypeEthernet, ethernetFrame(EtherTypeIPv6, append(v4(ProtocolUDP, udp), make([]byte, 40)...)), ErrMalformed, nil},
		{"LINKTYPE_IPV4 carrying ipv6", LinkTypeIPv4, ipv6Packet("::1", "::2", ProtocolUDP, nil, udp), ErrMalformed, nil},
		{"LINKTYPE_IPV6 carrying ipv4", LinkTypeIPv6, v4(ProtocolUDP, udp), ErrMalformed, nil},
		{"raw version 5", LinkTypeRaw, mod(v4(ProtocolUDP, udp), func(b []byte) { b[0] = 0x55 }), ErrNotIP, nil},
		{"null AF_UNSPEC", LinkTypeNull, nullFrame(0, false, v4(ProtocolUDP, udp)), ErrNotIP, nil},
		{"loop little-endian AF_INET", LinkTypeLoop, nullFrame(2, false, v4(ProtocolUDP, udp)), ErrNotIP, nil},
		{"udp length beyond ip", LinkTypeRaw, v4(ProtocolUDP, mod(udp, func(b []byte) { b[5]++ })), ErrMalformed, nil},
		{"udp length below 8", LinkTypeRaw, v4(ProtocolUDP, mod(udp, func(b []byte) { b[4], b[5] = 0, 7 })), ErrMalformed, nil},
		{"udp header cut by ip length", LinkTypeRaw, v4(ProtocolUDP, udp[:6]), ErrMalformed, nil},
		{"ipv6 jumbogram", LinkTypeRaw, mod(ipv6Packet("::1", "::2", ProtocolUDP, nil, udp), func(b []byte) { b[4], b[5] = 0, 0 }), ErrMalformed, nil},
		{"ipv6 extension header overruns", LinkTypeRaw, ipv6Packet("::1", "::2", ipv6HopByHop, []byte{ProtocolUDP, 3, 0, 0, 0, 0, 0, 0}, udp), ErrMalformed, nil},
		{"unsupported link type", LinkType(147), v4(ProtocolUDP, udp), ErrUnsupportedLinkType, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := DecodeFrame(tc.linkType, tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if f.UDPPayload != nil {
				t.Errorf("UDPPayload set on error")
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

// TestDecodeFrameSkipsWithoutAllocating holds DecodeFrame to the promise the
// dump tool and netio rely on: walking frames, including the ones skipped as
// not UDP, does not allocate.
func TestDecodeFrameSkipsWithoutAllocating(t *testing.T) {
	frames := [][]byte{
		ethernetFrame(EtherTypeIPv4, ipv4Packet("10.0.0.1", "10.0.0.2", ProtocolUDP, nil, udpDatagram(1, 4791, roceLike))),
		ethernetFrame(EtherTypeIPv4, ipv4Packet("10.0.0.1", "10.0.0.2", 6, nil, make([]byte, 20))),
		ethernetFrame(0x0806, make([]byte, 28)),
		ipv6Packet("::1", "::2", ipv6Fragment, []byte{ProtocolUDP, 0, 0, 1, 0, 0, 0, 9}, nil),
	}
	lts := []LinkType{LinkTypeEthernet, LinkTypeEthernet, LinkTypeEthernet, LinkTypeRaw}
	allocs := testing.AllocsPerRun(100, func() {
		for i, b := range frames {
			if _, err := DecodeFrame(lts[i], b); err != nil && !errors.Is(err, ErrNotUDP) &&
				!errors.Is(err, ErrNotIP) && !errors.Is(err, ErrFragment) {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("DecodeFrame allocates %v times per run", allocs)
	}
}

func TestLinkTypeString(t *testing.T) {
	tests := []struct {
		lt   LinkType
		want string
		ok   bool
	}{
		{LinkTypeEthernet, "ETHERNET", true},
		{LinkTypeRaw, "RAW", true},
		{LinkTypeRawDLT12, "RAW", true},
		{LinkTypeLinuxSLL2, "LINUX_SLL2", true},
		{LinkType(147), "LINKTYPE(147)", false},
	}
	for _, tc := range tests {
		if got := tc.lt.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", uint32(tc.lt), got, tc.want)
		}
		if got := tc.lt.Supported(); got != tc.ok {
			t.Errorf("%v.Supported() = %v, want %v", tc.lt, got, tc.ok)
		}
	}
}
