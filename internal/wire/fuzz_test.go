package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// FuzzParse feeds arbitrary bytes and MTUs to Parse. It must never panic; a
// rejected packet must get a *ParseError; an accepted one must split into
// headers, payload, pad and ICRC that cover it exactly, and its headers must
// re-encode to the same bytes.
func FuzzParse(f *testing.F) {
	for _, r := range opcodeRows {
		h := fullHeaders(r.op, 0)
		n := payloadLens(r.payload, 256)[0]
		f.Add(buildPacket(&h, n), 256)
	}
	f.Fuzz(func(t *testing.T, data []byte, mtu int) {
		var p Packet
		err := p.Parse(data, mtu)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if p.BTH != nil || p.Raw != nil {
				t.Fatal("packet not zeroed after an error")
			}
			return
		}
		hdr := p.HeaderBytes()
		if len(hdr)+len(p.Payload)+len(p.Pad)+len(p.ICRC) != len(data) || len(p.ICRC) != ICRCLen {
			t.Fatalf("parts %d+%d+%d+%d do not cover %d bytes", len(hdr), len(p.Payload), len(p.Pad), len(p.ICRC), len(data))
		}
		if (len(p.Payload)+len(p.Pad))%4 != 0 || len(p.Pad) != int(p.BTH.PadCount()) {
			t.Fatalf("payload %d + pad %d misaligned", len(p.Payload), len(p.Pad))
		}
		info := p.Info()
		if info.HeaderLen() != len(hdr) {
			t.Fatalf("header length %d, table says %d", len(hdr), info.HeaderLen())
		}
		if err := info.Payload().Check(len(p.Payload), len(p.Pad), mtu); err != nil {
			t.Fatalf("accepted payload breaks its rule: %v", err)
		}
		views := map[Hdr]bool{
			HdrDETH: p.DETH != nil, HdrFETH: p.FETH != nil, HdrRETH: p.RETH != nil,
			HdrAtomicETH: p.AtomicETH != nil, HdrAETH: p.AETH != nil, HdrAtomicAckETH: p.AtomicAckETH != nil,
			HdrImmDt: p.ImmDt != nil, HdrIETH: p.IETH != nil,
		}
		for bit, present := range views {
			if present != p.Has(bit) {
				t.Fatalf("%v present = %v, Has = %v", bit, present, p.Has(bit))
			}
		}
		h := p.Headers()
		re := AppendHeaders(nil, &h)
		if !bytes.Equal(re, hdr) {
			t.Fatalf("re-encoded headers\n%x\nwant\n%x", re, hdr)
		}
		re = append(re, p.Payload...)
		re = append(re, p.Pad...)
		re = append(re, p.ICRC...)
		if !bytes.Equal(re, data) {
			t.Fatal("rebuilt packet differs")
		}
	})
}

// normalizeICRCInputs shapes fuzz bytes into the arguments ICRC accepts: an
// IPv4 header of 20 to 60 bytes or an IPv6 header of 40, an 8-byte UDP
// header, and transport bytes holding at least a BTH.
func normalizeICRCInputs(v6 bool, ip, udp, transport []byte) (nip, nudp, ntr []byte) {
	n := IPv6HeaderLen
	if !v6 {
		n = IPv4MinHeaderLen + len(ip)%(IPv4MaxHeaderLen-IPv4MinHeaderLen+1)
	}
	nip = make([]byte, n)
	copy(nip, ip)
	if v6 {
		nip[0] = 0x60 | nip[0]&0x0F
	} else {
		nip[0] = 0x40 | nip[0]&0x0F
	}
	nudp = make([]byte, UDPHeaderLen)
	copy(nudp, udp)
	ntr = bytes.Clone(transport)
	for len(ntr) < BTHLen {
		ntr = append(ntr, 0)
	}
	return nip, nudp, ntr
}

