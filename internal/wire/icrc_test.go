package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// refICRC is a straightforward reference: build the whole pseudo-packet in a
// new buffer, mask it, and hash it in one go, as icrc_check.py does.
func refICRC(ip, udp, transport []byte) uint32 {
	var pseudo []byte
	pseudo = append(pseudo, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF)
	ipStart := len(pseudo)
	pseudo = append(pseudo, ip...)
	switch ip[0] >> 4 {
	case 4:
		pseudo[ipStart+1] = 0xFF                            // TOS
		pseudo[ipStart+8] = 0xFF                            // TTL
		pseudo[ipStart+10], pseudo[ipStart+11] = 0xFF, 0xFF // header checksum
	case 6:
		pseudo[ipStart] |= 0x0F                                                    // traffic class, high half
		pseudo[ipStart+1], pseudo[ipStart+2], pseudo[ipStart+3] = 0xFF, 0xFF, 0xFF // class, flow label
		pseudo[ipStart+7] = 0xFF                                                   // hop limit
	}
	udpStart := len(pseudo)
	pseudo = append(pseudo, udp...)
	pseudo[udpStart+6], pseudo[udpStart+7] = 0xFF, 0xFF
	bthStart := len(pseudo)
	pseudo = append(pseudo, transport...)
	pseudo[bthStart+4] = 0xFF
	return crc32.ChecksumIEEE(pseudo)
}

func TestICRCSeed(t *testing.T) {
	ff := bytes.Repeat([]byte{0xFF}, 8)
	if got := crc32.ChecksumIEEE(ff); got != icrcSeed {
		t.Errorf("CRC of 8×0xFF = %#08x, icrcSeed = %#08x", got, uint32(icrcSeed))
	}
	// rxe seeds its crc32_le with 0xdebb20e3: the same state, not inverted.
	if ^uint32(icrcSeed) != 0xdebb20e3 {
		t.Errorf("icrcSeed does not match rxe's seed")
	}
}

// ipv6Vector is an RC SEND_ONLY over IPv6 with a 5-byte payload, pad 3, a
// nonzero traffic class, flow label and UDP checksum, and FECN set; its ICRC
// (0xea7f0a5c) was computed independently with Python's zlib.crc32 following
// rxe_icrc.c's IPv6 masks.
const ipv6Vector = "612abcde00201140fd000000000000000000000000000001fd000099000000000000000000000002" +
	"c12312b700201234" + "04b0ffff800000118012345668656c6c6f0000005c0a7fea"

func TestICRCv6Vector(t *testing.T) {
	pkt, err := hex.DecodeString(ipv6Vector)
	if err != nil {
		t.Fatal(err)
	}
	ip, udp, transport, err := SplitIPUDP(pkt)
	if err != nil {
		t.Fatal(err)
	}
	const want = 0xea7f0a5c
	body := transport[:len(transport)-ICRCLen]
	if got := ICRC(ip, udp, body); got != want {
		t.Errorf("ICRC = %#08x, want %#08x", got, want)
	}
	if got := refICRC(ip, udp, body); got != want {
		t.Errorf("reference ICRC = %#08x, want %#08x", got, want)
	}
	if !CheckICRC(ip, udp, transport) {
		t.Error("CheckICRC = false")
	}
	var p Packet
	if err := p.Parse(transport, 256); err != nil {
		t.Fatal(err)
	}
	if string(p.Payload) != "hello" || len(p.Pad) != 3 || !p.BTH.FECN() || !p.BTH.SolicitedEvent() {
		t.Fatalf("parsed %+v payload %q", p.BTH.Fields(), p.Payload)
	}
	h6 := IPv6(ip)
	if h6.TrafficClass() != 0x12 || h6.FlowLabel() != 0xabcde || h6.HopLimit() != 64 {
		t.Errorf("IPv6 fields: tc %#x flow %#x hop %d", h6.TrafficClass(), h6.FlowLabel(), h6.HopLimit())
	}
	if got := ICRCv6(h6.Src(), h6.Dst(), UDP(udp).SrcPort(), UDP(udp).DstPort(), p.HeaderBytes(), p.Payload); got != want {
		t.Errorf("ICRCv6 = %#08x, want %#08x", got, want)
	}
	if got := ICRCParts(ip, udp, p.HeaderBytes(), p.Payload, p.Pad); got != want {
		t.Errorf("ICRCParts = %#08x, want %#08x", got, want)
	}
}

