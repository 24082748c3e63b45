package main

import (
	"bytes"
	"testing"
)

// FuzzInfo: any 16 bytes a peer SENDs are some rping_rdma_info, which
// encodes back to the same bytes; the server then bounds its size
// against its own buffer (serve).
func FuzzInfo(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != infoSize {
			return // next refuses other sizes ("received bogus data")
		}
		in := parseInfo(b)
		out := make([]byte, infoSize)
		in.put(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("% x parsed as %+v, encodes as % x", b, in, out)
		}
	})
}
