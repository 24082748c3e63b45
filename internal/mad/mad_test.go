package mad

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// allMADs returns the crafted MADs and, when present, the captured ones.
func allMADs(t *testing.T) [][]byte {
	mads := craftedMADs(t)
	if haveCaptures() {
		for _, fm := range captureMADs(t) {
			mads = append(mads, fm.mad)
		}
	}
	return mads
}

func TestTruncatedAtEveryByte(t *testing.T) {
	for _, mad := range allMADs(t) {
		h, _ := ParseHeader(mad)
		m := New(h.AttrID)
		for i := range len(mad) {
			if _, _, err := Decode(mad[:i]); !errors.Is(err, ErrLength) {
				t.Fatalf("%v cut at %d: Decode error %v, want ErrLength", h.AttrID, i, err)
			}
			if err := m.Parse(mad[:i]); !errors.Is(err, ErrLength) {
				t.Fatalf("%v cut at %d: Parse error %v, want ErrLength", h.AttrID, i, err)
			}
		}
		long := append(bytes.Clone(mad), 0)
		if _, _, err := Decode(long); !errors.Is(err, ErrLength) {
			t.Fatalf("%v with a byte more: %v", h.AttrID, err)
		}
	}
}

// padded returns m with its private data (and other fixed byte fields)
// padded to their full size, as Parse returns them.
func padded(m Message) Message {
	v := reflect.ValueOf(m).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	if f := c.Elem().FieldByName("PrivateData"); f.IsValid() {
		sizes := map[AttrID]int{AttrREQ: REQPrivateDataSize, AttrMRA: MRAPrivateDataSize, AttrREJ: REJPrivateDataSize,
			AttrREP: REPPrivateDataSize, AttrRTU: RTUPrivateDataSize, AttrDREQ: DREQPrivateDataSize,
			AttrDREP: DREPPrivateDataSize, AttrSIDRREQ: SIDRREQPrivateDataSize, AttrSIDRREP: SIDRREPPrivateDataSize,
			AttrLAP: LAPPrivateDataSize, AttrAPR: APRPrivateDataSize}
		pd := make([]byte, sizes[m.AttrID()])
		copy(pd, f.Bytes())
		f.SetBytes(pd)
	}
	return c.Interface().(Message)
}

func TestCraftedRoundTrip(t *testing.T) {
	for _, c := range craftedMessages() {
		b, err := AppendMAD([]byte{0xEE}, &c.h, c.m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 1+MADSize || b[0] != 0xEE {
			t.Fatalf("%v: AppendMAD did not append 256 bytes", c.m.AttrID())
		}
		h, m, err := Decode(b[1:])
		if err != nil {
			t.Fatalf("%v: %v", c.m.AttrID(), err)
		}
		if h != c.h {
			t.Errorf("%v: header %+v, want %+v", c.m.AttrID(), h, c.h)
		}
		if want := padded(c.m); !reflect.DeepEqual(m, want) {
			t.Errorf("%v: decoded\n%+v\nwant\n%+v", c.m.AttrID(), m, want)
		}
	}
}

// TestRandomBodies fills bodies with random bits and checks that a parse
// and a re-encode give back every bit IBA defines and clear the others.
func TestRandomBodies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for a, l := range layouts {
		for range 200 {
			h := CMHeader(a, r.Uint64())
			mad := h.Append(nil)
			body := make([]byte, BodySize)
			for i := range body {
				body[i] = byte(r.Uint32())
			}
			if l.varLen.width > 0 {
				l.varLen.put(body, uint64(r.IntN(l.varBuf.len+1)))
			}
			if a == AttrMRA || a == AttrREJ {
				field{8, 0, 2}.put(body, uint64(r.IntN(3)))
			}
			mad = append(mad, body...)
			_, m, err := Decode(mad)
			if err != nil {
				t.Fatalf("%v: %v", a, err)
			}
			out, err := AppendMAD(nil, &h, m)
			if err != nil {
				t.Fatalf("%v: %v", a, err)
			}
			checkReserved(t, a, mad, out)
		}
	}
}

