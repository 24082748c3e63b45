package mad

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// seq returns n bytes counting up from start, so that a shifted or cut
// byte range shows.
func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func mustCMA(h CMAHeader, user []byte) []byte {
	b, err := h.Append(nil)
	if err != nil {
		panic(err)
	}
	return append(b, user...)
}

// craftedMessages are MADs with every field set to a distinct, mostly
// nonzero value, of every CM message: tshark decodes six of them
// (testdata/crafted.pcap), the others are checked byte by byte against the
// kernel's offsets (TestKnownBytes).
func craftedMessages() []struct {
	h Header
	m Message
} {
	v6a, v6b := netip.MustParseAddr("fd00::1:2"), netip.MustParseAddr("fd00::3:4")
	req1 := &REQ{
		LocalCommID: 0x01020304, VendorID: 0x02c9ab, ServiceID: RDMAServiceID(PortSpaceTCP, 18515),
		LocalCAGUID: 0x0a0b0c0d0e0f1011, LocalQKey: 0x11223344, LocalQPN: 0xabcdef,
		ResponderResources: 0x80, LocalEECN: 0x123456, InitiatorDepth: 0x7f, RemoteEECN: 0x654321,
		RemoteCMResponseTimeout: 0x1f, TransportServiceType: TransportUC, EndToEndFlowControl: true,
		StartingPSN: 0xfedcba, LocalCMResponseTimeout: 0x11, RetryCount: 6, PKey: 0x8001, PathMTU: 5,
		RDCExists: true, RNRRetryCount: 5, MaxCMRetries: 0xe, SRQ: true, ExtendedTransportType: 0,
		Primary: Path{LocalLID: 0x1234, RemoteLID: 0x5678, LocalGID: GIDFromAddr(v6a), RemoteGID: GIDFromAddr(v6b),
			FlowLabel: 0xabcde, PacketRate: 0x2a, TrafficClass: 0x68, HopLimit: 0xfe, SL: 0xd,
			SubnetLocal: true, LocalACKTimeout: 0x17},
		Alternate: Path{LocalLID: 0x9abc, RemoteLID: 0xdef0, LocalGID: GID(seq(0x40, 16)), RemoteGID: GID(seq(0x60, 16)),
			FlowLabel: 0x12345, PacketRate: 0x15, TrafficClass: 0x11, HopLimit: 0x22, SL: 0x3,
			SubnetLocal: false, LocalACKTimeout: 0x1e},
		SAPSupported: true,
		PrivateData:  mustCMA(CMAHeader{SrcPort: 0xc001, Src: v6a, Dst: v6b}, seq(0x80, 56)),
	}
	req2 := &REQ{
		LocalCommID: 0xfffffffe, ServiceID: 0x123456789abcdef0, LocalCAGUID: 0xffffffffffffffff,
		LocalQPN: 1, TransportServiceType: TransportXRC, ExtendedTransportType: 1, PathMTU: 3,
		Primary: Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: GIDFromAddr(netip.MustParseAddr("192.0.2.1")),
			RemoteGID: GIDFromAddr(netip.MustParseAddr("192.0.2.2")), HopLimit: 64, LocalACKTimeout: 17},
		PrivateData: seq(0xa0, REQPrivateDataSize),
	}
	rep := &REP{
		LocalCommID: 0x11111111, RemoteCommID: 0x22222222, LocalQKey: 0x33333333, LocalQPN: 0x444444,
		LocalEECN: 0x555555, StartingPSN: 0x666666, ResponderResources: 0x77, InitiatorDepth: 0x88,
		TargetACKDelay: 0x19, FailoverAccepted: 2, EndToEndFlowControl: true, RNRRetryCount: 3, SRQ: true,
		LocalCAGUID: 0x99aabbccddeeff00, VendorID: 0x123456, PrivateData: seq(1, REPPrivateDataSize),
	}
	guid := []byte{0x50, 0x54, 0x00, 0xff, 0xfe, 0x99, 0x00, 0x02}
	rej1 := &REJ{LocalCommID: 0, RemoteCommID: 0xcafef00d, MsgRejected: RespondREQ, Reason: RejectTimeout,
		ARI: guid, PrivateData: seq(0x10, 20)}
	rej2 := &REJ{LocalCommID: 0x0badf00d, RemoteCommID: 0xdeadbeef, MsgRejected: RespondOther,
		Reason: RejectConsumer, ARI: seq(0x30, REJARISize), PrivateData: seq(0x90, REJPrivateDataSize)}
	return []struct {
		h Header
		m Message
	}{
		{CMHeader(AttrREQ, 0x0102030405060708), req1},
		{Header{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: MethodSend, Status: 0x1234,
			ClassSpecific: 0x5678, TID: 0xffffffffffffffff, AttrID: AttrREQ, Resv: 0x9abc, AttrMod: 0xdef01234}, req2},
		{CMHeader(AttrREP, 0x0102030405060708), rep},
		{CMHeader(AttrREJ, 0x1112131415161718), rej1},
		{CMHeader(AttrREJ, 0x2122232425262728), rej2},
		{CMHeader(AttrRTU, 3), &RTU{LocalCommID: 0x01010101, RemoteCommID: 0x02020202, PrivateData: seq(0x20, RTUPrivateDataSize)}},
		{CMHeader(AttrDREQ, 4), &DREQ{LocalCommID: 0x03030303, RemoteCommID: 0x04040404, RemoteQPN: 0xfffffe, PrivateData: seq(0x21, 7)}},
		{CMHeader(AttrDREP, 5), &DREP{LocalCommID: 0x05050505, RemoteCommID: 0x06060606, PrivateData: seq(0x22, DREPPrivateDataSize)}},
		{CMHeader(AttrMRA, 6), &MRA{LocalCommID: 0x07070707, RemoteCommID: 0x08080808, MsgMRAed: RespondREP, ServiceTimeout: 24, PrivateData: seq(0x23, 9)}},
		{CMHeader(AttrSIDRREQ, 7), &SIDRREQ{RequestID: 0x09090909, PKey: 0xffff, ServiceID: RDMAServiceID(PortSpaceUDP, 7174), PrivateData: seq(0x24, SIDRREQPrivateDataSize)}},
		{CMHeader(AttrSIDRREP, 8), &SIDRREP{RequestID: 0x09090909, Status: SIDRRedirect, QPN: 0x0a0b0c, ServiceID: 0x1111, QKey: 0x01234567,
			VendorIDHigh: 0xbeef, VendorIDLow: 0x42, Info: seq(0x50, 16), PrivateData: seq(0x25, SIDRREPPrivateDataSize)}},
		{CMHeader(AttrLAP, 9), &LAP{LocalCommID: 0x0c0c0c0c, RemoteCommID: 0x0d0d0d0d, RemoteQPN: 0x0e0e0e, RemoteCMResponseTimeout: 0x13,
			Alternate: Path{LocalLID: 0x0102, RemoteLID: 0x0304, LocalGID: GID(seq(0x70, 16)), RemoteGID: GID(seq(0x90, 16)),
				FlowLabel: 0xfffff, PacketRate: 0x3f, TrafficClass: 0xa5, HopLimit: 0x5a, SL: 0xf, SubnetLocal: true, LocalACKTimeout: 0x1f},
			PrivateData: seq(0x26, LAPPrivateDataSize)}},
		{CMHeader(AttrAPR, 10), &APR{LocalCommID: 0x0f0f0f0f, RemoteCommID: 0x10101010, Status: APRUnsupported, Info: seq(0x60, 3), PrivateData: seq(0x27, 5)}},
	}
}

func craftedMADs(t testing.TB) [][]byte {
	var out [][]byte
	for _, c := range craftedMessages() {
		b, err := AppendMAD(nil, &c.h, c.m)
		if err != nil {
			t.Fatalf("%v: %v", c.m.AttrID(), err)
		}
		out = append(out, b)
	}
	return out
}

// TestCraftedPcap keeps testdata/crafted.pcap equal to what the crafted
// messages encode to (rewritten by -update), so that the tshark golden
// file made from it checks this encoder.
func TestCraftedPcap(t *testing.T) {
	var frames [][]byte
	for i, m := range craftedMADs(t) {
		frames = append(frames, craftFrame(m, uint32(i)))
	}
	got := writePcap(t, frames)
	path := filepath.Join("testdata", "crafted.pcap")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the crafted messages' encoding; rerun with -update and review", path)
	}
}
