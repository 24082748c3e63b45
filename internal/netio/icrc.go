package netio

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"

	"github.com/goroce/goroce/internal/wire"
)

const icrcLen = wire.ICRCLen

// maxIPUDPHeaderLen is the room ipUDPHeaders needs: an IPv6 header and a
// UDP header.
const maxIPUDPHeaderLen = wire.IPv6HeaderLen + wire.UDPHeaderLen

// defaultHopLimit is the TTL or hop limit the capture tap writes: Linux's
// default (net.ipv4.ip_default_ttl, net.ipv6.conf.*.hop_limit), which goroce
// does not change. The ICRC masks it.
const defaultHopLimit = 64

// ipUDPHeaders writes into buf the IP and UDP headers that carry a UDP
// payload of udpPayloadLen bytes from src to dst, as a RoCEv2 sender builds
// them: IPv4 without options, with DF set and the given identification, or
// an IPv6 fixed header without extension headers; TOS, traffic class and flow
// label 0; TTL or hop limit 64. Checksums are left 0 for the capture tap to
// fill in. Both addresses must be of one family; an IPv4-mapped IPv6 address
// counts as IPv4.
//
// The data path does not compute the ICRC over these headers: wire.ICRC
// lets its IP header argument escape, so a header built on the stack would
// cost an allocation per packet. transportICRC gets the same value from the
// addresses.
func ipUDPHeaders(buf *[maxIPUDPHeaderLen]byte, src, dst netip.AddrPort, id uint16, udpPayloadLen int) (ip, udp []byte) {
	udpLen := wire.UDPHeaderLen + udpPayloadLen
	if s, d := src.Addr().Unmap(), dst.Addr().Unmap(); s.Is4() && d.Is4() {
		ip = buf[:wire.IPv4MinHeaderLen]
		wire.IPv4(ip).Encode(&wire.IPv4Fields{
			TotalLength: uint16(wire.IPv4MinHeaderLen + udpLen),
			ID:          id,
			Flags:       wire.IPv4DontFragment,
			TTL:         defaultHopLimit,
			Protocol:    wire.IPProtocolUDP,
			Src:         s.As4(),
			Dst:         d.As4(),
		})
	} else {
		ip = buf[:wire.IPv6HeaderLen]
		wire.IPv6(ip).Encode(&wire.IPv6Fields{
			PayloadLength: uint16(udpLen),
			NextHeader:    wire.IPProtocolUDP,
			HopLimit:      defaultHopLimit,
			Src:           src.Addr().As16(),
			Dst:           dst.Addr().As16(),
		})
	}
	udp = buf[len(ip) : len(ip)+wire.UDPHeaderLen]
	wire.UDP(udp).Encode(&wire.UDPFields{
		SrcPort: src.Port(),
		DstPort: dst.Port(),
		Length:  uint16(udpLen),
	})
	return ip, udp
}

// transportICRC returns the ICRC of transport (BTH through pad, at least
// wire.BTHLen plus the BTH's pad count bytes) carried from src to dst in a
// datagram with IPv4 identification id (ignored over IPv6), DF set and no IP
// options.
//
// wire.ICRCv4 and ICRCv6 build the pseudo-header from the addresses and
// hash PadCount zero bytes for the pad, for senders that keep the pad out
// of their buffers. Here the pad is in the buffer and, from a peer, need not
// be zero; since CRC-32 is affine, the contribution of non-zero pad bytes is
// added separately, so the ICRC is always that of the exact bytes.
func transportICRC(src, dst netip.AddrPort, id uint16, transport []byte) uint32 {
	end := len(transport) - int(wire.BTH(transport).PadCount())
	body, pad := transport[:end], transport[end:]
	var crc uint32
	if s, d := src.Addr().Unmap(), dst.Addr().Unmap(); s.Is4() && d.Is4() {
		crc = wire.ICRCv4(s.As4(), d.As4(), id, src.Port(), dst.Port(), body, nil)
	} else {
		crc = wire.ICRCv6(src.Addr().As16(), dst.Addr().As16(), src.Port(), dst.Port(), body, nil)
	}
	for _, b := range pad {
		if b != 0 {
			crc ^= rawCRC(pad)
			break
		}
	}
	return crc
}

// transportICRCParts is transportICRC for a packet in two pieces: hdrs
// (the BTH and extension headers) and payload, followed by the BTH's pad
// count of zero bytes.
func transportICRCParts(src, dst netip.AddrPort, id uint16, hdrs, payload []byte) uint32 {
	if s, d := src.Addr().Unmap(), dst.Addr().Unmap(); s.Is4() && d.Is4() {
		return wire.ICRCv4(s.As4(), d.As4(), id, src.Port(), dst.Port(), hdrs, payload)
	}
	return wire.ICRCv6(src.Addr().As16(), dst.Addr().As16(), src.Port(), dst.Port(), hdrs, payload)
}

// rawCRC returns the CRC-32 register after processing p from a zero
// register, without the initial and final inversions: how p changes the
// CRC of a message that ends with it, relative to zero bytes.
func rawCRC(p []byte) uint32 {
	return ^crc32.Update(^uint32(0), crc32.IEEETable, p)
}

// sendICRC returns the ICRC of transport (BTH through pad) sent from src to
// dst through one of our sockets: over IPv4 the kernel sends identification
// 0 because the sockets are unconnected and set DF (see setSocketOptions).
func sendICRC(src, dst netip.AddrPort, transport []byte) uint32 {
	return transportICRC(src, dst, 0, transport)
}

// icrcResult is the outcome of a receive-side ICRC check.
type icrcResult uint8

const (
	icrcBad       icrcResult = iota // no IPv4 identification explains the ICRC
	icrcOK                          // full 32-bit match (IPv6, or IPv4 id 0)
	icrcRecovered                   // match after recovering a non-zero IPv4 id
	icrcPredicted                   // match for the predicted non-zero IPv4 id
)

// checkICRC verifies the ICRC of b, a whole UDP payload (BTH through ICRC)
// received from src on local, as wire.Packet.Parse accepted it (so that the
// pad fits), rebuilding the IP and UDP headers as described in
// icrc_recv.go. For IPv4 it returns the identification the sender must have
// used. ids may be nil to accept only identification 0 (StrictICRC without
// a prediction).
func checkICRC(ids *idRecoverer, src, local netip.AddrPort, b []byte) (icrcResult, uint16) {
	return checkICRCNext(ids, ids != nil, src, local, b, 0)
}

// checkICRCNext is checkICRC with a predicted identification next: besides
// 0, an IPv4 packet may carry next (the one after the previous packet's
// from the same source, see receiver.nextID), and matching it is a full
// check too, since only two of the 2^32 syndromes are accepted. Any other
// identification is recovered only when weak is set (not StrictICRC),
// which is a 16-bit check. ids may be nil when weak is false and next is 0.
func checkICRCNext(ids *idRecoverer, weak bool, src, local netip.AddrPort, b []byte, next uint16) (icrcResult, uint16) {
	n := len(b) - icrcLen
	syndrome := transportICRC(src, local, 0, b[:n]) ^ binary.LittleEndian.Uint32(b[n:])
	switch {
	case syndrome == 0:
		return icrcOK, 0
	case (!weak && next == 0) || !src.Addr().Unmap().Is4():
		return icrcBad, 0
	}
	id, ok := ids.recoverID(idCoveredBytes(len(b)), syndrome)
	switch {
	case !ok:
		return icrcBad, 0
	case id == next:
		return icrcPredicted, id
	case weak:
		return icrcRecovered, id
	}
	return icrcBad, 0
}
