package kv

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// FuzzDecodeRequest feeds the RDMA server's request decoder (a peer's
// SEND) and the TCP server's header parser arbitrary bytes: they refuse or
// return fields inside the message, never panic.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(appendRequest(nil, opPut, []byte("key"), []byte("value")))
	f.Add(appendRequest(nil, opGet, []byte("key"), nil))
	f.Add([]byte{opPut, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, m []byte) {
		const valueMax = 64
		r, err := decodeRequest(m, valueMax)
		if err == nil && (len(r.key) == 0 || len(r.key) > KeyMax || len(r.value) > valueMax) {
			t.Fatalf("accepted key of %d bytes, value of %d", len(r.key), len(r.value))
		}
		if _, klen, vlen, err := parseHeader(m, valueMax); err == nil && (klen > KeyMax || vlen > valueMax) {
			t.Fatalf("header accepted key of %d bytes, value of %d", klen, vlen)
		}
	})
}

// FuzzDecodeHello feeds the client's decoder of the server's private data
// arbitrary bytes: a table it accepts has a valid shape and a region that
// holds exactly its slots.
func FuzzDecodeHello(f *testing.F) {
	g := Geometry{Slots: 1024, ValueMax: 64}
	h, err := encodeHello(verbs.RemoteRegion{Addr: 0x1000, RKey: 7, Length: uint64(g.Slots * g.SlotSize())}, g)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(h, make([]byte, 196-len(h))...))
	f.Add(make([]byte, 196))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, g, err := decodeHello(b)
		if err != nil {
			return
		}
		if g.check() != nil || r.Length != uint64(g.Slots)*uint64(g.SlotSize()) {
			t.Fatalf("accepted %+v for %+v", r, g)
		}
	})
}
