package wire

import (
	"strconv"
	"testing"
)

// benchPacket returns a transport packet (BTH through ICRC) with an RDMA
// WRITE ONLY header and n payload bytes, and the IPv4 and UDP headers it
// travels in.
func benchPacket(n int) (ip, udp, transport []byte) {
	h := fullHeaders(RCRDMAWriteOnly, 0)
	transport = buildPacket(&h, n)
	ipf := IPv4Fields{TotalLength: uint16(28 + len(transport)), Flags: IPv4DontFragment, TTL: 64,
		Protocol: IPProtocolUDP, Src: [4]byte{10, 99, 0, 1}, Dst: [4]byte{10, 99, 0, 2}}
	udpf := UDPFields{SrcPort: 0xC123, DstPort: RoCEv2Port, Length: uint16(8 + len(transport))}
	return ipf.Append(nil), udpf.Append(nil), transport
}

func BenchmarkICRC(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		ip, udp, tr := benchPacket(n)
		body := tr[:len(tr)-ICRCLen]
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var sink uint32
			for b.Loop() {
				sink ^= ICRC(ip, udp, body)
			}
			_ = sink
		})
	}
}

func BenchmarkICRCv4(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		_, _, tr := benchPacket(n)
		hdrs, payload := tr[:RCRDMAWriteOnly.Info().HeaderLen()], tr[RCRDMAWriteOnly.Info().HeaderLen():len(tr)-ICRCLen]
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(tr) - ICRCLen))
			b.ReportAllocs()
			var sink uint32
			for b.Loop() {
				sink ^= ICRCv4([4]byte{10, 99, 0, 1}, [4]byte{10, 99, 0, 2}, 0, 0xC123, RoCEv2Port, hdrs, payload)
			}
			_ = sink
		})
	}
}

func BenchmarkParse(b *testing.B) {
	_, _, write := benchPacket(1024)
	ackH := fullHeaders(RCAcknowledge, 0)
	ack := buildPacket(&ackH, 0)
	for _, tc := range []struct {
		name string
		pkt  []byte
	}{{"RDMAWriteOnly1024", write}, {"Acknowledge", ack}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var p Packet
			for b.Loop() {
				if err := p.Parse(tc.pkt, 1024); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendHeaders(b *testing.B) {
	for _, o := range []Opcode{RCSendMiddle, RCRDMAWriteOnlyWithImmediate, RCAtomicAcknowledge} {
		h := fullHeaders(o, 0)
		buf := make([]byte, 0, 64)
		b.Run(o.Info().Name()[3:], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendHeaders(buf[:0], &h)
			}
		})
	}
}

func BenchmarkBTHGetters(b *testing.B) {
	h := fullHeaders(RCSendLast, 0)
	bth := BTH(AppendHeaders(nil, &h))
	b.ReportAllocs()
	var sink uint32
	for b.Loop() {
		sink += uint32(bth.Opcode()) + uint32(bth.PadCount()) + uint32(bth.DestQP()) + uint32(bth.PSN()) + uint32(bth.PKey())
		if bth.AckReq() {
			sink++
		}
	}
	_ = sink
}