// FuzzICRC checks the non-copying ICRC against the copy-based reference, for
// every way of splitting the transport bytes, and the address-based variants
// against a reference built from real headers.
func FuzzICRC(f *testing.F) {
	f.Add(false, []byte{0x45, 0, 0, 0x3c, 0xdd, 0xac, 0x40, 0, 0x40, 0x11, 0, 0, 10, 99, 0, 2, 10, 99, 0, 3},
		[]byte{0xc2, 0x75, 0x12, 0xb7, 0, 0x28, 0, 0}, []byte{0x11, 0, 0xff, 0xff, 0, 0, 0, 0x25, 0, 0x28, 0x12, 0xe2, 0x1f, 0, 0, 1}, uint16(12), uint16(16))
	f.Add(true, make([]byte, 40), make([]byte, 8), []byte("0123456789abcdefghij"), uint16(0), uint16(0))
	// Packets long enough for the AVX-512 fold (crc_amd64.go), with the
	// extension headers apart (cut 0 or 16 bytes after the BTH) or in one
	// piece with the payload, over IPv4 and IPv6.
	r := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{520, 1036, 1052, 4108, 4124, 4127, 4300} {
		for _, v6 := range []bool{false, true} {
			ip := []byte{} // normalized to a 20-byte IPv4 header
			if v6 {
				ip = make([]byte, IPv6HeaderLen)
			}
			transport := make([]byte, n)
			for i := range transport {
				transport[i] = byte(r.Uint32())
			}
			for _, cut := range []uint16{0, 16, 200} {
				f.Add(v6, ip, make([]byte, UDPHeaderLen), transport, cut, uint16(0xFFFF))
			}
		}
	}
	f.Fuzz(func(t *testing.T, v6 bool, ip, udp, transport []byte, cut1, cut2 uint16) {
		ip, udp, transport = normalizeICRCInputs(v6, ip, udp, transport)
		want := refICRC(ip, udp, transport)
		if got := ICRC(ip, udp, transport); got != want {
			t.Fatalf("ICRC = %#08x, reference %#08x", got, want)
		}
		i := BTHLen + int(cut1)%(len(transport)-BTHLen+1)
		j := i + int(cut2)%(len(transport)-i+1)
		if got := ICRCParts(ip, udp, transport[:i], transport[i:j], transport[j:]); got != want {
			t.Fatalf("ICRCParts(%d, %d) = %#08x, reference %#08x", i, j, got, want)
		}
		withICRC := AppendICRC(bytes.Clone(transport), want)
		if !CheckICRC(ip, udp, withICRC) {
			t.Fatal("CheckICRC rejects a correct ICRC")
		}
		withICRC[len(withICRC)-1-int(cut1)%ICRCLen] ^= 1 << (cut2 % 8)
		if CheckICRC(ip, udp, withICRC) {
			t.Fatal("CheckICRC accepts a corrupted ICRC")
		}

		// The address-based variants: build the headers the kernel would
		// send for transport[:i] + transport[i:] + zero pad, and compare.
		hdrs, payload := transport[:i], transport[i:]
		pad := int(BTH(hdrs).PadCount())
		full := append(bytes.Clone(transport), make([]byte, pad)...)
		udpLen := UDPHeaderLen + len(full) + ICRCLen
		if udpLen > 0xFFFF-IPv6HeaderLen {
			return
		}
		u := UDP(bytes.Clone(udp))
		u.SetLength(uint16(udpLen))
		u.SetDstPort(RoCEv2Port)
		if v6 {
			h := IPv6(bytes.Clone(ip))
			h.SetPayloadLength(uint16(udpLen))
			h.SetNextHeader(IPProtocolUDP)
			want := refICRC(h, u, full)
			if got := ICRCv6(h.Src(), h.Dst(), u.SrcPort(), u.DstPort(), hdrs, payload); got != want {
				t.Fatalf("ICRCv6 = %#08x, reference %#08x", got, want)
			}
			return
		}
		h := IPv4(bytes.Clone(ip[:IPv4MinHeaderLen]))
		h.SetVersionIHL(IPv4MinHeaderLen)
		h.SetTotalLength(uint16(IPv4MinHeaderLen + udpLen))
		h.SetFlagsFragmentOffset(IPv4DontFragment, 0)
		h.SetProtocol(IPProtocolUDP)
		want = refICRC(h, u, full)
		if got := ICRCv4(h.Src(), h.Dst(), h.ID(), u.SrcPort(), u.DstPort(), hdrs, payload); got != want {
			t.Fatalf("ICRCv4 = %#08x, reference %#08x", got, want)
		}
	})
}

// FuzzSplitIPUDP feeds arbitrary bytes to SplitIPUDP: no panic, and on
// success the pieces must agree with the length fields.
func FuzzSplitIPUDP(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, udp, payload, err := SplitIPUDP(b)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		switch b[0] >> 4 {
		case 4:
			h := IPv4(b)
			if !h.Valid() || len(ip) != h.HeaderLen() || int(h.TotalLength()) < len(ip)+len(udp)+len(payload) {
				t.Fatalf("IPv4 pieces disagree with the header")
			}
			if h.Protocol() != IPProtocolUDP || h.Flags()&IPv4MoreFragments != 0 || h.FragmentOffset() != 0 {
				t.Fatal("accepted a non-UDP packet or a fragment")
			}
		case 6:
			h := IPv6(b)
			if !h.Valid() || len(ip) != IPv6HeaderLen || h.NextHeader() != IPProtocolUDP {
				t.Fatal("IPv6 pieces disagree with the header")
			}
		default:
			t.Fatal("accepted an IP version other than 4 and 6")
		}
		if len(udp) != UDPHeaderLen || int(UDP(udp).Length()) != UDPHeaderLen+len(payload) {
			t.Fatalf("UDP length %d, payload %d", UDP(udp).Length(), len(payload))
		}
		if &ip[0] != &b[0] || &udp[0] != &b[len(ip)] {
			t.Fatal("pieces do not alias the input")
		}
	})
}
