package wire

import "net/netip"

// ICRCHasher computes what ICRCAddrs and ICRCAddrsParts compute, faster
// for runs of IPv4 packets between the same addresses and ports and of one
// length, as a GSO send or a GRO receive carries: it keeps the CRC of the
// masked IPv4 and UDP headers of the run (28 of the 40 header bytes a
// small packet's ICRC hashes byte by byte) and adds each packet's IPv4
// identification through two tables, the CRC being affine in its input.
// What the AVX-512 fold hashes with its headers in one block anyway
// (payloads of foldMin bytes and more), and IPv6, take the plain path.
//
// The zero value is ready to use. It is not safe for concurrent use: each
// sender or receive loop owns one.
type ICRCHasher struct {
	valid    bool
	src, dst [4]byte
	srcPort  uint16
	dstPort  uint16
	udpLen   uint16
	prefix   uint32 // crc32.Update's CRC of the headers with identification 0
	computed uint64 // prefixes computed, for tests
}

// v4HeadersLen is the length of the masked headers ICRCv4 hashes before
// the extension headers: IPv4, UDP and BTH.
const v4HeadersLen = IPv4MinHeaderLen + UDPHeaderLen + BTHLen

// idEffect[k][b] is how IPv4 header byte 4+k holding b changes the CRC of
// the 28 masked IPv4 and UDP header bytes: the identification's bytes.
var idEffect = func() (t [2][256]uint32) {
	for k := range 2 {
		for b := range 256 {
			var buf [IPv4MinHeaderLen + UDPHeaderLen]byte
			buf[4+k] = byte(b)
			t[k][b] = rawCRC(buf[:])
		}
	}
	return t
}()

// Addrs is ICRCAddrs.
func (h *ICRCHasher) Addrs(src, dst netip.AddrPort, ipID uint16, transport []byte) uint32 {
	end := len(transport) - int(BTH(transport).PadCount())
	if end < BTHLen {
		return ICRCAddrs(src, dst, ipID, transport)
	}
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if !s.Is4() || !d.Is4() || foldsHeaders(v4HeadersLen, 0, end-BTHLen) {
		return ICRCAddrs(src, dst, ipID, transport)
	}
	body, pad := transport[:end], transport[end:]
	crc := h.v4(s.As4(), d.As4(), ipID, src.Port(), dst.Port(), body, nil)
	for _, b := range pad {
		if b != 0 {
			crc ^= rawCRC(pad)
			break
		}
	}
	return crc
}

// AddrsParts is ICRCAddrsParts.
func (h *ICRCHasher) AddrsParts(src, dst netip.AddrPort, ipID uint16, hdrs, payload []byte) uint32 {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if len(hdrs) < BTHLen || !s.Is4() || !d.Is4() || h.folds(hdrs, payload) {
		return ICRCAddrsParts(src, dst, ipID, hdrs, payload)
	}
	return h.v4(s.As4(), d.As4(), ipID, src.Port(), dst.Port(), hdrs, payload)
}

// folds reports whether ICRCv4 would hash the packet with the fold, as
// icrcAddrs splits it.
func (h *ICRCHasher) folds(hdrs, payload []byte) bool {
	if len(payload) == 0 {
		return foldsHeaders(v4HeadersLen, 0, len(hdrs)-BTHLen)
	}
	return foldsHeaders(v4HeadersLen, len(hdrs)-BTHLen, len(payload))
}

// v4 is ICRCv4 for a packet the fold does not take (hdrs at least a BTH).
func (h *ICRCHasher) v4(src, dst [4]byte, ipID, srcPort, dstPort uint16, hdrs, payload []byte) uint32 {
	pad := zeroPad[:BTH(hdrs).PadCount()]
	udpLen := uint16(UDPHeaderLen + len(hdrs) + len(payload) + len(pad) + ICRCLen)
	if !h.valid || h.src != src || h.dst != dst || h.srcPort != srcPort || h.dstPort != dstPort || h.udpLen != udpLen {
		h.fill(src, dst, srcPort, dstPort, udpLen)
	}
	crc := h.prefix ^ idEffect[0][ipID>>8] ^ idEffect[1][ipID&0xFF]
	var bth [BTHLen]byte
	copy(bth[:], hdrs[:BTHLen])
	maskBTH(bth[:])
	crc = updateSmall(crc, bth[:])
	return icrcTail(crc, hdrs[BTHLen:], payload, pad)
}

// fill computes the prefix of a run, as ICRCv4 builds the headers.
func (h *ICRCHasher) fill(src, dst [4]byte, srcPort, dstPort, udpLen uint16) {
	var buf [IPv4MinHeaderLen + UDPHeaderLen]byte
	maskedIPv4(IPv4(buf[:IPv4MinHeaderLen]), src, dst, 0, int(udpLen))
	maskedUDP(UDP(buf[IPv4MinHeaderLen:]), srcPort, dstPort, int(udpLen))
	*h = ICRCHasher{valid: true, src: src, dst: dst, srcPort: srcPort, dstPort: dstPort, udpLen: udpLen,
		prefix: updateSmall(icrcSeed, buf[:]), computed: h.computed + 1}
}