// checkReserved checks that out is in with exactly the reserved bits of
// message a cleared.
func checkReserved(t testing.TB, a AttrID, in, out []byte) {
	t.Helper()
	if !bytes.Equal(in[:HeaderSize], out[:HeaderSize]) {
		t.Fatalf("%v: header % x re-encoded as % x", a, in[:HeaderSize], out[:HeaderSize])
	}
	l := layouts[a]
	n := 0
	if l.varLen.width > 0 {
		n = int(l.varLen.get(in[HeaderSize:]))
	}
	used := l.usedMask(n)
	for i := range BodySize {
		if want := in[HeaderSize+i] & used[i]; out[HeaderSize+i] != want {
			t.Fatalf("%v: body byte %d: %#02x re-encoded as %#02x (used bits %#02x)", a, i, in[HeaderSize+i], out[HeaderSize+i], used[i])
		}
	}
}

func TestValueRules(t *testing.T) {
	base := craftedMADs(t)
	mod := func(i int, f func(b []byte)) []byte {
		b := bytes.Clone(base[i])
		f(b)
		return b
	}
	const reqI, rejI, mraI, sidrRepI, aprI = 0, 3, 8, 10, 12
	cases := []struct {
		name string
		mad  []byte
		err  error
	}{
		{"base version 2", mod(reqI, func(b []byte) { b[0] = 2 }), ErrBaseVersion},
		{"class SA", mod(reqI, func(b []byte) { b[1] = 0x03 }), ErrNotCM},
		{"class version 1", mod(reqI, func(b []byte) { b[2] = 1 }), ErrNotCM},
		{"method Get", mod(reqI, func(b []byte) { b[3] = byte(MethodGet) }), ErrMethod},
		{"response bit", mod(reqI, func(b []byte) { b[3] = byte(MethodSend | MethodResponse) }), ErrMethod},
		{"attribute 0x1B", mod(reqI, func(b []byte) { binary.BigEndian.PutUint16(b[16:], 0x1B) }), ErrAttribute},
		{"attribute 0x0F", mod(reqI, func(b []byte) { binary.BigEndian.PutUint16(b[16:], 0x0F) }), ErrAttribute},
		{"MRAed 3", mod(mraI, func(b []byte) { b[HeaderSize+8] |= 0xC0 }), ErrValue},
		{"rejected 3", mod(rejI, func(b []byte) { b[HeaderSize+8] |= 0xC0 }), ErrValue},
		{"ARI length 73", mod(rejI, func(b []byte) { b[HeaderSize+9] = 73 << 1 }), ErrValue},
		{"SIDR info 73", mod(sidrRepI, func(b []byte) { b[HeaderSize+5] = 73 }), ErrValue},
		{"APR info 73", mod(aprI, func(b []byte) { b[HeaderSize+8] = 73 }), ErrValue},
	}
	for _, c := range cases {
		_, _, err := Decode(c.mad)
		var pe *ParseError
		if !errors.Is(err, c.err) || !errors.As(err, &pe) || pe.Error() == "" {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
		}
	}
	// A parser given another message's MAD.
	var rep REP
	if err := rep.Parse(base[reqI]); !errors.Is(err, ErrAttribute) {
		t.Errorf("REP.Parse of a REQ: %v", err)
	}
	// The limits themselves are fine.
	ok := mod(rejI, func(b []byte) { b[HeaderSize+9] = 72 << 1 })
	if _, _, err := Decode(ok); err != nil {
		t.Errorf("ARI length 72: %v", err)
	}
}

