package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/internal/psn"
)

// TestViewsReencode fills each header with random bytes (reserved bits
// included), reads all its fields and encodes them again: the bytes must be
// identical.
func TestViewsReencode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type view struct {
		name string
		n    int
		re   func(b []byte) []byte
	}
	views := []view{
		{"BTH", BTHLen, func(b []byte) []byte { f := BTH(b).Fields(); return f.Append(nil) }},
		{"RETH", RETHLen, func(b []byte) []byte { f := RETH(b).Fields(); return f.Append(nil) }},
		{"AETH", AETHLen, func(b []byte) []byte { f := AETH(b).Fields(); return f.Append(nil) }},
		{"AtomicETH", AtomicETHLen, func(b []byte) []byte { f := AtomicETH(b).Fields(); return f.Append(nil) }},
		{"AtomicAckETH", AtomicAckETHLen, func(b []byte) []byte { f := AtomicAckETH(b).Fields(); return f.Append(nil) }},
		{"DETH", DETHLen, func(b []byte) []byte { f := DETH(b).Fields(); return f.Append(nil) }},
		{"ImmDt", ImmDtLen, func(b []byte) []byte { f := ImmDt(b).Fields(); return f.Append(nil) }},
		{"IETH", IETHLen, func(b []byte) []byte { f := IETH(b).Fields(); return f.Append(nil) }},
		{"FETH", FETHLen, func(b []byte) []byte { f := FETH(b).Fields(); return f.Append(nil) }},
		{"IPv4", IPv4MinHeaderLen, func(b []byte) []byte {
			h := IPv4(b)
			f := IPv4Fields{h.TOS(), h.TotalLength(), h.ID(), h.Flags(), h.FragmentOffset(), h.TTL(), h.Protocol(), h.Checksum(), h.Src(), h.Dst()}
			return f.Append(nil)
		}},
		{"IPv6", IPv6HeaderLen, func(b []byte) []byte {
			h := IPv6(b)
			f := IPv6Fields{h.TrafficClass(), h.FlowLabel(), h.PayloadLength(), h.NextHeader(), h.HopLimit(), h.Src(), h.Dst()}
			return f.Append(nil)
		}},
		{"UDP", UDPHeaderLen, func(b []byte) []byte {
			h := UDP(b)
			f := UDPFields{h.SrcPort(), h.DstPort(), h.Length(), h.Checksum()}
			return f.Append(nil)
		}},
	}
	for _, v := range views {
		for i := range 200 {
			b := make([]byte, v.n)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			switch {
			case i == 0:
				clear(b)
			case i == 1:
				for j := range b {
					b[j] = 0xFF
				}
			}
			switch v.name {
			case "IPv4":
				b[0] = 0x45 // the builder writes IHL 5
			case "IPv6":
				b[0] = 0x60 | b[0]&0x0F
			}
			if got := v.re(b); !bytes.Equal(got, b) {
				t.Fatalf("%s: re-encoded\n%x\nwant\n%x", v.name, got, b)
			}
		}
	}
}

