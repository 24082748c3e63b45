package wire

import "testing"

// The packets of a bulk RDMA WRITE at the loopback MTU, beside
// bench_test.go's: what the responder parses most (WRITE MIDDLE, 4096
// bytes) and what the requester and responder build most (WRITE FIRST and
// MIDDLE headers, the ACK).

func BenchmarkParseWriteMiddle4096(b *testing.B) {
	h := fullHeaders(RCRDMAWriteMiddle, 0)
	pkt := buildPacket(&h, 4096)
	// No SetBytes: parsing reads the headers only, whatever the payload.
	b.ReportAllocs()
	var p Packet
	for b.Loop() {
		if err := p.Parse(pkt, 4096); err != nil {
			b.Fatal(err)
		}
	}
	if len(p.Payload) != 4096 {
		b.Fatalf("payload of %d bytes", len(p.Payload))
	}
}

func BenchmarkAppendHeadersWrite(b *testing.B) {
	for _, o := range []Opcode{RCRDMAWriteFirst, RCRDMAWriteMiddle, RCAcknowledge} {
		h := fullHeaders(o, 0)
		buf := make([]byte, 0, 64)
		b.Run(o.Info().Name()[3:], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendHeaders(buf[:0], &h)
			}
			if len(buf) != o.Info().HeaderLen() {
				b.Fatalf("%d header bytes, want %d", len(buf), o.Info().HeaderLen())
			}
		})
	}
}