func TestFieldErrors(t *testing.T) {
	cases := []struct {
		name string
		m    Message
	}{
		{"QPN above 24 bits", &REQ{LocalQPN: 1 << 24}},
		{"PSN above 24 bits", &REP{StartingPSN: 1 << 24}},
		{"vendor ID above 24 bits", &REP{VendorID: 1 << 24}},
		{"MTU above 4 bits", &REQ{PathMTU: 16}},
		{"REQ private data 93 bytes", &REQ{PrivateData: make([]byte, 93)}},
		{"REP private data 197 bytes", &REP{PrivateData: make([]byte, 197)}},
		{"ARI 73 bytes", &REJ{ARI: make([]byte, 73)}},
		{"rejected 3", &REJ{MsgRejected: 3}},
		{"MRAed 3", &MRA{MsgMRAed: 3}},
		{"service timeout 32", &MRA{ServiceTimeout: 32}},
		{"DREQ QPN", &DREQ{RemoteQPN: 1 << 24}},
		{"SIDR info 73", &SIDRREP{Info: make([]byte, 73)}},
		{"LAP flow label", &LAP{Alternate: Path{FlowLabel: 1 << 20}}},
		{"APR private data", &APR{PrivateData: make([]byte, 149)}},
		{"RTU private data", &RTU{PrivateData: make([]byte, 225)}},
		{"DREP private data", &DREP{PrivateData: make([]byte, 225)}},
		{"SIDR_REQ private data", &SIDRREQ{PrivateData: make([]byte, 217)}},
	}
	for _, c := range cases {
		in := []byte{1, 2, 3}
		out, err := AppendCM(in, 1, c.m)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Error() == "" {
			t.Errorf("%s: error %v, want a *FieldError", c.name, err)
		}
		if !bytes.Equal(out, in) {
			t.Errorf("%s: b changed to %d bytes on error", c.name, len(out))
		}
	}
	h := CMHeader(AttrREP, 1)
	if _, err := AppendMAD(nil, &h, &REQ{}); err == nil {
		t.Error("AppendMAD with a REP header and a REQ: no error")
	}
}

