package pcap

import "strconv"

// LinkType is a LINKTYPE_ value from the pcap file header: it says which
// link-layer header starts every record. Values follow the tcpdump.org
// link-layer header type registry.
type LinkType uint32

// Link types this package can write and decode. Others may be read from a
// file; [DecodeFrame] rejects them with [ErrUnsupportedLinkType].
const (
	// LinkTypeNull is BSD loopback: a 4-byte address family in the byte
	// order of the capturing host, then the IP packet.
	LinkTypeNull LinkType = 0
	// LinkTypeEthernet is IEEE 802.3 Ethernet (DLT_EN10MB).
	LinkTypeEthernet LinkType = 1
	// LinkTypeRawDLT12 is DLT_RAW as written by old libpcap versions on most
	// platforms; the record starts with an IPv4 or IPv6 header.
	LinkTypeRawDLT12 LinkType = 12
	// LinkTypeRawDLT14 is DLT_RAW as written by old libpcap versions on
	// OpenBSD.
	LinkTypeRawDLT14 LinkType = 14
	// LinkTypeRaw is LINKTYPE_RAW, raw IPv4 or IPv6 told apart by the version
	// nibble. It is the value libpcap writes for DLT_RAW today.
	LinkTypeRaw LinkType = 101
	// LinkTypeLoop is OpenBSD loopback: like [LinkTypeNull] but the address
	// family is in network byte order.
	LinkTypeLoop LinkType = 108
	// LinkTypeLinuxSLL is the Linux "cooked" capture header v1, what
	// "tcpdump -i any" produces on older systems.
	LinkTypeLinuxSLL LinkType = 113
	// LinkTypeIPv4 is raw IPv4 only.
	LinkTypeIPv4 LinkType = 228
	// LinkTypeIPv6 is raw IPv6 only.
	LinkTypeIPv6 LinkType = 229
	// LinkTypeLinuxSLL2 is the Linux "cooked" capture header v2, what
	// "tcpdump -i any" produces with libpcap 1.10 and later.
	LinkTypeLinuxSLL2 LinkType = 276
)

// String returns the registry name without the LINKTYPE_ prefix, or the
// number for types this package does not know.
func (t LinkType) String() string {
	switch t {
	case LinkTypeNull:
		return "NULL"
	case LinkTypeEthernet:
		return "ETHERNET"
	case LinkTypeRawDLT12, LinkTypeRawDLT14, LinkTypeRaw:
		return "RAW"
	case LinkTypeLoop:
		return "LOOP"
	case LinkTypeLinuxSLL:
		return "LINUX_SLL"
	case LinkTypeIPv4:
		return "IPV4"
	case LinkTypeIPv6:
		return "IPV6"
	case LinkTypeLinuxSLL2:
		return "LINUX_SLL2"
	}
	return "LINKTYPE(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Supported reports whether [DecodeFrame] can decode frames of this link
// type.
func (t LinkType) Supported() bool {
	switch t {
	case LinkTypeNull, LinkTypeEthernet, LinkTypeRawDLT12, LinkTypeRawDLT14,
		LinkTypeRaw, LinkTypeLoop, LinkTypeLinuxSLL, LinkTypeIPv4,
		LinkTypeIPv6, LinkTypeLinuxSLL2:
		return true
	}
	return false
}
