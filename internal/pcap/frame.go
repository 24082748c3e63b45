package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// EtherType values of the network layers DecodeFrame decodes, and the IP
// protocol number of UDP.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	ProtocolUDP   = 17
)

const (
	etherTypeVLAN     = 0x8100 // IEEE 802.1Q customer tag
	etherTypeQinQ     = 0x88a8 // IEEE 802.1ad service tag
	etherTypeQinQOld  = 0x9100 // pre-standard double tagging
	etherTypeMinValue = 0x0600 // below this the field is an 802.3 length

	ipv6HopByHop    = 0
	ipv6Routing     = 43
	ipv6Fragment    = 44
	ipv6AuthHeader  = 51
	ipv6DestOptions = 60
	ipv6Mobility    = 135
	ipv6HIP         = 139
	ipv6Shim6       = 140

	ethernetHeaderLen = 14
	vlanTagLen        = 4
	sllHeaderLen      = 16
	sll2HeaderLen     = 20
	nullHeaderLen     = 4
	ipv4MinHeaderLen  = 20
	ipv6HeaderLen     = 40
	udpHeaderLen      = 8
)

// Errors returned by [DecodeFrame]. ErrNotIP, ErrNotUDP and ErrFragment are
// returned unwrapped, so skipping frames that are not UDP costs no
// allocation; the Frame says what the frame was instead (EtherType,
// Protocol). ErrTruncated, ErrMalformed and ErrUnsupportedLinkType are
// wrapped with details.
var (
	// ErrUnsupportedLinkType means the link type is not one DecodeFrame
	// knows; see [LinkType.Supported].
	ErrUnsupportedLinkType = errors.New("pcap: unsupported link type")
	// ErrNotIP means the link layer carries something other than IPv4 or
	// IPv6 (ARP, LLDP, 802.2 LLC, ...).
	ErrNotIP = errors.New("pcap: not an IP packet")
	// ErrNotUDP means the IP packet carries something other than UDP.
	ErrNotUDP = errors.New("pcap: not a UDP datagram")
	// ErrFragment means the packet is an IP fragment; fragments are not
	// reassembled (RoCEv2 packets are sent with DF and are never
	// fragmented).
	ErrFragment = errors.New("pcap: IP fragment")
	// ErrMalformed means a header is inconsistent: a wrong IP version, an
	// IPv4 header length below 20, a UDP length that does not fit, ...
	ErrMalformed = errors.New("pcap: malformed frame")
)

// Frame is a frame decoded down to the UDP payload. All byte fields are
// subslices of the decoded data, never copies: they stay valid only as long
// as that data does. When [DecodeFrame] fails, the fields of the layers
// decoded before the failure are set and the rest are zero.
type Frame struct {
	LinkType LinkType
	// LinkHeader is the link-layer header including VLAN tags; empty for
	// raw IP link types.
	LinkHeader []byte
	// EtherType is the protocol the link layer announces, after any VLAN
	// tags; for link types without one (raw IP, BSD loopback) it is set to
	// EtherTypeIPv4 or EtherTypeIPv6 from the IP version or address family.
	EtherType uint16
	// VLANTags is the number of 802.1Q/802.1ad tags skipped, and VLANID
	// the VLAN identifier of the innermost one.
	VLANTags int
	VLANID   uint16

	// IPVersion is 4 or 6, or 0 when the frame is not IP.
	IPVersion int
	Src, Dst  netip.Addr
	// IPHeader is exactly the IP header: for IPv4 its IHL*4 bytes with any
	// options, for IPv6 the fixed 40 bytes. This is the part the RoCEv2
	// ICRC covers.
	IPHeader []byte
	// IPv6ExtHeaders are the IPv6 extension headers between the fixed
	// header and UDP (hop-by-hop, routing, destination options, an atomic
	// fragment header, ...), usually empty.
	IPv6ExtHeaders []byte
	// IPPacket is the whole IP packet, cut at the IP total or payload
	// length so that Ethernet padding and a trailing FCS are excluded.
	IPPacket []byte
	// Protocol is the IPv4 protocol, or the IPv6 next header after the
	// extension headers.
	Protocol uint8
	// TrafficClass is the IPv4 TOS byte or the IPv6 traffic class (DSCP and
	// ECN).
	TrafficClass uint8
	// HopLimit is the IPv4 TTL or the IPv6 hop limit.
	HopLimit uint8
	// FlowLabel is the IPv6 flow label.
	FlowLabel uint32
	// ID is the IPv4 identification field (the RoCEv2 ICRC covers it), or
	// the IPv6 fragment identification when a fragment header is present.
	ID uint32
	// DontFragment is the IPv4 DF flag.
	DontFragment bool
	// MoreFragments and FragmentOffset (in bytes) describe an IP fragment.
	MoreFragments  bool
	FragmentOffset int

	// UDPHeader is the 8-byte UDP header.
	UDPHeader []byte
	// SrcPort and DstPort are the UDP ports. They are also set when the
	// capture cut the packet short (ErrTruncated) but holds them.
	SrcPort, DstPort uint16
	UDPChecksum      uint16
	// UDPPayload is the UDP payload, cut at the UDP length: for RoCEv2 the
	// BTH, extension headers, payload, pad and ICRC.
	UDPPayload []byte
}