// TestKnownBytes checks the messages Wireshark does not decode against the
// offsets of the kernel's ibta_vol1_c12.h and cm_msgs.h.
func TestKnownBytes(t *testing.T) {
	enc := func(m Message) []byte {
		b, err := m.AppendBody(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	expect := func(name string, b []byte, off int, want ...byte) {
		t.Helper()
		if got := b[off : off+len(want)]; !bytes.Equal(got, want) {
			t.Errorf("%s: bytes %d-%d are % x, want % x", name, off, off+len(want)-1, got, want)
		}
	}
	mra := enc(&MRA{LocalCommID: 0x11223344, RemoteCommID: 0x55667788, MsgMRAed: RespondREP, ServiceTimeout: 24,
		PrivateData: []byte{0xAA}})
	// offset8: msg MRAed in bits 7-6; offset9: service timeout in bits 7-3.
	expect("MRA", mra, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x40, 24<<3, 0xAA, 0)

	sreq := enc(&SIDRREQ{RequestID: 0x01020304, PKey: 0xFFFF, ServiceID: 0x0000000001111c06, PrivateData: []byte{9}})
	expect("SIDR_REQ", sreq, 0, 1, 2, 3, 4, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 1, 0x11, 0x1c, 0x06, 9)

	srep := enc(&SIDRREP{RequestID: 0x01020304, Status: SIDRNoQP, QPN: 0xABCDEF, ServiceID: 0x1122334455667788,
		QKey: 0x80010000, VendorIDHigh: 0x0102, VendorIDLow: 0x03, Info: []byte{7, 8}, PrivateData: []byte{9}})
	expect("SIDR_REP", srep, 0, 1, 2, 3, 4, 3, 2, 0x01, 0x02, 0xAB, 0xCD, 0xEF, 0x03,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x80, 0x01, 0, 0, 7, 8, 0)
	expect("SIDR_REP private data", srep, 96, 9)

	lap := enc(&LAP{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x030405, RemoteCMResponseTimeout: 0x13,
		Alternate: Path{LocalLID: 0x0607, RemoteLID: 0x0809, LocalGID: GID{15: 0xA}, RemoteGID: GID{15: 0xB},
			FlowLabel: 0xFEDCB, TrafficClass: 0x0C, HopLimit: 0x0D, PacketRate: 0x0E, SL: 0xF, SubnetLocal: true,
			LocalACKTimeout: 0x11}, PrivateData: []byte{0x12}})
	expect("LAP ids", lap, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 3, 4, 5, 0x13<<3, 0, 0, 0, 0, 6, 7, 8, 9)
	expect("LAP GIDs", lap, 39, 0xA)
	expect("LAP GIDs", lap, 55, 0xB)
	// flow label 20 bits at 56, 4 reserved; traffic class 59; hop limit 60;
	// 2 reserved and the rate at 61; SL and subnet local at 62; ACK
	// timeout at 63; private data at 64.
	expect("LAP path", lap, 56, 0xFE, 0xDC, 0xB0, 0x0C, 0x0D, 0x0E, 0xF8, 0x11<<3, 0x12)

	apr := enc(&APR{LocalCommID: 1, RemoteCommID: 2, Status: APRUnsupported, Info: []byte{5, 6}, PrivateData: []byte{7}})
	expect("APR", apr, 8, 2, byte(APRUnsupported), 0, 0, 5, 6, 0)
	expect("APR private data", apr, 84, 7)

	dreq := enc(&DREQ{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x0A0B0C, PrivateData: []byte{0xD}})
	expect("DREQ", dreq, 8, 0x0A, 0x0B, 0x0C, 0, 0xD)

	rep := enc(&REP{VendorID: 0xA1B2C3, LocalQPN: 0x010203, LocalEECN: 0x040506, StartingPSN: 0x070809,
		TargetACKDelay: 15, FailoverAccepted: 1, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true})
	expect("REP ECE", rep, 12, 1, 2, 3, 0xA1, 4, 5, 6, 0xB2, 7, 8, 9, 0xC3)
	expect("REP flags", rep, 26, 15<<3|1<<1|1, 7<<5|1<<4)

	req := enc(&REQ{VendorID: 0x02C9AB, TransportServiceType: TransportUC, RemoteCMResponseTimeout: 20,
		EndToEndFlowControl: true, SAPSupported: true, Alternate: Path{LocalACKTimeout: 0x1F}})
	expect("REQ ECE", req, 4, 0, 0x02, 0xC9, 0xAB)
	expect("REQ byte 43", req, 43, 20<<3|1<<1|1)
	expect("REQ byte 139", req, 139, 0x1F<<3|1<<2)
}

func TestParseDoesNotAllocate(t *testing.T) {
	mads := craftedMADs(t)
	msgs := make([]Message, len(mads))
	for i, m := range mads {
		h, _ := ParseHeader(m)
		msgs[i] = New(h.AttrID)
	}
	bad := bytes.Clone(mads[0])
	bad[1] = 3
	allocs := testing.AllocsPerRun(100, func() {
		for i, m := range mads {
			if err := msgs[i].Parse(m); err != nil {
				panic(err)
			}
		}
		_, _ = ParseCMHeader(bad)
		_ = msgs[0].Parse(bad[:100])
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}
}

func TestEnumStrings(t *testing.T) {
	checks := map[string]string{
		AttrREQ.String(): "REQ", AttrAPR.String(): "APR", AttrID(0x99).String(): "AttrID(0x99)",
		RejectStaleConnection.String(): "stale connection", RejectConsumer.String(): "consumer defined",
		RejectTimeout.String(): "timeout", RejectInvalidServiceID.String(): "invalid service ID",
		RejectReason(34).String(): "RejectReason(34)", SIDRUnsupported.String(): "unsupported service ID",
		SIDRStatus(9).String(): "SIDRStatus(9)", RespondREP.String(): "REP", MsgResponse(3).String(): "MsgResponse(3)",
		PortSpaceTCP.String(): "TCP", PortSpace(7).String(): "PortSpace(0x7)", TransportUC.String(): "UC",
	}
	for got, want := range checks {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	for a := AttrREQ; a <= AttrAPR; a++ {
		if !a.IsCM() || New(a) == nil || New(a).AttrID() != a {
			t.Errorf("%v", a)
		}
	}
	if New(0x1B) != nil || AttrID(0x0F).IsCM() {
		t.Error("non-CM attribute")
	}
}
