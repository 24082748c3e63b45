package netio

import "github.com/goroce/goroce/internal/wire"

// The UDP source port of RoCEv2 packets carries no meaning for the receiver
// (every receiver accepts any), but it is the entropy switches use for ECMP
// and NICs for RSS. Senders therefore keep one source port per QP, so a QP's
// packets stay in order on one path, and spread QPs over the dynamic port
// range 0xC000-0xFFFF (IBTA A17.3.3; the range rxe and the kernel's
// rdma_get_udp_sport use).
const (
	// MinSourcePort is the lowest RoCEv2 source port.
	MinSourcePort = 0xC000
	// MaxSourcePort is the highest RoCEv2 source port.
	MaxSourcePort = 0xFFFF
	// sourcePortMask keeps the 14 bits a source port varies in.
	sourcePortMask = 0x3FFF
)

// flowLabelMask keeps the 20 bits of an IPv6 flow label.
const flowLabelMask = 0xFFFFF

// FlowLabel returns the flow label the kernel derives for a connection
// between the local and remote QPs (rdma_calc_flow_label): a hash of the
// 64-bit product of the QP numbers, so both ends of a connection compute
// the same label.
func FlowLabel(local, remote wire.QPN) uint32 {
	v := uint64(local&wire.QPNMask) * uint64(remote&wire.QPNMask)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & flowLabelMask)
}

// SourcePortForFlowLabel folds a 20-bit flow label into the dynamic port
// range the way the kernel's rdma_get_udp_sport does: the low 14 bits XOR
// the high 6.
func SourcePortForFlowLabel(fl uint32) uint16 {
	fl &= flowLabelMask
	return uint16(fl&sourcePortMask^fl>>14) | MinSourcePort
}

// SourcePortForFlow returns the source port Linux rxe uses for a connected
// QP: SourcePortForFlowLabel(FlowLabel(local, remote)). Because the label is
// symmetric, both directions of a connection use the same port, as the rxe
// captures show (write_bw: QPs 0x14 and 0x28 both send from 49952). Use it
// for RC and UC QPs once the remote QPN is known.
func SourcePortForFlow(local, remote wire.QPN) uint16 {
	return SourcePortForFlowLabel(FlowLabel(local, remote))
}

// goldenRatio32 is the multiplier of the kernel's hash_32.
const goldenRatio32 = 0x61C88647

// SourcePortForQPN returns the port rxe gives a QP when it is created, before
// it knows a remote QP: 0xC000 plus the top 14 bits of the QPN times the
// 32-bit golden ratio (hash_32(qpn, 14)). Use it for UD QPs, whose
// destinations vary.
func SourcePortForQPN(qpn wire.QPN) uint16 {
	return MinSourcePort | uint16((uint32(qpn&wire.QPNMask)*goldenRatio32)>>(32-14))
}