// DecodeFrame decodes data, a frame of the given link type, through the link
// layer (skipping VLAN tags), IPv4 (with options) or IPv6 (with simple
// extension headers) and UDP. It does not allocate when it succeeds or
// returns ErrNotIP, ErrNotUDP or ErrFragment. IP header checksums are not
// verified: captures taken on a sending host often have them left to the
// NIC.
func DecodeFrame(linkType LinkType, data []byte) (Frame, error) {
	f := Frame{LinkType: linkType}
	off, err := f.decodeLink(data)
	if err != nil {
		return f, err
	}
	ip := data[off:]
	switch f.EtherType {
	case EtherTypeIPv4:
		err = f.decodeIPv4(ip)
	case EtherTypeIPv6:
		err = f.decodeIPv6(ip)
	default:
		return f, ErrNotIP
	}
	if err != nil {
		return f, err
	}
	return f, f.decodeUDP()
}

// decodeLink sets the link-layer fields and returns the offset of the
// network-layer header.
func (f *Frame) decodeLink(data []byte) (int, error) {
	switch f.LinkType {
	case LinkTypeEthernet:
		if len(data) < ethernetHeaderLen {
			return 0, truncated("Ethernet header", ethernetHeaderLen, len(data))
		}
		return f.skipVLANs(data, binary.BigEndian.Uint16(data[12:]), ethernetHeaderLen)
	case LinkTypeLinuxSLL:
		// packet type, ARPHRD type, address length, 8 address bytes, protocol
		if len(data) < sllHeaderLen {
			return 0, truncated("Linux cooked (SLL) header", sllHeaderLen, len(data))
		}
		return f.skipVLANs(data, binary.BigEndian.Uint16(data[14:]), sllHeaderLen)
	case LinkTypeLinuxSLL2:
		// protocol, reserved, interface index, ARPHRD type, packet type,
		// address length, 8 address bytes
		if len(data) < sll2HeaderLen {
			return 0, truncated("Linux cooked (SLL2) header", sll2HeaderLen, len(data))
		}
		return f.skipVLANs(data, binary.BigEndian.Uint16(data[0:]), sll2HeaderLen)
	case LinkTypeNull, LinkTypeLoop:
		if len(data) < nullHeaderLen {
			return 0, truncated("loopback header", nullHeaderLen, len(data))
		}
		f.LinkHeader = data[:nullHeaderLen]
		// The address family is in network order for LOOP and in the
		// capturing host's order for NULL; the values are small, so the
		// order that gives a 16-bit value is the right one.
		af := binary.BigEndian.Uint32(data)
		if le := binary.LittleEndian.Uint32(data); f.LinkType == LinkTypeNull && le <= 0xffff {
			af = le
		}
		switch af {
		case 2: // AF_INET everywhere
			f.EtherType = EtherTypeIPv4
		case 10, 24, 28, 30: // AF_INET6: Linux, Net/OpenBSD, FreeBSD, Darwin
			f.EtherType = EtherTypeIPv6
		default:
			return 0, ErrNotIP
		}
		return nullHeaderLen, nil
	case LinkTypeRaw, LinkTypeRawDLT12, LinkTypeRawDLT14, LinkTypeIPv4, LinkTypeIPv6:
		if len(data) < 1 {
			return 0, truncated("IP header", 1, 0)
		}
		version := data[0] >> 4
		switch {
		case f.LinkType == LinkTypeIPv4 && version != 4,
			f.LinkType == LinkTypeIPv6 && version != 6:
			return 0, fmt.Errorf("%w: IP version %d in a %v capture", ErrMalformed, version, f.LinkType)
		case version == 4:
			f.EtherType = EtherTypeIPv4
		case version == 6:
			f.EtherType = EtherTypeIPv6
		default:
			return 0, ErrNotIP
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%w: %v", ErrUnsupportedLinkType, f.LinkType)
}

// skipVLANs steps over VLAN tags starting at off, where etherType was read
// from, and sets the link-layer fields.
func (f *Frame) skipVLANs(data []byte, etherType uint16, off int) (int, error) {
	for etherType == etherTypeVLAN || etherType == etherTypeQinQ || etherType == etherTypeQinQOld {
		if len(data) < off+vlanTagLen {
			return 0, truncated("VLAN tag", off+vlanTagLen, len(data))
		}
		f.VLANTags++
		f.VLANID = binary.BigEndian.Uint16(data[off:]) & 0x0fff
		etherType = binary.BigEndian.Uint16(data[off+2:])
		off += vlanTagLen
	}
	f.LinkHeader = data[:off]
	f.EtherType = etherType
	if etherType < etherTypeMinValue {
		// An 802.3 length field: LLC follows, not IP.
		return 0, ErrNotIP
	}
	return off, nil
}

func (f *Frame) decodeIPv4(ip []byte) error {
	if len(ip) < ipv4MinHeaderLen {
		return truncated("IPv4 header", ipv4MinHeaderLen, len(ip))
	}
	if v := ip[0] >> 4; v != 4 {
		return fmt.Errorf("%w: IP version %d in an IPv4 frame", ErrMalformed, v)
	}
	ihl := int(ip[0]&0x0f) * 4
	if ihl < ipv4MinHeaderLen {
		return fmt.Errorf("%w: IPv4 header length %d", ErrMalformed, ihl)
	}
	if len(ip) < ihl {
		return truncated("IPv4 header with options", ihl, len(ip))
	}
	f.IPVersion = 4
	f.TrafficClass = ip[1]
	f.ID = uint32(binary.BigEndian.Uint16(ip[4:]))
	flags := binary.BigEndian.Uint16(ip[6:])
	f.DontFragment = flags&0x4000 != 0
	f.MoreFragments = flags&0x2000 != 0
	f.FragmentOffset = int(flags&0x1fff) * 8
	f.HopLimit = ip[8]
	f.Protocol = ip[9]
	f.Src = netip.AddrFrom4([4]byte(ip[12:16]))
	f.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
	f.IPHeader = ip[:ihl]
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if total < ihl {
		return fmt.Errorf("%w: IPv4 total length %d below header length %d", ErrMalformed, total, ihl)
	}
	if len(ip) < total {
		if f.Protocol == ProtocolUDP && f.FragmentOffset == 0 {
			f.peekPorts(ip[ihl:])
		}
		return truncated("IPv4 packet", total, len(ip))
	}
	f.IPPacket = ip[:total]
	if f.MoreFragments || f.FragmentOffset != 0 {
		return ErrFragment
	}
	if f.Protocol != ProtocolUDP {
		return ErrNotUDP
	}
	f.UDPHeader = ip[ihl:total] // cut to 8 bytes by decodeUDP
	return nil
}

func (f *Frame) decodeIPv6(ip []byte) error {
	if len(ip) < ipv6HeaderLen {
		return truncated("IPv6 header", ipv6HeaderLen, len(ip))
	}
	word := binary.BigEndian.Uint32(ip)
	if v := word >> 28; v != 6 {
		return fmt.Errorf("%w: IP version %d in an IPv6 frame", ErrMalformed, v)
	}
	f.IPVersion = 6
	f.TrafficClass = uint8(word >> 20)
	f.FlowLabel = word & 0xfffff
	next := ip[6]
	// The final next header replaces this after the extension headers; set
	// it now so that a truncated packet still says what it carries.
	f.Protocol = next
	f.HopLimit = ip[7]
	f.Src = netip.AddrFrom16([16]byte(ip[8:24]))
	f.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
	f.IPHeader = ip[:ipv6HeaderLen]
	total := ipv6HeaderLen + int(binary.BigEndian.Uint16(ip[4:]))
	if len(ip) < total {
		if next == ProtocolUDP {
			f.peekPorts(ip[ipv6HeaderLen:])
		}
		return truncated("IPv6 packet", total, len(ip))
	}
	f.IPPacket = ip[:total]
	// A jumbogram (payload length 0 with a hop-by-hop jumbo option) is not
	// decoded: it ends up as a UDP header that does not fit, reported as
	// malformed.
	off := ipv6HeaderLen
	for {
		rest := ip[off:total]
		var n int
		switch next {
		case ipv6HopByHop, ipv6Routing, ipv6DestOptions, ipv6Mobility, ipv6HIP, ipv6Shim6:
			// The uniform layout of RFC 6564: next header, length in
			// 8-byte units not counting the first 8.
			if len(rest) < 2 {
				return fmt.Errorf("%w: IPv6 extension header %d does not fit", ErrMalformed, next)
			}
			n = (int(rest[1]) + 1) * 8
		case ipv6AuthHeader:
			// AH counts 4-byte units, not counting the first 8 bytes.
			if len(rest) < 2 {
				return fmt.Errorf("%w: IPv6 authentication header does not fit", ErrMalformed)
			}
			n = (int(rest[1]) + 2) * 4
		case ipv6Fragment:
			n = 8
			if len(rest) < n {
				return fmt.Errorf("%w: IPv6 fragment header does not fit", ErrMalformed)
			}
			fo := binary.BigEndian.Uint16(rest[2:])
			f.FragmentOffset = int(fo &^ 7)
			f.MoreFragments = fo&1 != 0
			f.ID = binary.BigEndian.Uint32(rest[4:])
		default:
			f.Protocol = next
			f.IPv6ExtHeaders = ip[ipv6HeaderLen:off]
			if f.MoreFragments || f.FragmentOffset != 0 {
				return ErrFragment
			}
			if next != ProtocolUDP {
				return ErrNotUDP
			}
			f.UDPHeader = rest
			return nil
		}
		if len(rest) < n {
			return fmt.Errorf("%w: IPv6 extension header %d of %d bytes does not fit in %d", ErrMalformed, next, n, len(rest))
		}
		next = rest[0]
		off += n
		// A fragment that is not the first carries no upper-layer header:
		// stop here rather than read payload bytes as headers.
		if f.FragmentOffset != 0 {
			f.Protocol = next
			f.IPv6ExtHeaders = ip[ipv6HeaderLen:off]
			return ErrFragment
		}
	}
}

// decodeUDP decodes the UDP header at the start of f.UDPHeader, which
// decodeIPv4/decodeIPv6 set to the rest of the IP packet.
func (f *Frame) decodeUDP() error {
	seg := f.UDPHeader
	f.UDPHeader = nil
	if len(seg) < udpHeaderLen {
		return fmt.Errorf("%w: UDP header needs %d bytes, IP payload has %d", ErrMalformed, udpHeaderLen, len(seg))
	}
	f.SrcPort = binary.BigEndian.Uint16(seg[0:])
	f.DstPort = binary.BigEndian.Uint16(seg[2:])
	f.UDPChecksum = binary.BigEndian.Uint16(seg[6:])
	ulen := int(binary.BigEndian.Uint16(seg[4:]))
	if ulen < udpHeaderLen || ulen > len(seg) {
		return fmt.Errorf("%w: UDP length %d, IP payload has %d bytes", ErrMalformed, ulen, len(seg))
	}
	f.UDPHeader = seg[:udpHeaderLen]
	f.UDPPayload = seg[udpHeaderLen:ulen]
	return nil
}

// peekPorts sets the UDP ports of a packet cut short by the capture, when
// the captured part holds them, so that a reader can still tell which
// application the packet was for.
func (f *Frame) peekPorts(udp []byte) {
	if len(udp) >= 4 {
		f.SrcPort = binary.BigEndian.Uint16(udp[0:])
		f.DstPort = binary.BigEndian.Uint16(udp[2:])
	}
}

func truncated(what string, need, have int) error {
	return fmt.Errorf("%w: %s needs %d bytes, frame has %d", ErrTruncated, what, need, have)
}
