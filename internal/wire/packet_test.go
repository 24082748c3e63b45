package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/psn"
)

// fullHeaders returns Headers with a distinct nonzero value in every field,
// reserved bits included, for opcode o.
func fullHeaders(o Opcode, padCount uint8) Headers {
	return Headers{
		BTH: BTHFields{Opcode: o, SolicitedEvent: true, MigReq: true, PadCount: padCount, PKey: 0x8001,
			FECN: true, BECN: true, Resv6: 0x2A, DestQP: 0xABCDEF, AckReq: true, Resv7: 0x55, PSN: 0xFFFFFF},
		DETH:         DETHFields{QKey: 0x11111111, Resv8: 0x22, SrcQP: 0x333333},
		FETH:         FETHFields{PlacementType: 2, SelectivityLevel: 1, Reserved: 0x1234},
		RETH:         RETHFields{VA: 0x4444444444444444, RKey: 0x55555555, DMALength: 0x66666666},
		AtomicETH:    AtomicETHFields{VA: 0x7777777777777777, RKey: 0x88888888, SwapAdd: 0x9999999999999999, Compare: 0xAAAAAAAAAAAAAAAA},
		AETH:         AETHFields{Syndrome: RNRNakSyndrome(14), MSN: 0xBBBBBB},
		AtomicAckETH: AtomicAckETHFields{OrigData: 0xCCCCCCCCCCCCCCCC},
		ImmDt:        ImmDtFields{Imm: 0xDDDDDDDD},
		IETH:         IETHFields{RKey: 0xEEEEEEEE},
	}
}

// onlyCarried zeroes the headers o does not carry, as Packet.Headers does.
func onlyCarried(h Headers) Headers {
	hs := h.BTH.Opcode.Info().Headers()
	out := Headers{BTH: h.BTH}
	if hs&HdrDETH != 0 {
		out.DETH = h.DETH
	}
	if hs&HdrFETH != 0 {
		out.FETH = h.FETH
	}
	if hs&HdrRETH != 0 {
		out.RETH = h.RETH
	}
	if hs&HdrAtomicETH != 0 {
		out.AtomicETH = h.AtomicETH
	}
	if hs&HdrAETH != 0 {
		out.AETH = h.AETH
	}
	if hs&HdrAtomicAckETH != 0 {
		out.AtomicAckETH = h.AtomicAckETH
	}
	if hs&HdrImmDt != 0 {
		out.ImmDt = h.ImmDt
	}
	if hs&HdrIETH != 0 {
		out.IETH = h.IETH
	}
	return out
}

// payloadLens returns payload lengths that the rule accepts for mtu.
func payloadLens(r PayloadRule, mtu int) []int {
	switch r {
	case PayloadNone:
		return []int{0}
	case PayloadUpToMTU:
		return []int{0, 1, 2, 3, 4, 5, mtu - 1, mtu}
	case PayloadEqualsMTU:
		return []int{mtu}
	case PayloadLast:
		return []int{1, 2, 3, 4, 7, mtu - 3, mtu}
	case PayloadAtomicWrite:
		return []int{AtomicWriteLen}
	case PayloadCNP:
		return []int{CNPReservedLen}
	case PayloadSACK:
		return []int{4, 32, SACKMaxLen}
	}
	return nil
}

// buildPacket builds a transport packet (BTH through ICRC) for h and a
// payload of n bytes; the ICRC bytes are arbitrary.
func buildPacket(h *Headers, n int) []byte {
	h.BTH.PadCount = PadCount(n)
	b := AppendHeaders(nil, h)
	for i := range n {
		b = append(b, byte(i*7+1))
	}
	b = AppendPad(b, h.BTH.PadCount)
	return AppendICRC(b, 0x01020304)
}

