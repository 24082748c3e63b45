package transport

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// GRHLen is the size of the Global Route Header area a UD receive places
// before the payload in the receive buffer (struct ibv_grh): on RoCEv2 it
// holds the packet's IP header, as rxe writes it.
const GRHLen = 40

// NetHeader is what the I/O layer knows of the IP and UDP headers a packet
// arrived with. A UD receive turns it into the GRH it places in front of
// the payload; RC and UC do not need it.
type NetHeader struct {
	// Src and Dst are the IP source and destination: IPv4 (or
	// IPv4-mapped) addresses give an IPv4 header, others an IPv6 header.
	Src, Dst netip.Addr
	// IPID is the IPv4 identification (0 when unknown).
	IPID uint16
	// HopLimit and TrafficClass are the IPv4 TTL and TOS, or the IPv6
	// hop limit and traffic class; FlowLabel is the IPv6 flow label.
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
}

// HandlePacketFrom is HandlePacket with the packet's IP header fields,
// which a UD QP writes into the GRH area of the receive buffer. nh may be
// nil (the GRH area is then left zero) and is not retained.
func (qp *QP) HandlePacketFrom(p *wire.Packet, nh *NetHeader, now time.Time, out *Output) {
	if qp.typ != ibv.QPTypeUD {
		qp.HandlePacket(p, now, out)
		return
	}
	qp.now = now
	qp.handleUnreliable(p, nh, out)
}

// Type returns the QP's transport service.
func (qp *QP) Type() ibv.QPType { return qp.typ }

// SetQKey sets the Q_Key of a UD QP (IBV_QP_QKEY): incoming datagrams must
// carry it, and a send whose Q_Key has the high bit set carries it
// instead. The high bit itself makes a privileged Q_Key, which the verbs
// layer decides who may set.
func (qp *QP) SetQKey(k uint32) { qp.un.qkey = k }

// QKey returns the Q_Key of a UD QP.
func (qp *QP) QKey() uint32 { return qp.un.qkey }

// receiveUD is the UD responder (rxe_recv.c check_keys, rxe_resp.c for
// IB_QPT_UD): a datagram with the wrong Q_Key is dropped and counted (the
// port's qkey_viol_cntr in rxe); one finding no receive WQE is dropped
// (class D, no RNR); otherwise the GRH and the payload are placed and the
// WQE completes with the 40 bytes of the GRH counted in its length. The
// PSN is not checked, as in rxe.
func (qp *QP) receiveUD(p *wire.Packet, info wire.OpInfo, nh *NetHeader) {
	if p.DETH.QKey() != qp.un.qkey {
		qp.counters.QKeyViolations++
		qp.counters.DroppedPackets++
		return
	}
	if info.Payload().Check(len(p.Payload), len(p.Pad), int(qp.mtu)) != nil {
		qp.counters.DroppedPackets++
		return
	}
	rs := &qp.resp
	if !rs.hasWQE && !qp.takeRecvWQE() {
		qp.counters.DroppedNoRecv++
		qp.counters.DroppedPackets++
		return
	}
	w := qp.heldWQE()
	n := uint32(len(p.Payload))
	if uint64(GRHLen)+uint64(n) > uint64(w.length) {
		// The WQE completes in error and the QP carries on (class E).
		qp.counters.LocalErrors++
		qp.wc = Completion{Status: ibv.WCLocLenErr, Opcode: ibv.WCRecv}
		qp.completeRecv()
		return
	}
	var grh [GRHLen]byte
	if nh != nil {
		nh.putGRH(&grh, len(p.Raw))
	}
	if !qp.copySGL(w.sgl, 0, grh[:], true) || n > 0 && !qp.copySGL(w.sgl, GRHLen, p.Payload, true) {
		qp.recvLocalFault()
		return
	}
	qp.wc = Completion{
		Status:    ibv.WCSuccess,
		Opcode:    ibv.WCRecv,
		ByteLen:   GRHLen + n,
		SrcQP:     uint32(p.DETH.SrcQP()),
		Flags:     ibv.WCGRH,
		Solicited: p.BTH.SolicitedEvent(),
	}
	if info.HasImmediate() {
		qp.wc.Imm = p.ImmDt.Imm()
		qp.wc.Flags |= ibv.WCWithImm
	}
	qp.completeRecv()
}

// putGRH writes the GRH area of a datagram whose UDP payload (BTH through
// ICRC) was udpPayload bytes long, as rxe does: for IPv4 the 20-byte IPv4
// header in bytes 20 to 39 after 20 zero bytes, for IPv6 the 40-byte IPv6
// header. Both are rebuilt from what the socket reported; the IPv4 header
// checksum is computed, since libibverbs checks it to tell the two forms
// apart (ibv_init_ah_from_wc).
func (nh *NetHeader) putGRH(g *[GRHLen]byte, udpPayload int) {
	const udpLen = 8
	if nh.Src.Unmap().Is4() {
		h := g[20:]
		h[0] = 0x45 // version 4, 5 words
		h[1] = nh.TrafficClass
		binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen+udpPayload))
		binary.BigEndian.PutUint16(h[4:], nh.IPID)
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF, as RoCEv2 senders set it
		h[8] = nh.HopLimit
		h[9] = wire.IPProtocolUDP
		src, dst := nh.Src.Unmap().As4(), nh.Dst.Unmap().As4()
		copy(h[12:16], src[:])
		copy(h[16:20], dst[:])
		wire.IPv4(h).SetChecksum(wire.IPv4(h).ComputeChecksum())
		return
	}
	binary.BigEndian.PutUint32(g[0:], 6<<28|uint32(nh.TrafficClass)<<20|nh.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(g[4:], uint16(udpLen+udpPayload))
	g[6] = wire.IPProtocolUDP
	g[7] = nh.HopLimit
	src, dst := nh.Src.As16(), nh.Dst.As16()
	copy(g[8:24], src[:])
	copy(g[24:40], dst[:])
}
