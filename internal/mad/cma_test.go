package mad

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestCMAHeaderIPv4Layout(t *testing.T) {
	h := CMAHeader{SrcPort: 0xd519, Src: netip.MustParseAddr("10.99.0.2"), Dst: netip.MustParseAddr("10.99.0.3")}
	b, err := h.Append([]byte{0xEE})
	if err != nil {
		t.Fatal(err)
	}
	// cma_version 0, IP version 4 in the high nibble, the port, then the
	// addresses in the last 4 bytes of 16 after 12 zero bytes: not
	// IPv4-mapped (no 0xffff).
	want := []byte{0xEE, 0x00, 0x40, 0xd5, 0x19,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 2,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 3}
	if !bytes.Equal(b, want) {
		t.Fatalf("% x\nwant % x", b, want)
	}
	got, err := ParseCMAHeader(b[1:])
	if err != nil || got != h || got.IPVersion() != 4 {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestCMAHeaderIPv6(t *testing.T) {
	h := CMAHeader{SrcPort: 1, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("::ffff:10.0.0.1")}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if b[1] != 0x60 || len(b) != CMAHeaderSize {
		t.Fatalf("% x", b)
	}
	got, err := ParseCMAHeader(append(b, 1, 2, 3))
	if err != nil || got != h || got.IPVersion() != 6 {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestCMAHeaderErrors(t *testing.T) {
	good, _ := (&CMAHeader{Src: netip.MustParseAddr("1.2.3.4"), Dst: netip.MustParseAddr("5.6.7.8")}).Append(nil)
	cases := map[string][]byte{
		"short":        good[:35],
		"version 1":    append([]byte{1}, good[1:]...),
		"IP version 5": append([]byte{0, 0x50}, good[2:]...),
		"IP version 0": append([]byte{0, 0x04}, good[2:]...),
		"empty":        nil,
	}
	for name, b := range cases {
		if _, err := ParseCMAHeader(b); !errors.Is(err, ErrCMAHeader) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The kernel ignores the low nibble of the version byte and the IPv4
	// padding; so does the parser.
	lax := bytes.Clone(good)
	lax[1] |= 0x0F
	lax[4] = 0xFF
	if h, err := ParseCMAHeader(lax); err != nil || h.Src != netip.MustParseAddr("1.2.3.4") {
		t.Errorf("lax header: %+v %v", h, err)
	}
	mixed := CMAHeader{Src: netip.MustParseAddr("1.2.3.4"), Dst: netip.MustParseAddr("fd00::1")}
	if b, err := mixed.Append([]byte{7}); err == nil || len(b) != 1 {
		t.Error("mixed IPv4/IPv6 header encoded")
	}
	if _, err := (&CMAHeader{}).Append(nil); err == nil {
		t.Error("header without addresses encoded")
	}
}

func TestServiceID(t *testing.T) {
	if s := RDMAServiceID(PortSpaceTCP, 7174); s != 0x0000000001061c06 {
		t.Fatalf("%v", s)
	}
	for _, ps := range []PortSpace{PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB} {
		for _, port := range []uint16{0, 1, 18515, 0xFFFF} {
			gps, gport, ok := RDMAServiceID(ps, port).RDMA()
			if !ok || gps != ps || gport != port {
				t.Errorf("%v %d: %v %d %v", ps, port, gps, gport, ok)
			}
		}
	}
	if _, _, ok := ServiceID(0x0200000000000001).RDMA(); ok {
		t.Error("an IB_CM_ASSIGN_SERVICE_ID-range ID taken for rdma_cm's")
	}
	if ServiceID(0x1061c06).String() != "0x1061c06" {
		t.Error(ServiceID(0x1061c06).String())
	}
}

func TestFlowLabels(t *testing.T) {
	// rping.pcap: source port 0xd519 to 7174 gives 0x9ea0d and port 59946.
	if fl := RDMACMFlowLabel(0xd519, 7174); fl != 0x9ea0d || FlowLabelSourcePort(fl) != 59946 {
		t.Fatalf("%#x", fl)
	}
	for _, q := range [][2]uint32{{0x11, 0x22}, {0xFFFFFF, 0xFFFFFF}, {1, 0}, {0x123456, 0x654321}} {
		if QPFlowLabel(q[0], q[1]) != QPFlowLabel(q[1], q[0]) {
			t.Errorf("QPFlowLabel(%#x, %#x) is not symmetric", q[0], q[1])
		}
		if QPFlowLabel(q[0], q[1]) > 0xFFFFF {
			t.Errorf("QPFlowLabel above 20 bits")
		}
		if p := QPSourcePort(0, q[0], q[1]); p != FlowLabelSourcePort(QPFlowLabel(q[0], q[1])) {
			t.Errorf("QPSourcePort without a flow label: %d", p)
		}
	}
	if QPSourcePort(0x9ea0d, 1, 2) != 59946 {
		t.Error("QPSourcePort ignores the flow label")
	}
	for fl := uint32(0); fl <= 0xFFFFF; fl += 4093 {
		if p := FlowLabelSourcePort(fl); p < 0xC000 {
			t.Fatalf("port %#x below 0xC000", p)
		}
	}
	if FlowLabelSourcePort(0) != 0xC000 || FlowLabelSourcePort(0xFFFFF) != 0xC000|(0x3FFF^0x3F) {
		t.Error("FlowLabelSourcePort edges")
	}
}

func TestGID(t *testing.T) {
	g := GIDFromAddr(netip.MustParseAddr("10.99.0.2"))
	if g[10] != 0xFF || g[11] != 0xFF || g.Addr() != netip.MustParseAddr("10.99.0.2") || g.String() != "10.99.0.2" {
		t.Errorf("%v % x", g, g[:])
	}
	if s := (GID{0xfe, 0x80, 15: 1}).String(); s != "fe80::1" {
		t.Error(s)
	}
	if s := (GID{15: 0x42}).String(); s != "00000000000000000000000000000042" {
		t.Error(s)
	}
}