// TestEveryOpcodeRoundTrip builds each opcode with every header field set
// and several payload sizes, parses it back and compares all fields.
func TestEveryOpcodeRoundTrip(t *testing.T) {
	const mtu = 256
	var p Packet
	for _, r := range opcodeRows {
		for _, n := range payloadLens(r.payload, mtu) {
			h := fullHeaders(r.op, 0)
			b := buildPacket(&h, n)
			if len(b)%4 != 0 {
				t.Fatalf("%v/%d: built length %d not a multiple of 4", r.op, n, len(b))
			}
			for _, m := range []int{0, mtu} {
				if err := p.Parse(b, m); err != nil {
					t.Fatalf("%v with %d payload bytes, mtu %d: %v", r.op, n, m, err)
				}
			}
			if got, want := p.Headers(), onlyCarried(h); got != want {
				t.Fatalf("%v: parsed headers\n%+v\nwant\n%+v", r.op, got, want)
			}
			if h.Len() != r.hdrLen || len(p.HeaderBytes()) != r.hdrLen {
				t.Errorf("%v: header length %d/%d, want %d", r.op, h.Len(), len(p.HeaderBytes()), r.hdrLen)
			}
			if len(p.Payload) != n || len(p.Pad) != int(PadCount(n)) || p.StoredICRC() != 0x01020304 {
				t.Fatalf("%v: payload %d pad %d icrc %#x", r.op, len(p.Payload), len(p.Pad), p.StoredICRC())
			}
			for i, v := range p.Payload {
				if v != byte(i*7+1) {
					t.Fatalf("%v: payload byte %d", r.op, i)
				}
			}
			if !p.Has(r.headers) || (r.headers != HdrDETH|HdrImmDt && p.Has(HdrDETH|HdrImmDt) && r.headers&HdrDETH == 0) {
				t.Errorf("%v: Has", r.op)
			}
			for bit := Hdr(1); bit < 1<<hdrCount; bit <<= 1 {
				if p.Has(bit) != (r.headers&bit != 0) {
					t.Errorf("%v: Has(%v) = %v", r.op, bit, p.Has(bit))
				}
			}
			if p.Info().Name() != r.name || !bytes.Equal(p.Raw, b) {
				t.Errorf("%v: Info/Raw", r.op)
			}
			// The views alias the buffer: no copies.
			if &p.BTH[0] != &b[0] || (n > 0 && &p.Payload[0] != &b[r.hdrLen]) {
				t.Errorf("%v: views do not alias the buffer", r.op)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	const mtu = 1024
	build := func(o Opcode, n int, edit func(b []byte)) []byte {
		h := fullHeaders(o, 0)
		b := buildPacket(&h, n)
		if edit != nil {
			edit(b)
		}
		return b
	}
	setPad := func(pad uint8) func([]byte) { return func(b []byte) { BTH(b).SetPadCount(pad) } }
	tests := []struct {
		name string
		b    []byte
		mtu  int
		want error
	}{
		{"empty", nil, mtu, ErrTruncated},
		{"11 bytes", make([]byte, 11), mtu, ErrTruncated},
		{"BTH only", build(RCSendOnly, 0, nil)[:BTHLen], mtu, ErrTruncated},
		{"ACK without ICRC", build(RCAcknowledge, 0, nil)[:16], mtu, ErrTruncated},
		{"RETH cut", build(RCRDMAWriteOnly, 0, nil)[:20], mtu, ErrTruncated},
		{"ImmDt cut", build(RCRDMAWriteOnlyWithImmediate, 0, nil)[:30], mtu, ErrTruncated},
		{"TVer 1", build(RCSendOnly, 4, func(b []byte) { BTH(b).SetTVer(1) }), mtu, ErrBadTVer},
		{"TVer 15 short", []byte{0x04, 0x0F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, mtu, ErrBadTVer},
		{"unknown 0x15", build(0x15, 0, nil), mtu, ErrUnknownOpcode},
		{"RD opcode", build(0x44, 0, nil), mtu, ErrUnknownOpcode},
		{"XRC opcode", build(0xA4, 0, nil), mtu, ErrUnknownOpcode},
		{"unaligned payload", append(build(RCSendOnly, 4, nil), 0), mtu, ErrPadCount},
		{"pad without payload", build(RCSendOnly, 0, setPad(1)), mtu, ErrPadCount},
		{"pad on ATOMIC_WRITE", build(RCAtomicWrite, 8, setPad(1)), mtu, ErrPayloadLength},
		{"pad on ACK", build(RCAcknowledge, 0, setPad(3)), mtu, ErrPadCount},
		{"pad on FIRST", build(RCSendFirst, mtu, setPad(1)), 0, ErrPadCount},
		{"pad on MIDDLE", build(RCRDMAWriteMiddle, mtu, setPad(3)), 0, ErrPadCount},
		{"payload on ACK", build(RCAcknowledge, 4, nil), mtu, ErrPayloadLength},
		{"odd payload on ACK", build(RCAcknowledge, 2, nil), mtu, ErrPayloadLength},
		{"payload on READ request", build(RCRDMAReadRequest, 8, nil), mtu, ErrPayloadLength},
		{"payload on atomic", build(RCFetchAdd, 8, nil), mtu, ErrPayloadLength},
		{"payload on FLUSH", build(RCFlush, 4, nil), mtu, ErrPayloadLength},
		{"empty LAST", build(RCSendLast, 0, nil), mtu, ErrPayloadLength},
		{"empty LAST no MTU", build(RCRDMAReadResponseLast, 0, nil), 0, ErrPayloadLength},
		{"empty FIRST no MTU", build(RCSendFirst, 0, nil), 0, ErrPayloadLength},
		{"ATOMIC_WRITE 4", build(RCAtomicWrite, 4, nil), mtu, ErrPayloadLength},
		{"ATOMIC_WRITE 16", build(RCAtomicWrite, 16, nil), 0, ErrPayloadLength},
		{"CNP 12", build(CNP, 12, nil), mtu, ErrPayloadLength},
		{"FIRST below MTU", build(RCSendFirst, mtu-4, nil), mtu, ErrMTU},
		{"FIRST above MTU", build(RCRDMAWriteFirst, mtu+4, nil), mtu, ErrMTU},
		{"MIDDLE below MTU", build(RCRDMAReadResponseMiddle, 512, nil), mtu, ErrMTU},
		{"LAST above MTU", build(UCSendLast, mtu+1, nil), mtu, ErrMTU},
		{"ONLY above MTU", build(RCSendOnly, mtu+1, nil), mtu, ErrMTU},
		{"UD above MTU", build(UDSendOnly, 257, nil), 256, ErrMTU},
		{"READ_RESPONSE_ONLY above MTU", build(RCRDMAReadResponseOnly, 260, nil), 256, ErrMTU},
	}
	var p Packet
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.BTH = BTH{1} // must be cleared on error
			err := p.Parse(tt.b, tt.mtu)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Field == "" || pe.Error() == "" {
				t.Errorf("error %v is not a descriptive *ParseError", err)
			}
			if p.BTH != nil || p.Raw != nil || p.Payload != nil {
				t.Errorf("packet not zeroed after an error")
			}
		})
	}
}

// TestParseTruncatedNamesHeader checks that a truncation error names the
// header the packet ends in.
func TestParseTruncatedNamesHeader(t *testing.T) {
	h := fullHeaders(RCAtomicAcknowledge, 0)
	b := buildPacket(&h, 0) // BTH 12, AETH 4, AtomicAckETH 8, ICRC 4
	tests := []struct {
		n     int
		field string
	}{
		{0, "BTH"}, {11, "BTH"}, {12, "AETH"}, {15, "AETH"}, {16, "AtomicAckETH"}, {23, "AtomicAckETH"},
		{24, "ICRC"}, {27, "ICRC"},
	}
	var p Packet
	for _, tt := range tests {
		err := p.Parse(b[:tt.n], 0)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Field != tt.field || !errors.Is(err, ErrTruncated) {
			t.Errorf("cut to %d: %v, want a truncation in %s", tt.n, err, tt.field)
		}
	}
	if err := p.Parse(b, 0); err != nil {
		t.Fatal(err)
	}
}

// TestParseAllOpcodeValues runs every opcode byte through Parse with a few
// lengths: known opcodes parse or fail on lengths, unknown ones fail with
// ErrUnknownOpcode, never a panic.
func TestParseAllOpcodeValues(t *testing.T) {
	var p Packet
	for v := range 256 {
		for _, n := range []int{12, 16, 20, 28, 32, 36, 44, 64, 300} {
			b := make([]byte, n)
			b[0] = byte(v)
			err := p.Parse(b, 256)
			if !Opcode(v).Valid() {
				if !errors.Is(err, ErrUnknownOpcode) {
					t.Fatalf("opcode %#02x, %d bytes: %v", v, n, err)
				}
				continue
			}
			if err == nil && len(p.HeaderBytes())+len(p.Payload)+len(p.Pad)+len(p.ICRC) != n {
				t.Fatalf("opcode %#02x: parts do not add up", v)
			}
		}
	}
}

func TestPacketZeroValue(t *testing.T) {
	var p Packet
	if p.Has(0) || p.Has(HdrRETH) || p.HeaderBytes() != nil || p.StoredICRC() != 0 || p.Info().Transport() != TransportUnknown {
		t.Error("zero Packet accessors")
	}
	if h := p.Headers(); h != (Headers{}) {
		t.Error("zero Packet Headers")
	}
}

func TestAppendHeadersUnknownOpcode(t *testing.T) {
	h := fullHeaders(0x15, 0)
	if got := AppendHeaders(nil, &h); len(got) != BTHLen || h.Len() != BTHLen || BTH(got).Opcode() != 0x15 {
		t.Errorf("unknown opcode: %x", got)
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("prefix")
	h := fullHeaders(RCRDMAWriteOnlyWithImmediate, 0)
	b := AppendHeaders(bytes.Clone(prefix), &h)
	if !bytes.HasPrefix(b, prefix) || len(b) != len(prefix)+32 {
		t.Fatalf("AppendHeaders lost the prefix: %x", b)
	}
	if got := BTH(b[len(prefix):]).PSN(); got != psn.PSN(0xFFFFFF) {
		t.Errorf("PSN %v", got)
	}
}

func TestPadCount(t *testing.T) {
	for n, want := range []uint8{0, 3, 2, 1, 0, 3, 2, 1, 0} {
		if got := PadCount(n); got != want {
			t.Errorf("PadCount(%d) = %d, want %d", n, got, want)
		}
		if (n+int(PadCount(n)))%4 != 0 {
			t.Errorf("PadCount(%d) does not align", n)
		}
	}
	if got := PadCount(1021); got != 3 {
		t.Errorf("PadCount(1021) = %d", got)
	}
	if got := AppendPad([]byte{9}, 3); !bytes.Equal(got, []byte{9, 0, 0, 0}) {
		t.Errorf("AppendPad = %x", got)
	}
	if got := AppendICRC(nil, 0x502b325e); !bytes.Equal(got, []byte{0x5e, 0x32, 0x2b, 0x50}) {
		t.Errorf("AppendICRC = %x", got)
	}
}

func TestPayloadRuleCheck(t *testing.T) {
	tests := []struct {
		r      PayloadRule
		n, pad int
		mtu    int
		want   error
	}{
		{PayloadNone, 0, 0, 1024, nil},
		{PayloadNone, 1, 0, 1024, ErrPayloadLength},
		{PayloadNone, 0, 1, 1024, ErrPadCount},
		{PayloadUpToMTU, 0, 0, 1024, nil},
		{PayloadUpToMTU, 1024, 0, 1024, nil},
		{PayloadUpToMTU, 1025, 3, 1024, ErrMTU},
		{PayloadUpToMTU, 1 << 20, 0, 0, nil},
		{PayloadUpToMTU, 5, 3, 0, nil},
		{PayloadUpToMTU, 5, 0, 0, ErrPadCount},
		{PayloadUpToMTU, 5, 1, 0, ErrPadCount},
		{PayloadUpToMTU, 0, 2, 0, ErrPadCount},
		{PayloadEqualsMTU, 1024, 0, 1024, nil},
		{PayloadEqualsMTU, 1020, 0, 1024, ErrMTU},
		{PayloadEqualsMTU, 1020, 0, 0, nil},
		{PayloadEqualsMTU, 0, 0, 0, ErrPayloadLength},
		{PayloadEqualsMTU, 1023, 1, 0, ErrPadCount},
		{PayloadLast, 1, 3, 1024, nil},
		{PayloadLast, 0, 0, 1024, ErrPayloadLength},
		{PayloadLast, 1025, 3, 1024, ErrMTU},
		{PayloadLast, 1025, 3, -1, nil},
		{PayloadAtomicWrite, 8, 0, 256, nil},
		{PayloadAtomicWrite, 0, 0, 256, ErrPayloadLength},
		{PayloadCNP, 16, 0, 0, nil},
		{PayloadCNP, 20, 0, 0, ErrPayloadLength},
	}
	for _, tt := range tests {
		err := tt.r.Check(tt.n, tt.pad, tt.mtu)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%v.Check(%d, %d, %d) = %v, want %v", tt.r, tt.n, tt.pad, tt.mtu, err, tt.want)
		}
	}
}