func TestBTHAccessors(t *testing.T) {
	// Set every field to an extreme through the setters, one at a time,
	// and check that the getter sees it and no other field moved.
	b := BTH(make([]byte, BTHLen))
	b.SetOpcode(RCRDMAReadResponseMiddle)
	b.SetSolicitedEvent(true)
	b.SetMigReq(true)
	b.SetPadCount(3)
	b.SetTVer(0xF)
	b.SetPKey(0xABCD)
	b.SetFECN(true)
	b.SetBECN(true)
	b.SetResv6(0x3F)
	b.SetDestQP(0xFFFFFF)
	b.SetAckReq(true)
	b.SetResv7(0x7F)
	b.SetPSN(0xFFFFFF)
	if want := []byte{0x0E, 0xFF, 0xAB, 0xCD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}; !bytes.Equal(b, want) {
		t.Fatalf("all set: %x, want %x", []byte(b), want)
	}
	want := BTHFields{Opcode: RCRDMAReadResponseMiddle, SolicitedEvent: true, MigReq: true, PadCount: 3, TVer: 0xF,
		PKey: 0xABCD, FECN: true, BECN: true, Resv6: 0x3F, DestQP: 0xFFFFFF, AckReq: true, Resv7: 0x7F, PSN: 0xFFFFFF}
	if got := b.Fields(); got != want {
		t.Fatalf("Fields = %+v\nwant %+v", got, want)
	}

	clears := []struct {
		name  string
		clear func()
		want  []byte
	}{
		{"SE", func() { b.SetSolicitedEvent(false) }, []byte{0x0E, 0x7F, 0xAB, 0xCD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"MigReq", func() { b.SetMigReq(false) }, []byte{0x0E, 0x3F, 0xAB, 0xCD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"PadCount", func() { b.SetPadCount(1) }, []byte{0x0E, 0x1F, 0xAB, 0xCD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"TVer", func() { b.SetTVer(0) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"FECN", func() { b.SetFECN(false) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"BECN", func() { b.SetBECN(false) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x3F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"Resv6", func() { b.SetResv6(0x01) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"DestQP", func() { b.SetDestQP(0x12345678) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x01, 0x34, 0x56, 0x78, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"AckReq", func() { b.SetAckReq(false) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x01, 0x34, 0x56, 0x78, 0x7F, 0xFF, 0xFF, 0xFF}},
		{"Resv7", func() { b.SetResv7(0x80) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x01, 0x34, 0x56, 0x78, 0x00, 0xFF, 0xFF, 0xFF}},
		{"PSN", func() { b.SetPSN(psn.PSN(0xFF000102)) }, []byte{0x0E, 0x10, 0xAB, 0xCD, 0x01, 0x34, 0x56, 0x78, 0x00, 0x00, 0x01, 0x02}},
	}
	for _, c := range clears {
		c.clear()
		if !bytes.Equal(b, c.want) {
			t.Fatalf("after %s: %x, want %x", c.name, []byte(b), c.want)
		}
	}
	if b.PSN() != 0x000102 || b.DestQP() != 0x345678 || b.PadCount() != 1 || b.Resv6() != 1 || b.Resv7() != 0 {
		t.Errorf("getters disagree with bytes: %+v", b.Fields())
	}
}

func TestExtensionAccessors(t *testing.T) {
	reth := RETH(make([]byte, RETHLen))
	reth.SetVA(0x0102030405060708)
	reth.SetRKey(0x090A0B0C)
	reth.SetDMALength(0x0D0E0F10)
	if want := seq(1, 16); !bytes.Equal(reth, want) {
		t.Errorf("RETH %x, want %x", []byte(reth), want)
	}

	a := AtomicETH(make([]byte, AtomicETHLen))
	a.SetVA(0x0102030405060708)
	a.SetRKey(0x090A0B0C)
	a.SetSwapAdd(0x0D0E0F1011121314)
	a.SetCompare(0x15161718191A1B1C)
	if want := seq(1, 28); !bytes.Equal(a, want) {
		t.Errorf("AtomicETH %x, want %x", []byte(a), want)
	}
	if a.SwapAdd() != 0x0D0E0F1011121314 || a.Compare() != 0x15161718191A1B1C || a.RKey() != 0x090A0B0C {
		t.Errorf("AtomicETH getters: %+v", a.Fields())
	}

	ack := AtomicAckETH(make([]byte, AtomicAckETHLen))
	ack.SetOrigData(0x0102030405060708)
	if want := seq(1, 8); !bytes.Equal(ack, want) {
		t.Errorf("AtomicAckETH %x", []byte(ack))
	}

	d := DETH(make([]byte, DETHLen))
	d.SetQKey(GSIQKey)
	d.SetResv8(0xAA)
	d.SetSrcQP(0xFF000001)
	if want := []byte{0x80, 0x01, 0x00, 0x00, 0xAA, 0x00, 0x00, 0x01}; !bytes.Equal(d, want) {
		t.Errorf("DETH %x, want %x", []byte(d), want)
	}
	if d.SrcQP() != GSIQPN || d.Resv8() != 0xAA {
		t.Errorf("DETH getters: %+v", d.Fields())
	}

	aeth := AETH(make([]byte, AETHLen))
	aeth.SetSyndrome(NakSyndrome(NAKRemoteAccessError))
	aeth.SetMSN(0x1ABCDEF)
	if want := []byte{0x62, 0xAB, 0xCD, 0xEF}; !bytes.Equal(aeth, want) {
		t.Errorf("AETH %x, want %x", []byte(aeth), want)
	}
	if aeth.MSN() != 0xABCDEF || aeth.Syndrome().NAKCode() != NAKRemoteAccessError {
		t.Errorf("AETH getters: %+v", aeth.Fields())
	}

	imm := ImmDt(make([]byte, ImmDtLen))
	imm.SetImm(0x11223344)
	ieth := IETH(make([]byte, IETHLen))
	ieth.SetRKey(0x55667788)
	if !bytes.Equal(imm, []byte{0x11, 0x22, 0x33, 0x44}) || !bytes.Equal(ieth, []byte{0x55, 0x66, 0x77, 0x88}) {
		t.Errorf("ImmDt %x IETH %x", []byte(imm), []byte(ieth))
	}

	f := FETH(make([]byte, FETHLen))
	f.SetPlacementType(1 | 2 | 0xF0) // global and persistent, and bits beyond the field
	f.SetSelectivityLevel(1 | 0xFC)  // memory region, and bits beyond the field
	if want := []byte{0, 0, 0, 0x13}; !bytes.Equal(f, want) {
		t.Errorf("FETH %x, want %x", []byte(f), want)
	}
	if f.PlacementType() != 3 || f.SelectivityLevel() != 1 {
		t.Errorf("FETH getters: %+v", f.Fields())
	}
	f.SetWord(0xFFFFFFC0 | 0x20 | 0x04)
	if got := f.Fields(); got != (FETHFields{PlacementType: 4, SelectivityLevel: 2, Reserved: 0x3FFFFFF}) {
		t.Errorf("FETH fields %+v", got)
	}
}

// seq returns the bytes from, from+1, ..., to.
func seq(from, to byte) []byte {
	var b []byte
	for v := from; v <= to; v++ {
		b = append(b, v)
	}
	return b
}

func TestScalars(t *testing.T) {
	if got := QPN(0x11).String(); got != "0x000011" {
		t.Errorf("QPN string %q", got)
	}
	if got := MSN(MSNMask).Next(); got != 0 {
		t.Errorf("MSN wrap: %v", got)
	}
	if got := MSN(41).Next().String(); got != "42" {
		t.Errorf("MSN string %q", got)
	}
}

func TestIPv4Checksum(t *testing.T) {
	// The example header of RFC 1071's era, as used in countless tutorials:
	// 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7.
	h := IPv4{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := h.ComputeChecksum(); got != 0xb861 {
		t.Errorf("checksum %#04x, want 0xb861", got)
	}
	h.SetChecksum(0x1234) // ignored by the computation
	if got := h.ComputeChecksum(); got != 0xb861 {
		t.Errorf("checksum with a stale field %#04x, want 0xb861", got)
	}
	if h.Valid() || h.Flags() != IPv4DontFragment || h.TTL() != 64 || h.Src() != [4]byte{192, 168, 0, 1} {
		t.Errorf("IPv4 getters (Valid must be false: the total length exceeds the slice)")
	}
}
