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
	f.Add(msg(opIOMapSGL, 0), uint32(ioMapLen))
	f.Add(msg(opIOMapSGL, 3), uint32(sgeLen))
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
		if m.op == opIOMapSGL && byteLen != ioMapLen {
			t.Fatalf("iomap entry %+v of %d bytes accepted", m, byteLen)
		}
		if m.region != (m.op == opSGL && byteLen == sgeLen) {
			t.Fatalf("%+v of %d bytes", m, byteLen)
		}
	})
}

// FuzzIOMap: whatever a peer writes into an entry of this side's iomap
// table, parseIOMap refuses it or returns a non-empty mapping whose
// offsets and addresses do not wrap, which encodes back to the same 24
// bytes (little-endian, the order goroce announces); covers holds for
// exactly its offsets.
func FuzzIOMap(f *testing.F) {
	f.Add(rsIOMap)
	f.Add(make([]byte, ioMapLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseIOMap(b)
		if err != nil {
			return
		}
		n := uint64(m.region.length)
		if n == 0 || m.offset+n < m.offset || m.region.addr+n < m.region.addr {
			t.Fatalf("accepted %+v", m)
		}
		if out := appendIOMap(nil, m, false); !bytes.Equal(out, b[:ioMapLen]) {
			t.Fatalf("% x parsed as %+v, encodes as % x", b[:ioMapLen], m, out)
		}
		last := m.offset + n - 1
		if !m.covers(m.offset) || !m.covers(last) || m.covers(last+1) || (m.offset > 0 && m.covers(m.offset-1)) {
			t.Fatalf("%+v covers the wrong offsets", m)
		}
	})
}
