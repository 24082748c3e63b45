package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestZeroAllocs checks that the hot-path functions do not allocate, the
// error paths included.
func TestZeroAllocs(t *testing.T) {
	pkt := buildIPv4Packet(t)
	ip, udp, tr, err := SplitIPUDP(pkt)
	if err != nil {
		t.Fatal(err)
	}
	body := tr[:len(tr)-ICRCLen]
	v4 := IPv4(ip)
	var p Packet
	if err := p.Parse(tr, 1024); err != nil {
		t.Fatal(err)
	}
	hdrs, payload := p.HeaderBytes(), p.Payload
	h := p.Headers()
	buf := make([]byte, 0, 128)
	bad := append([]byte(nil), tr...)
	BTH(bad).SetTVer(1)
	var sink uint32
	var ok bool
	src := netip.AddrPortFrom(netip.AddrFrom4(v4.Src()), UDP(udp).SrcPort())
	dst := netip.AddrPortFrom(netip.AddrFrom4(v4.Dst()), UDP(udp).DstPort())
	rxe := AppendICRC(bytes.Clone(body), refICRCAddrs(src, dst, 0xBEEF, body))
	var checker ICRCChecker

	tests := []struct {
		name string
		f    func()
	}{
		{"Parse", func() { _ = p.Parse(tr, 1024) }},
		{"Parse error", func() { _ = p.Parse(bad, 1024) }},
		{"Parse truncated", func() { _ = p.Parse(tr[:20], 1024) }},
		{"Headers", func() { h = p.Headers() }},
		{"AppendHeaders", func() { buf = AppendHeaders(buf[:0], &h) }},
		{"BTHFields.Append", func() { buf = h.BTH.Append(buf[:0]) }},
		{"AppendPad+ICRC", func() { buf = AppendICRC(AppendPad(buf[:0], 3), 1) }},
		{"ICRC", func() { sink = ICRC(ip, udp, body) }},
		{"ICRCParts", func() { sink = ICRCParts(ip, udp, hdrs, payload, p.Pad) }},
		{"CheckICRC", func() { ok = CheckICRC(ip, udp, tr) }},
		{"ICRC with the IP header on the stack", func() {
			// A receiver that rebuilds the IP header must not pay an
			// allocation for it.
			var stackIP [IPv4MaxHeaderLen]byte
			n := copy(stackIP[:], ip)
			sink = ICRC(stackIP[:n], udp, body)
		}},
		{"ICRCv4", func() {
			sink = ICRCv4(v4.Src(), v4.Dst(), v4.ID(), UDP(udp).SrcPort(), UDP(udp).DstPort(), hdrs, payload)
		}},
		{"ICRCv6", func() { sink = ICRCv6([16]byte{}, [16]byte{1}, 1, RoCEv2Port, hdrs, payload) }},
		{"ICRCAddrs", func() { sink = ICRCAddrs(src, dst, 0x1234, body) }},
		{"ICRCAddrsParts", func() { sink = ICRCAddrsParts(src, dst, 0, hdrs, payload) }},
		{"ICRCChecker.Check, recovered", func() { _, _ = checker.Check(src, dst, rxe, false) }},
		{"IPUDPHeaders", func() {
			var buf [MaxIPUDPHeaderLen]byte
			ip, _ := IPUDPHeaders(&buf, src, dst, 1, len(tr))
			sink = uint32(ip[0])
		}},
		{"SplitIPUDP", func() { _, _, _, _ = SplitIPUDP(pkt) }},
		{"Opcode.Info", func() { ok = RCRDMAWriteFirst.Info().IsFirst() }},
		{"Opcode.String", func() { _ = RCAtomicAcknowledge.String() }},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, tt.f); n != 0 {
			t.Errorf("%s: %v allocations", tt.name, n)
		}
	}
	_, _ = sink, ok
}
