package verbs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// TestFirstReply checks which acknowledgements of a QP's output may leave
// with the shared replies of a batch: only those after its last other
// response.
func TestFirstReply(t *testing.T) {
	pkt := func(op wire.Opcode, n int) transport.OutPacket {
		b := make([]byte, n)
		b[0] = byte(op)
		return transport.OutPacket{Bytes: b}
	}
	ack := pkt(wire.RCAcknowledge, replyLen)
	readResp := pkt(wire.RCRDMAReadResponseOnly, replyLen+64)
	atomicAck := pkt(wire.RCAtomicAcknowledge, replyLen+wire.AtomicAckETHLen)
	write := pkt(wire.RCRDMAWriteOnly, wire.BTHLen+wire.RETHLen+64)
	for _, tc := range []struct {
		name string
		pkts []transport.OutPacket
		want int
	}{
		{"empty", nil, 0},
		{"ACKs", []transport.OutPacket{ack, ack, ack}, 0},
		{"requests and ACKs", []transport.OutPacket{write, ack, write, ack}, 0},
		{"ACK after READ response", []transport.OutPacket{readResp, ack}, 1},
		{"ACK before READ response", []transport.OutPacket{ack, readResp}, 2},
		{"ACK between", []transport.OutPacket{ack, readResp, ack, ack}, 2},
		{"ATOMIC ACKNOWLEDGE", []transport.OutPacket{ack, atomicAck, ack}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstReply(tc.pkts); got != tc.want {
				t.Errorf("firstReply = %d, want %d", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"ACK", ack.Bytes, true},
		{"ATOMIC ACKNOWLEDGE", atomicAck.Bytes, false},
		{"READ response", readResp.Bytes, false},
		{"short", ack.Bytes[:wire.BTHLen], false},
		{"empty", nil, false},
	} {
		b := &replyBatch{}
		if got := b.take(mustAddrPort(t), tc.pkt); got != tc.want {
			t.Errorf("take(%s) = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want {
			m := b.msgs[0].Packet
			if !bytes.Equal(m, tc.pkt) || cap(m)-len(m) < wire.ICRCLen || &m[0] == &tc.pkt[0] {
				t.Errorf("take(%s) kept % x (spare %d), want a copy with room for the ICRC", tc.name, m, cap(m)-len(m))
			}
		}
	}
}

func mustAddrPort(t testing.TB) netip.AddrPort {
	t.Helper()
	return netip.AddrPortFrom(mustAddr("127.0.1.2"), wire.RoCEv2Port)
}

// TestReplyPort runs WRITEs, a READ and an atomic and checks, on the
// requester's capture, the UDP source port of each response: by default the
// ACKs come from the responder's device port (several QPs' ACKs share a
// system call), with PerQPReplyPort from the QP's own; READ responses and
// ATOMIC_ACKNOWLEDGE always from the QP's. It also checks that the QPs hold
// no packet buffers once idle.
func TestReplyPort(t *testing.T) {
	for _, perQP := range []bool{false, true} {
		name := "shared"
		if perQP {
			name = "PerQPReplyPort"
		}
		t.Run(name, func(t *testing.T) {
			a := newEndConfig(t, DeviceConfig{Addr: mustAddr("127.0.1.1")})
			b := newEndConfig(t, DeviceConfig{Addr: mustAddr("127.0.1.2"), PerQPReplyPort: perQP})
			connect(t, a, b, defaultLink(), defaultLink())

			var capture bytes.Buffer
			if err := a.dev.eng.conn.SetCapture(&capture); err != nil {
				t.Fatal(err)
			}
			const writes = 16
			for i := range writes {
				mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled,
					SGList: []SGE{a.mr.SGE(0, 3000)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
			}
			// The READ and the atomic after the WRITEs complete: had
			// they come in the WRITEs' receive batch, the WRITEs' ACKs
			// would have left before their responses, from the QP's
			// port (firstReply).
			for _, wc := range waitN(t, a.cq, writes) {
				if wc.Status != WCSuccess {
					t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
				}
			}
			mustPostSend(t, a.qp, SendWR{WRID: 100, Opcode: WRRDMARead, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(4096, 2048)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
			mustPostSend(t, a.qp, SendWR{WRID: 101, Opcode: WRAtomicFetchAndAdd, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(8192, 8)}, Atomic: AtomicParams{RemoteAddr: b.mr.IOVA() + 8192, CompareAdd: 1, RKey: b.mr.RKey()}})
			for _, wc := range waitN(t, a.cq, 2) {
				if wc.Status != WCSuccess {
					t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
				}
			}
			if err := a.dev.eng.conn.SetCapture(nil); err != nil {
				t.Fatal(err)
			}

			devPort, qpPort := b.dev.udpPort, b.qp.sender.Port()
			if devPort == qpPort {
				t.Fatalf("device and QP share port %d: the test cannot tell them apart", devPort)
			}
			ports := map[wire.Opcode]map[uint16]int{}
			r, err := pcap.NewReader(&capture)
			if err != nil {
				t.Fatal(err)
			}
			for {
				rec, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				f, err := pcap.DecodeFrame(r.LinkType(), rec.Data)
				if err != nil {
					t.Fatal(err)
				}
				if f.Dst != a.dev.addr || len(f.UDPPayload) == 0 {
					continue // sent by a
				}
				op := wire.Opcode(f.UDPPayload[0])
				if ports[op] == nil {
					ports[op] = map[uint16]int{}
				}
				ports[op][f.SrcPort]++
			}
			acks := ports[wire.RCAcknowledge]
			switch {
			case len(acks) == 0:
				t.Fatal("no ACK captured")
			case perQP && (acks[devPort] != 0 || acks[qpPort] == 0):
				t.Errorf("ACK source ports %v, want only the QP's %d", acks, qpPort)
			case !perQP && (acks[devPort] == 0 || len(acks) > 2 || len(acks) == 2 && acks[qpPort] == 0):
				// A PostSend or the timer may send a pending ACK
				// from the QP's port; the end of a batch sends it
				// from the device's.
				t.Errorf("ACK source ports %v, want the device's %d (and the QP's %d)", acks, devPort, qpPort)
			}
			for _, op := range []wire.Opcode{wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle,
				wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly, wire.RCAtomicAcknowledge} {
				for p, n := range ports[op] {
					if p != qpPort {
						t.Errorf("%d %v from port %d, want the QP's %d", n, op.Info().Name, p, qpPort)
					}
				}
			}
			if len(ports[wire.RCAtomicAcknowledge]) == 0 || len(ports[wire.RCRDMAReadResponseFirst])+len(ports[wire.RCRDMAReadResponseOnly]) == 0 {
				t.Errorf("READ response or ATOMIC ACKNOWLEDGE missing from the capture: %v", ports)
			}

			// Idle QPs hold no packet buffers: they went back to
			// the engine's pool. The receive path returns one at the
			// end of its batch, after it delivered the completion
			// waitN saw: wait for that.
			for _, e := range []*rcEnd{a, b} {
				waitFor(t, fmt.Sprintf("idle QP %#x to return its Output", e.qp.QPN()), func() bool {
					e.qp.xmu.Lock()
					defer e.qp.xmu.Unlock()
					return e.qp.out == nil
				})
			}
		})
	}
}

// TestOutputPool checks that the pool lends the Output returned last
// first.
func TestOutputPool(t *testing.T) {
	var p outputPool
	o1, o2 := p.get(), p.get()
	if o1 == o2 {
		t.Fatal("two gets returned one Output")
	}
	p.put(o2)
	p.put(o1)
	if got := p.get(); got != o1 {
		t.Errorf("get = %p, want %p (returned last)", got, o1)
	}
	if got := p.get(); got != o2 {
		t.Errorf("get = %p, want %p", got, o2)
	}
}

// newEndConfig is newEnd with the device opened with cfg.
func newEndConfig(t testing.TB, cfg DeviceConfig) *rcEnd {
	t.Helper()
	e := &rcEnd{dev: openDevice(t, cfg)}
	e.pd = mustPD(t, e.dev)
	cq, err := e.dev.CreateCQ(512, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq
	e.buf = make([]byte, 1<<16)
	e.mr = mustMR2(t, e.pd, e.buf, rcAccess)
	e.qp, err = e.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