// TestICRCMaskedFields changes each field the ICRC masks and checks that the
// ICRC stays the same, and changes fields it does not mask and checks that it
// changes.
func TestICRCMaskedFields(t *testing.T) {
	pkt, _ := hex.DecodeString(ipv6Vector)
	v4 := buildIPv4Packet(t)
	tests := []struct {
		name    string
		pkt     []byte
		off     int // offset of the byte to flip, in the IP packet
		mask    byte
		changes bool
	}{
		{"v4 TOS", v4, 1, 0xFF, false},
		{"v4 TTL", v4, 8, 0xFF, false},
		{"v4 checksum", v4, 10, 0xFF, false},
		{"v4 checksum low", v4, 11, 0x01, false},
		{"v4 ID", v4, 5, 0x01, true},
		{"v4 flags", v4, 6, 0x40, true},
		{"v4 src", v4, 12, 0x01, true},
		{"v4 UDP checksum", v4, 20 + 6, 0xFF, false},
		{"v4 UDP src port", v4, 20 + 1, 0x01, true},
		{"v4 BTH FECN/BECN/resv6", v4, 28 + 4, 0xFF, false},
		{"v4 BTH resv7", v4, 28 + 8, 0x01, true},
		{"v4 BTH AckReq", v4, 28 + 8, 0x80, true},
		{"v4 BTH opcode", v4, 28, 0x01, true},
		{"v4 payload", v4, 28 + 12 + 16, 0x01, true},
		{"v6 traffic class high", pkt, 0, 0x0F, false},
		{"v6 traffic class low, flow", pkt, 1, 0xFF, false},
		{"v6 flow label", pkt, 3, 0xFF, false},
		{"v6 hop limit", pkt, 7, 0xFF, false},
		{"v6 payload length", pkt, 5, 0x01, true},
		{"v6 dst", pkt, 39, 0x01, true},
		{"v6 BTH byte 4", pkt, 48 + 4, 0x7F, false},
		{"v6 pad", pkt, len(pkt) - 5, 0x01, true},
	}
	// Split at fixed offsets: a changed length field must not change how
	// the bytes are cut.
	split := func(b []byte) (ip, udp, body []byte) {
		n := IPv4MinHeaderLen
		if b[0]>>4 == 6 {
			n = IPv6HeaderLen
		}
		return b[:n], b[n : n+UDPHeaderLen], b[n+UDPHeaderLen : len(b)-ICRCLen]
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(tt.pkt)
			before := ICRC(split(b))
			b[tt.off] ^= tt.mask
			after := ICRC(split(b))
			if (after != before) != tt.changes {
				t.Errorf("ICRC changed = %v, want %v", after != before, tt.changes)
			}
			if ref := refICRC(split(b)); ref != after {
				t.Errorf("ICRC %#08x, reference %#08x", after, ref)
			}
		})
	}
}

