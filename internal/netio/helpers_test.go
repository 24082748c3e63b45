package netio

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

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
var errAddrNotAvail = unix.EADDRNOTAVAIL

// countingHandler counts packets and signals progress without blocking.
type countingHandler struct {
	n      atomic.Uint64
	signal chan struct{}
}

func (h *countingHandler) HandlePacket(*wire.Packet, netip.AddrPort, RecvInfo) {
	h.n.Add(1)
	select {
	case h.signal <- struct{}{}:
	default:
	}
}
