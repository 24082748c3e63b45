package transport

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// The hot paths of the data path at the loopback MTU (4096), beside
// bench_test.go's: the requester segmenting a WRITE into its Output and
// retiring it on one ACK, for the bandwidth test's 64 KiB and the message
// rate test's 8 bytes; and the responder placing a multi-packet WRITE
// (FIRST, MIDDLEs, LAST) into memory.

// BenchmarkRequesterWrite posts one signaled RDMA WRITE, checks that it
// was cut into the expected packets, and retires it with one ACK.
func BenchmarkRequesterWrite(b *testing.B) {
	for _, tc := range []struct{ mtu, size, sges int }{{4096, 64 << 10, 1}, {1024, 64 << 10, 2}, {4096, 8, 1}, {1024, 8, 1}} {
		b.Run(fmt.Sprintf("mtu%d/%dB/%dsge", tc.mtu, tc.size, tc.sges), func(b *testing.B) {
			l := newLoop(b, tc.mtu)
			src := make([]byte, tc.size)
			k := l.a.mem.register(pd, src, 0, 0)
			// The message in tc.sges equal pieces of one region.
			part := uint32(tc.size / tc.sges)
			var sgl []SGE
			for i := range tc.sges {
				sgl = append(sgl, SGE{uint64(i) * uint64(part), part, k})
			}
			w := SendWQE{Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: sgl, RKey: 1}
			packets := (tc.size + tc.mtu - 1) / tc.mtu
			ack := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: 0xFFFF, DestQP: qpnA},
				AETH: wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited}}
			buf := make([]byte, 0, 64)
			var pkt wire.Packet
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			for b.Loop() {
				if err := l.a.qp.PostSend(&w, l.now, &l.a.out); err != nil {
					b.Fatal(err)
				}
				if n := l.a.out.Len(); n != packets {
					b.Fatalf("%d packets, want %d", n, packets)
				}
				l.a.out.Reset()
				ack.BTH.PSN = l.a.qp.req.psn.Add(psn.Mask)
				buf = append(wire.AppendHeaders(buf[:0], &ack), 0, 0, 0, 0)
				if err := pkt.Parse(buf, 0); err != nil {
					b.Fatal(err)
				}
				l.a.qp.HandlePacket(&pkt, l.now, &l.a.out)
				l.a.out.Reset()
			}
			b.StopTimer()
			if l.scq.n == 0 || l.scq.errors != 0 {
				b.Fatalf("%d completions, %d errors", l.scq.n, l.scq.errors)
			}
		})
	}
}

// BenchmarkResponderWriteMiddle places a 64 KiB RDMA WRITE arriving as 16
// packets of 4096 bytes: FIRST, 14 MIDDLE and LAST (which asks for the
// ACK). Per packet, divide ns/op by 16.
func BenchmarkResponderWriteMiddle(b *testing.B) {
	const mtu, n = 4096, 64 << 10
	l := newLoop(b, mtu)
	dst := make([]byte, n)
	rkey := l.b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	payload := make([]byte, mtu)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	parse := func(op wire.Opcode, ackReq bool, set func(h *wire.Headers)) *wire.Packet {
		raw := append(req(op, 0, ackReq, payload, set), 0, 0, 0, 0)
		p := new(wire.Packet)
		if err := p.Parse(raw, mtu); err != nil {
			b.Fatal(err)
		}
		return p
	}
	first := parse(wire.RCRDMAWriteFirst, false, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{RKey: rkey, DMALength: n}
	})
	middle := parse(wire.RCRDMAWriteMiddle, false, nil)
	last := parse(wire.RCRDMAWriteLast, true, nil)
	const middles = n/mtu - 2
	handle := func(p *wire.Packet) {
		p.BTH.SetPSN(l.b.qp.resp.epsn)
		l.b.qp.HandlePacket(p, l.now, &l.b.out)
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		handle(first)
		for range middles {
			handle(middle)
		}
		handle(last)
		l.b.out.Reset()
	}
	b.StopTimer()
	if l.b.qp.State() != ibv.QPStateRTS || l.b.qp.Counters().DuplicateRequest != 0 {
		b.Fatal("WRITEs were not accepted")
	}
	for off := 0; off < n; off += mtu {
		if dst[off+mtu-1] != payload[mtu-1] || dst[off] != payload[0] {
			b.Fatalf("packet at offset %d was not placed", off)
		}
	}
}
