package mad

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// This file is rdma_cm's addressing on top of the IB CM
// (drivers/infiniband/core/cma.c): port spaces, service IDs and the
// header at the start of a REQ's (and SIDR_REQ's) private data.

// PortSpace is an rdma_cm port space (enum rdma_port_space).
type PortSpace uint16

// Port spaces. A TCP-like RC endpoint uses PortSpaceTCP, a UD one
// PortSpaceUDP (resolved with SIDR).
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106
	PortSpaceUDP   PortSpace = 0x0111
	PortSpaceIB    PortSpace = 0x013F
)

func (p PortSpace) String() string {
	switch p {
	case PortSpaceIPoIB:
		return "IPoIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return "PortSpace(0x" + strconv.FormatUint(uint64(p), 16) + ")"
}

// ServiceID is the 64-bit service ID a REQ or SIDR_REQ asks for; the
// passive side's listeners are keyed by it.
type ServiceID uint64

// RDMAServiceID returns the service ID rdma_cm uses for a port of a port
// space: (ps << 16) + port (cma_get_service_id), e.g. 0x0000000001061c06
// for rping's TCP port 7174.
func RDMAServiceID(ps PortSpace, port uint16) ServiceID {
	return ServiceID(uint64(ps)<<16 | uint64(port))
}

// RDMA returns the port space and port of an rdma_cm service ID; ok is
// false if the upper 32 bits are not zero (not an rdma_cm service ID).
// The port space is not checked against the four known ones, as the
// kernel's rdma_ps_from_service_id does not.
func (s ServiceID) RDMA() (ps PortSpace, port uint16, ok bool) {
	return PortSpace(s >> 16), uint16(s), s>>32 == 0
}

func (s ServiceID) String() string { return "0x" + strconv.FormatUint(uint64(s), 16) }

// CMAHeaderSize is the size of the rdma_cm header (struct cma_hdr) at the
// start of the private data of a REQ or SIDR_REQ in the TCP, UDP and IPoIB
// port spaces (not with AF_IB addresses). A REQ leaves 92-36 = 56 bytes to
// the application, a SIDR_REQ 180.
const CMAHeaderSize = 36

// CMAVersion is the only cma_version rdma_cm sends and accepts.
const CMAVersion = 0x00

// CMAHeader is struct cma_hdr: cma_version, the IP version in the high
// nibble of the next byte, the active side's source port, and the source
// and destination addresses (union cma_ip_addr). An IPv4 address sits in
// the last 4 of its 16 bytes after 12 zero bytes: not IPv4-mapped, unlike
// the REQ's GIDs. The destination port is not in it: it is the low 16 bits
// of the service ID.
type CMAHeader struct {
	Version  uint8
	SrcPort  uint16
	Src, Dst netip.Addr // both IPv4 or both IPv6; the IP version follows
}

const (
	cmaVersion   = 0
	cmaIPVersion = 1
	cmaPort      = 2
	cmaSrc       = 4
	cmaDst       = 20
)

// ParseCMAHeader parses the rdma_cm header at the start of pd. It checks
// what the kernel's passive side does: the length, cma_version 0 and an IP
// version of 4 or 6. The zero padding of IPv4 addresses and the low nibble
// of the IP version byte are ignored, as the kernel ignores them.
func ParseCMAHeader(pd []byte) (CMAHeader, error) {
	if len(pd) < CMAHeaderSize {
		return CMAHeader{}, errCMAShort
	}
	if pd[cmaVersion] != CMAVersion {
		return CMAHeader{}, errCMAVersion
	}
	h := CMAHeader{Version: pd[cmaVersion], SrcPort: binary.BigEndian.Uint16(pd[cmaPort:])}
	switch pd[cmaIPVersion] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(pd[cmaSrc+12 : cmaSrc+16]))
		h.Dst = netip.AddrFrom4([4]byte(pd[cmaDst+12 : cmaDst+16]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(pd[cmaSrc : cmaSrc+16]))
		h.Dst = netip.AddrFrom16([16]byte(pd[cmaDst : cmaDst+16]))
	default:
		return CMAHeader{}, errCMAIPVersion
	}
	return h, nil
}

// IPVersion returns 4 or 6, the version of Src.
func (h *CMAHeader) IPVersion() int {
	if h.Src.Is4() {
		return 4
	}
	return 6
}

// Append appends the 36-byte header to b. Src and Dst must both be IPv4
// or both IPv6 (an IPv4-mapped IPv6 address counts as IPv6, as the kernel
// sends it for an AF_INET6 socket).
func (h *CMAHeader) Append(b []byte) ([]byte, error) {
	if !h.Src.IsValid() || !h.Dst.IsValid() || h.Src.Is4() != h.Dst.Is4() {
		return b, &FieldError{Msg: AttrREQ, Field: "CMA header addresses", Reserved: true}
	}
	ver := byte(6)
	if h.Src.Is4() {
		ver = 4
	}
	b = append(b, h.Version, ver<<4)
	b = binary.BigEndian.AppendUint16(b, h.SrcPort)
	for _, a := range [2]netip.Addr{h.Src, h.Dst} {
		if a.Is4() {
			v4 := a.As4()
			b = append(b, make([]byte, 12)...)
			b = append(b, v4[:]...)
		} else {
			v6 := a.As16()
			b = append(b, v6[:]...)
		}
	}
	return b, nil
}

// The UDP source ports and flow labels of RoCEv2 traffic.

// rocev2SourcePortMin is IB_ROCE_UDP_ENCAP_VALID_PORT_MIN: RoCEv2 source
// ports are in the dynamic range 0xC000-0xFFFF.
const rocev2SourcePortMin = 0xC000

const flowLabelMask = 0xFFFFF

// RDMACMFlowLabel returns the flow label rdma_cm puts in a REQ's primary
// path on RoCEv2 for an IPv4 connection, or an IPv6 one whose socket set
// none (cma_get_roce_udp_flow_label): (source port × 31 + destination
// port) & 0xFFFFF, the ports of the active side's source and the
// listener. Both sides' data QPs then send from FlowLabelSourcePort of it.
func RDMACMFlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & flowLabelMask
}

// FlowLabelSourcePort returns the UDP source port a RoCEv2 QP sends from
// for a flow label (rdma_flow_label_to_udp_sport): the low 14 bits XOR
// the high 6, in the range 0xC000-0xFFFF.
func FlowLabelSourcePort(fl uint32) uint16 {
	fl &= flowLabelMask
	return uint16((fl&0x3FFF)^(fl>>14)) | rocev2SourcePortMin
}

// QPFlowLabel returns the symmetric flow label of a QP pair
// (rdma_calc_flow_label), what drivers use when the path gives none.
func QPFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v) & flowLabelMask
}

// QPSourcePort returns the UDP source port of a connected RoCEv2 QP
// (rdma_get_udp_sport): from the path's flow label, or from QPFlowLabel
// when it is zero. rxe in Linux 6.1 does so: in rping.pcap both data QPs
// send from FlowLabelSourcePort(RDMACMFlowLabel(0xd519, 7174)) = 59946,
// while its QP 1 keeps the port of its creation, 0xC000 + hash_32(1, 14)
// = 55410.
func QPSourcePort(fl, lqpn, rqpn uint32) uint16 {
	if fl&flowLabelMask == 0 {
		fl = QPFlowLabel(lqpn, rqpn)
	}
	return FlowLabelSourcePort(fl)
}
