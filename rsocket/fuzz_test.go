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
