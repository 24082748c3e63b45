package netio

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// buildTestPacket builds a packet the way the transport will, with wire's
// builders: BTH and the opcode's extension headers, a payload of n bytes
// (pattern seeded by psnValue), pad; 4 bytes of spare capacity for the ICRC.
func buildTestPacket(t testing.TB, op wire.Opcode, qpn wire.QPN, n int, psnValue uint32) []byte {
	t.Helper()
	h := wire.Headers{
		BTH: wire.BTHFields{
			Opcode:   op,
			PKey:     wire.DefaultPKey,
			DestQP:   qpn,
			AckReq:   true,
			PSN:      psn.PSN(psnValue),
			PadCount: wire.PadCount(n),
		},
		RETH: wire.RETHFields{VA: 0x7f0000001000, RKey: 0x1ed4, DMALength: uint32(n)},
		AETH: wire.AETHFields{Syndrome: wire.AckSyndrome(31), MSN: 5},
		DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x27},
	}
	b := make([]byte, 0, h.Len()+n+3+wire.ICRCLen)
	b = wire.AppendHeaders(b, &h)
	for i := range n {
		b = append(b, byte(int(psnValue)+i))
	}
	return wire.AppendPad(b, h.BTH.PadCount)
}

// refTransportICRC is the reference ICRC of transport (BTH through pad)
// from src to dst with IPv4 identification id: wire.ICRC over the headers
// wire.IPUDPHeaders builds, a path apart from the address-based one the
// Conn uses (wire.ICRCAddrs, wire.ICRCChecker); package wire checks both
// against a byte-by-byte reference.
func refTransportICRC(src, dst netip.AddrPort, id uint16, transport []byte) uint32 {
	var buf [wire.MaxIPUDPHeaderLen]byte
	ip, udp := wire.IPUDPHeaders(&buf, src, dst, id, len(transport)+wire.ICRCLen)
	return wire.ICRC(ip, udp, transport)
}

// errAddrNotAvail is what binding an address the host does not have
// returns (::1 on a host with IPv6 disabled).
var errAddrNotAvail = syscall.EADDRNOTAVAIL

// countingHandler counts packets and signals progress without blocking.
type countingHandler struct {
	n      atomic.Uint64
	signal chan struct{}
}

func (h *countingHandler) HandlePacket(*wire.Packet, netip.AddrPort, *RecvInfo) {
	h.n.Add(1)
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

// splitPacket returns pkt (a buildTestPacket with an n-byte payload) as a
// Message with a separate Payload: Packet holds the headers, with spare
// capacity for the pad and the ICRC, and the payload is a copy elsewhere.
func splitPacket(dst netip.AddrPort, pkt []byte, n int) Message {
	pad := int(wire.BTH(pkt).PadCount())
	h := len(pkt) - n - pad
	head := make([]byte, h, h+pad+wire.ICRCLen)
	copy(head, pkt)
	return Message{Dst: dst, Packet: head, Payload: bytes.Clone(pkt[h : h+n])}
}
