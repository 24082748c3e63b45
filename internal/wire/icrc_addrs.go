package wire

import (
	"hash/crc32"
	"net/netip"
)

// The ICRC of a packet whose IP and UDP headers are not at hand: a sender
// on a UDP socket leaves them to the kernel, and a UDP socket does not hand
// them to the receiver. What the socket does know (addresses, ports, the
// datagram length) fixes every covered field but the IPv4 identification,
// given what every RoCEv2 sender does: IPv4 without options and with DF,
// IPv6 without extension headers. The receive side, which must also find
// the identification, is in icrc_recv.go.

// MaxIPUDPHeaderLen is the room IPUDPHeaders needs: an IPv6 header and a
// UDP header.
const MaxIPUDPHeaderLen = IPv6HeaderLen + UDPHeaderLen

// defaultHopLimit is the TTL or hop limit IPUDPHeaders writes: Linux's
// default (net.ipv4.ip_default_ttl, net.ipv6.conf.*.hop_limit), which goroce
// does not change. The ICRC masks it.
const defaultHopLimit = 64

// IPUDPHeaders writes into buf the IP and UDP headers that carry a UDP
// payload of udpPayloadLen bytes from src to dst, as a RoCEv2 sender builds
// them: IPv4 without options, with DF set and the given identification, or
// an IPv6 fixed header without extension headers; TOS, traffic class and flow
// label 0; TTL or hop limit 64. Checksums are left 0 for the caller to fill
// in. Both addresses must be of one family; an IPv4-mapped IPv6 address
// counts as IPv4.
//
// They are the headers ICRCAddrs stands for, which computes the same ICRC
// without building them.
func IPUDPHeaders(buf *[MaxIPUDPHeaderLen]byte, src, dst netip.AddrPort, id uint16, udpPayloadLen int) (ip, udp []byte) {
	udpLen := UDPHeaderLen + udpPayloadLen
	if s, d := src.Addr().Unmap(), dst.Addr().Unmap(); s.Is4() && d.Is4() {
		ip = buf[:IPv4MinHeaderLen]
		IPv4(ip).Encode(&IPv4Fields{
			TotalLength: uint16(IPv4MinHeaderLen + udpLen),
			ID:          id,
			Flags:       IPv4DontFragment,
			TTL:         defaultHopLimit,
			Protocol:    IPProtocolUDP,
			Src:         s.As4(),
			Dst:         d.As4(),
		})
	} else {
		ip = buf[:IPv6HeaderLen]
		IPv6(ip).Encode(&IPv6Fields{
			PayloadLength: uint16(udpLen),
			NextHeader:    IPProtocolUDP,
			HopLimit:      defaultHopLimit,
			Src:           src.Addr().As16(),
			Dst:           dst.Addr().As16(),
		})
	}
	udp = buf[len(ip) : len(ip)+UDPHeaderLen]
	UDP(udp).Encode(&UDPFields{
		SrcPort: src.Port(),
		DstPort: dst.Port(),
		Length:  uint16(udpLen),
	})
	return ip, udp
}

// ICRCAddrs returns the ICRC of transport (BTH through pad, at least BTHLen
// plus the BTH's pad count bytes) carried from src to dst in a datagram
// with IPv4 identification ipID (ignored over IPv6), DF set and no IP
// options: the ICRC over the headers IPUDPHeaders builds. An IPv4-mapped
// IPv6 address counts as IPv4.
//
// ICRCv4 and ICRCv6 build the pseudo-header from the addresses and hash
// PadCount zero bytes for the pad, for senders that keep the pad out of
// their buffers. Here the pad is in the buffer and, from a peer, need not
// be zero; since CRC-32 is affine, the contribution of non-zero pad bytes
// is added separately, so the ICRC is always that of the exact bytes.
func ICRCAddrs(src, dst netip.AddrPort, ipID uint16, transport []byte) uint32 {
	end := len(transport) - int(BTH(transport).PadCount())
	body, pad := transport[:end], transport[end:]
	var crc uint32
	if s, d := src.Addr().Unmap(), dst.Addr().Unmap(); s.Is4() && d.Is4() {
		crc = ICRCv4(s.As4(), d.As4(), ipID, src.Port(), dst.Port(), body, nil)
	} else {
		crc = ICRCv6(src.Addr().As16(), dst.Addr().As16(), src.Port(), dst.Port(), body, nil)
	}
	for _, b := range pad {
		if b != 0 {
			crc ^= rawCRC(pad)
			break
		}
	}
	return crc
}

// ICRCAddrsParts is ICRCAddrs for a packet in two pieces, as on the send
// path: hdrs (the BTH and extension headers) and payload, followed by the
// BTH's pad count of zero bytes, which neither holds.
func ICRCAddrsParts(src, dst netip.AddrPort, ipID uint16, hdrs, payload []byte) uint32 {
	if s, d := src.Addr().Unmap(), dst.Addr().Unmap(); s.Is4() && d.Is4() {
		return ICRCv4(s.As4(), d.As4(), ipID, src.Port(), dst.Port(), hdrs, payload)
	}
	return ICRCv6(src.Addr().As16(), dst.Addr().As16(), src.Port(), dst.Port(), hdrs, payload)
}

// rawCRC returns the CRC-32 register after processing p from a zero
// register, without the initial and final inversions: how p changes the
// CRC of a message that ends with it, relative to zero bytes.
func rawCRC(p []byte) uint32 {
	return ^crc32.Update(^uint32(0), crc32.IEEETable, p)
}
