package wire

import (
	"strings"
	"testing"
	"unsafe"
)

// opcodeRows restates roce-facts.md 2.1 (and rxe_opcode.c's header lists and
// lengths) independently of opTable.
var opcodeRows = []struct {
	op      Opcode
	name    string
	headers Hdr
	hdrLen  int // rxe_opcode.c .length
	payload PayloadRule
}{
	{0x00, "RC SEND_FIRST", 0, 12, PayloadEqualsMTU},
	{0x01, "RC SEND_MIDDLE", 0, 12, PayloadEqualsMTU},
	{0x02, "RC SEND_LAST", 0, 12, PayloadLast},
	{0x03, "RC SEND_LAST_WITH_IMMEDIATE", HdrImmDt, 16, PayloadLast},
	{0x04, "RC SEND_ONLY", 0, 12, PayloadUpToMTU},
	{0x05, "RC SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, 16, PayloadUpToMTU},
	{0x06, "RC RDMA_WRITE_FIRST", HdrRETH, 28, PayloadEqualsMTU},
	{0x07, "RC RDMA_WRITE_MIDDLE", 0, 12, PayloadEqualsMTU},
	{0x08, "RC RDMA_WRITE_LAST", 0, 12, PayloadLast},
	{0x09, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, 16, PayloadLast},
	{0x0A, "RC RDMA_WRITE_ONLY", HdrRETH, 28, PayloadUpToMTU},
	{0x0B, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH | HdrImmDt, 32, PayloadUpToMTU},
	{0x0C, "RC RDMA_READ_REQUEST", HdrRETH, 28, PayloadNone},
	{0x0D, "RC RDMA_READ_RESPONSE_FIRST", HdrAETH, 16, PayloadEqualsMTU},
	{0x0E, "RC RDMA_READ_RESPONSE_MIDDLE", 0, 12, PayloadEqualsMTU},
	{0x0F, "RC RDMA_READ_RESPONSE_LAST", HdrAETH, 16, PayloadLast},
	{0x10, "RC RDMA_READ_RESPONSE_ONLY", HdrAETH, 16, PayloadUpToMTU},
	{0x11, "RC ACKNOWLEDGE", HdrAETH, 16, PayloadNone},
	{0x12, "RC ATOMIC_ACKNOWLEDGE", HdrAETH | HdrAtomicAckETH, 24, PayloadNone},
	{0x13, "RC COMPARE_SWAP", HdrAtomicETH, 40, PayloadNone},
	{0x14, "RC FETCH_ADD", HdrAtomicETH, 40, PayloadNone},
	{0x16, "RC SEND_LAST_WITH_INVALIDATE", HdrIETH, 16, PayloadLast},
	{0x17, "RC SEND_ONLY_WITH_INVALIDATE", HdrIETH, 16, PayloadUpToMTU},
	{0x1C, "RC FLUSH", HdrFETH | HdrRETH, 32, PayloadNone},
	{0x1D, "RC ATOMIC_WRITE", HdrRETH, 28, PayloadAtomicWrite},
	{0x20, "UC SEND_FIRST", 0, 12, PayloadEqualsMTU},
	{0x21, "UC SEND_MIDDLE", 0, 12, PayloadEqualsMTU},
	{0x22, "UC SEND_LAST", 0, 12, PayloadLast},
	{0x23, "UC SEND_LAST_WITH_IMMEDIATE", HdrImmDt, 16, PayloadLast},
	{0x24, "UC SEND_ONLY", 0, 12, PayloadUpToMTU},
	{0x25, "UC SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, 16, PayloadUpToMTU},
	{0x26, "UC RDMA_WRITE_FIRST", HdrRETH, 28, PayloadEqualsMTU},
	{0x27, "UC RDMA_WRITE_MIDDLE", 0, 12, PayloadEqualsMTU},
	{0x28, "UC RDMA_WRITE_LAST", 0, 12, PayloadLast},
	{0x29, "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, 16, PayloadLast},
	{0x2A, "UC RDMA_WRITE_ONLY", HdrRETH, 28, PayloadUpToMTU},
	{0x2B, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH | HdrImmDt, 32, PayloadUpToMTU},
	{0x64, "UD SEND_ONLY", HdrDETH, 20, PayloadUpToMTU},
	{0x65, "UD SEND_ONLY_WITH_IMMEDIATE", HdrDETH | HdrImmDt, 24, PayloadUpToMTU},
	{0x81, "CNP", 0, 12, PayloadCNP},
	{0xC0, "RC GOROCE_SACK_ACKNOWLEDGE", HdrAETH, 16, PayloadSACK},
}

func TestOpcodeTable(t *testing.T) {
	known := map[Opcode]bool{}
	for _, r := range opcodeRows {
		known[r.op] = true
		i := r.op.Info()
		if i.Name() != r.name || r.op.String() != r.name {
			t.Errorf("%#02x: name %q / %q, want %q", uint8(r.op), i.Name(), r.op.String(), r.name)
		}
		if i.Headers() != r.headers || i.HeaderLen() != r.hdrLen || BTHLen+r.headers.Len() != r.hdrLen {
			t.Errorf("%v: headers %v (%d bytes), want %v (%d)", r.op, i.Headers(), i.HeaderLen(), r.headers, r.hdrLen)
		}
		if i.Payload() != r.payload {
			t.Errorf("%v: payload %v, want %v", r.op, i.Payload(), r.payload)
		}
		if !r.op.Valid() {
			t.Errorf("%v: not valid", r.op)
		}
		checkFlagsFromName(t, r.op, i)
	}
	for v := range 256 {
		o := Opcode(v)
		if known[o] {
			continue
		}
		if o.Valid() || o.Info() != (OpInfo{}) {
			t.Errorf("%#02x: unknown opcode described as %+v", v, o.Info())
		}
		if want := "UNKNOWN(0x"; !strings.HasPrefix(o.String(), want) || len(o.String()) != len("UNKNOWN(0x00)") {
			t.Errorf("%#02x: String = %q", v, o.String())
		}
	}
	if got := Opcode(0x15).String(); got != "UNKNOWN(0x15)" {
		t.Errorf("0x15 String = %q", got)
	}
}

// checkFlagsFromName derives every flag from the IBTA name and compares.
func checkFlagsFromName(t *testing.T, o Opcode, i OpInfo) {
	t.Helper()
	name := i.Name()
	has := func(s string) bool { return strings.Contains(name, s) }
	single := has("_ONLY") || has("READ_REQUEST") || has("ACKNOWLEDGE") || has("COMPARE_SWAP") ||
		has("FETCH_ADD") || has("FLUSH") || has("ATOMIC_WRITE")
	response := has("RESPONSE") || has("ACKNOWLEDGE")
	want := map[string]bool{
		"IsFirst":        has("_FIRST"),
		"IsMiddle":       has("_MIDDLE"),
		"IsLast":         has("_LAST"),
		"IsOnly":         single,
		"StartsMessage":  has("_FIRST") || single,
		"EndsMessage":    has("_LAST") || single,
		"IsSend":         has("SEND"),
		"IsWrite":        has("RDMA_WRITE"),
		"IsReadRequest":  has("READ_REQUEST"),
		"IsReadResponse": has("READ_RESPONSE"),
		"IsAck":          has("ACKNOWLEDGE"),
		"IsAtomic":       has("COMPARE_SWAP") || has("FETCH_ADD"),
		"IsAtomicWrite":  has("ATOMIC_WRITE"),
		"IsFlush":        has("FLUSH"),
		"HasImmediate":   has("WITH_IMMEDIATE"),
		"HasInvalidate":  has("WITH_INVALIDATE"),
		"IsRequest":      !response && o != CNP,
		"IsResponse":     response,
	}
	got := map[string]bool{
		"IsFirst": i.IsFirst(), "IsMiddle": i.IsMiddle(), "IsLast": i.IsLast(), "IsOnly": i.IsOnly(),
		"StartsMessage": i.StartsMessage(), "EndsMessage": i.EndsMessage(),
		"IsSend": i.IsSend(), "IsWrite": i.IsWrite(), "IsReadRequest": i.IsReadRequest(),
		"IsReadResponse": i.IsReadResponse(), "IsAck": i.IsAck(), "IsAtomic": i.IsAtomic(),
		"IsAtomicWrite": i.IsAtomicWrite(), "IsFlush": i.IsFlush(), "HasImmediate": i.HasImmediate(),
		"HasInvalidate": i.HasInvalidate(), "IsRequest": i.IsRequest(), "IsResponse": i.IsResponse(),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%v: %s = %v, want %v", o, k, got[k], w)
		}
	}
	// Headers agree with the flags.
	if i.HasImmediate() != (i.Headers()&HdrImmDt != 0) || i.HasInvalidate() != (i.Headers()&HdrIETH != 0) ||
		i.IsAtomic() != (i.Headers()&HdrAtomicETH != 0) {
		t.Errorf("%v: flags disagree with headers %v", o, i.Headers())
	}
	// Transport from the prefix and from the opcode's top three bits.
	wantT := map[string]Transport{"RC": TransportRC, "UC": TransportUC, "UD": TransportUD, "CNP": TransportCNP}[strings.Fields(name)[0]]
	if i.Transport() != wantT {
		t.Errorf("%v: transport %v, want %v", o, i.Transport(), wantT)
	}
	base := map[Transport]Opcode{TransportRC: 0x00, TransportUC: 0x20, TransportUD: 0x60, TransportCNP: 0x80}[wantT]
	if strings.Contains(name, "GOROCE_") {
		base = 0xC0 // goroce's own, in the manufacturer-specific range
	}
	if o&0xE0 != base {
		t.Errorf("%v: opcode %#02x outside its transport's range", o, uint8(o))
	}
}

func TestHdrString(t *testing.T) {
	tests := []struct {
		h    Hdr
		want string
		len  int
	}{
		{0, "none", 0},
		{HdrRETH, "RETH", 16},
		{HdrRETH | HdrImmDt, "RETH|ImmDt", 20},
		{HdrImmDt | HdrDETH, "DETH|ImmDt", 12},
		{HdrFETH | HdrRETH, "FETH|RETH", 20},
		{HdrAETH | HdrAtomicAckETH, "AETH|AtomicAckETH", 12},
		{HdrAtomicETH, "AtomicETH", 28},
		{HdrIETH, "IETH", 4},
		{HdrIETH | 0x8000, "IETH|0x8000", 4},
	}
	for _, tt := range tests {
		if got := tt.h.String(); got != tt.want {
			t.Errorf("%#x.String() = %q, want %q", uint16(tt.h), got, tt.want)
		}
		if got := tt.h.Len(); got != tt.len {
			t.Errorf("%v.Len() = %d, want %d", tt.h, got, tt.len)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{TransportRC.String(), "RC"},
		{TransportUC.String(), "UC"},
		{TransportUD.String(), "UD"},
		{TransportCNP.String(), "CNP"},
		{TransportUnknown.String(), "unknown"},
		{Transport(9).String(), "Transport(9)"},
		{PayloadNone.String(), "none"},
		{PayloadLast.String(), "1..MTU"},
		{PayloadEqualsMTU.String(), "MTU"},
		{PayloadRule(42).String(), "PayloadRule(42)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestOpInfoSize: OpInfo stays one word (see its comment), and every
// opcode's fields round-trip through the packing.
func TestOpInfoSize(t *testing.T) {
	if n := unsafe.Sizeof(OpInfo{}); n != 8 {
		t.Errorf("OpInfo is %d bytes, want 8", n)
	}
	for o, r := range opRows {
		i := Opcode(o).Info()
		if r.transport == TransportUnknown {
			continue
		}
		if i.Transport() != r.transport || i.Headers() != r.headers || i.Payload() != r.payload ||
			i.flags() != r.flags || i.HeaderLen() != BTHLen+r.headers.Len() || i.Name() != r.name {
			t.Errorf("%#02x: packed %#x does not give back its row %+v", o, i.v, r)
		}
	}
}