// buildIPv4Packet returns an IPv4 packet with an RC RDMA_WRITE_ONLY of 13
// bytes and a valid ICRC, built with the package's builders.
func buildIPv4Packet(t testing.TB) []byte {
	h := Headers{
		BTH:  BTHFields{Opcode: RCRDMAWriteOnly, PKey: DefaultPKey, DestQP: 0x1234, AckReq: true, PSN: 0xFFFFFE, PadCount: PadCount(13)},
		RETH: RETHFields{VA: 0x7f00_1234_5678, RKey: 0x1ff4, DMALength: 13},
	}
	hdr := AppendHeaders(nil, &h)
	payload := []byte("thirteen byte")
	src, dst := [4]byte{10, 99, 0, 1}, [4]byte{10, 99, 0, 2}
	crc := ICRCv4(src, dst, 0, 0xC000|1234, RoCEv2Port, hdr, payload)
	tr := AppendICRC(AppendPad(append(hdr, payload...), h.BTH.PadCount), crc)
	ipf := IPv4Fields{TotalLength: uint16(20 + 8 + len(tr)), Flags: IPv4DontFragment, TTL: 64, Protocol: IPProtocolUDP, Src: src, Dst: dst}
	pkt := ipf.Append(nil)
	IPv4(pkt).SetChecksum(IPv4(pkt).ComputeChecksum())
	udpf := UDPFields{SrcPort: 0xC000 | 1234, DstPort: RoCEv2Port, Length: uint16(8 + len(tr))}
	pkt = udpf.Append(pkt)
	pkt = append(pkt, tr...)
	ip, udp, all, err := SplitIPUDP(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if !CheckICRC(ip, udp, all) {
		t.Fatal("built IPv4 packet fails its ICRC check")
	}
	return pkt
}

func TestICRCv4IPOptions(t *testing.T) {
	// IPv4 options are covered unmasked.
	pkt := buildIPv4Packet(t)
	opts := []byte{0x01, 0x01, 0x01, 0x00} // NOP NOP NOP EOL
	withOpts := append(append(append([]byte(nil), pkt[:20]...), opts...), pkt[20:]...)
	IPv4(withOpts).SetVersionIHL(24)
	IPv4(withOpts).SetTotalLength(uint16(len(withOpts)))
	ip, udp, tr, err := SplitIPUDP(withOpts)
	if err != nil {
		t.Fatal(err)
	}
	if len(ip) != 24 {
		t.Fatalf("IP header length %d", len(ip))
	}
	body := tr[:len(tr)-ICRCLen]
	got, want := ICRC(ip, udp, body), refICRC(ip, udp, body)
	if got != want {
		t.Errorf("ICRC with options = %#08x, reference %#08x", got, want)
	}
	ip[21] ^= 1
	if ICRC(ip, udp, body) == got {
		t.Error("ICRC does not cover the options")
	}
}

func TestICRCRejectsMalformed(t *testing.T) {
	pkt := buildIPv4Packet(t)
	ip, udp, tr, _ := SplitIPUDP(pkt)
	body := tr[:len(tr)-ICRCLen]
	v6 := make([]byte, IPv6HeaderLen)
	v6[0] = 0x60
	tests := []struct {
		name          string
		ip, udp, body []byte
	}{
		{"no IP header", nil, udp, body},
		{"IP version 5", append([]byte{0x55}, ip[1:]...), udp, body},
		{"short IPv4", ip[:19], udp, body},
		{"long IPv4", make61(ip), udp, body},
		{"short IPv6", v6[:39], udp, body},
		{"IPv6 with extra", append(bytes.Clone(v6), 0), udp, body},
		{"short UDP", ip, udp[:7], body},
		{"long UDP", ip, append(bytes.Clone(udp), 0), body},
		{"short BTH", ip, udp, body[:11]},
	}
	for _, tt := range tests {
		if got := ICRC(tt.ip, tt.udp, tt.body); got != 0 {
			t.Errorf("%s: ICRC = %#08x, want 0", tt.name, got)
		}
		withZero := AppendICRC(bytes.Clone(tt.body), 0)
		if CheckICRC(tt.ip, tt.udp, withZero) {
			t.Errorf("%s: CheckICRC accepted", tt.name)
		}
	}
	if CheckICRC(ip, udp, tr[:BTHLen+ICRCLen-1]) {
		t.Error("CheckICRC accepted a packet shorter than BTH+ICRC")
	}
	if ICRCv4([4]byte{}, [4]byte{}, 0, 1, 2, body[:11], nil) != 0 || ICRCv6([16]byte{}, [16]byte{}, 1, 2, body[:11], nil) != 0 {
		t.Error("ICRCv4/v6 accepted a short BTH")
	}
}

func make61(ip []byte) []byte {
	b := make([]byte, 61)
	copy(b, ip)
	return b
}

// TestUpdateSmall checks the slicing-by-8 CRC used for the masked headers
// against hash/crc32 for every length up to 80 and random contents.
func TestUpdateSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 80)
	for n := range len(buf) + 1 {
		for range 20 {
			for i := range buf[:n] {
				buf[i] = byte(rng.Uint32())
			}
			seed := rng.Uint32()
			if got, want := updateSmall(seed, buf[:n]), crc32.Update(seed, crc32.IEEETable, buf[:n]); got != want {
				t.Fatalf("len %d: updateSmall = %#08x, crc32.Update = %#08x", n, got, want)
			}
		}
	}
}

// TestICRCSplits checks that ICRCParts gives the same value wherever the
// transport bytes are cut into headers, payload and pad.
func TestICRCSplits(t *testing.T) {
	pkt := buildIPv4Packet(t)
	ip, udp, tr, _ := SplitIPUDP(pkt)
	body := tr[:len(tr)-ICRCLen]
	want := ICRC(ip, udp, body)
	for i := BTHLen; i <= len(body); i++ {
		for j := i; j <= len(body); j++ {
			if got := ICRCParts(ip, udp, body[:i], body[i:j], body[j:]); got != want {
				t.Fatalf("split %d/%d: %#08x, want %#08x", i, j, got, want)
			}
		}
	}
	if binary.LittleEndian.Uint32(tr[len(tr)-ICRCLen:]) != want {
		t.Fatal("stored ICRC differs")
	}
}
