package rsocket

import (
	"bytes"
	"testing"
)

// FuzzConnData: whatever a peer puts in its private data, parseConnData
// returns an error or a connData that encodes back to the same 40 bytes
// (the reserved bytes zero) with the fields it checks valid.
func FuzzConnData(f *testing.F) {
	f.Add(rsConnData)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConnData(b)
		if err != nil {
			return
		}
		if c.version != connVersion || c.credits == 0 || c.targetSGL.length == 0 || c.dataBuf.length == 0 {
			t.Fatalf("accepted %+v", c)
		}
		want := bytes.Clone(b[:connDataLen])
		want[4], want[5], want[6] = 0, 0, 0
		if out := c.append(nil); !bytes.Equal(out, want) {
			t.Fatalf("% x parsed as %+v, encodes as % x", b[:connDataLen], c, out)
		}
	})
}

// FuzzMsg: any immediate data and write length a peer sends is refused or
// parsed into what it says, never more.
func FuzzMsg(f *testing.F) {
	f.Add(msg(opData, 65536), uint32(65536))
	f.Add(msg(opSGL, 400), uint32(sgeLen))
	f.Add(msg(opSGL, 400), uint32(0))
	f.Add(msg(opCtrl, ctrlShutdown), uint32(0))
	f.Add(msg(1, 5), uint32(5))
	f.Fuzz(func(t *testing.T, imm, byteLen uint32) {
		m, err := parseMsg(imm, byteLen)
		if err != nil {
			return
		}
		if msg(m.op, m.data) != imm {
			t.Fatalf("%#x parsed as %+v", imm, m)
		}
		if m.op == opData && (m.data == 0 || m.data != byteLen) {
			t.Fatalf("data message %+v of %d bytes accepted", m, byteLen)
		}
		if m.region != (m.op == opSGL && byteLen == sgeLen) {
			t.Fatalf("%+v of %d bytes", m, byteLen)
		}
	})
}
