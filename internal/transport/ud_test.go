package transport

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// udLink delivers a's UD packets to b with the IP header fields nh, checking
// the wire format on the way; it returns the packets' destinations.
func udDeliver(t *testing.T, a, b *endpoint, nh *NetHeader) []any {
	t.Helper()
	var dests []any
	var buf []byte
	var p wire.Packet
	for _, op := range a.out.Packets() {
		buf = frame(buf, op.Bytes, addrA, addrB)
		if err := p.Parse(buf, a.qp.PathMTU()); err != nil {
			t.Fatalf("unparseable: %v", err)
		}
		if p.Info().Transport() != wire.TransportUD || p.BTH.AckReq() || uint32(p.DETH.SrcQP()) != a.qp.QPN() {
			t.Fatalf("packet %v AckReq %v SrcQP %v", p.BTH.Opcode(), p.BTH.AckReq(), p.DETH.SrcQP())
		}
		dests = append(dests, op.Dest)
		b.qp.HandlePacketFrom(&p, nh, time.Unix(1, 0), &b.out)
	}
	a.out.Reset()
	if b.out.Len() != 0 {
		t.Fatal("the UD responder answered")
	}
	return dests
}

var nhV4 = NetHeader{
	Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("10.1.2.4"),
	IPID: 0x1234, HopLimit: 64, TrafficClass: 0x10,
}

// TestUDSend sends SEND and SEND_WITH_IMM datagrams of 0, 1 and MTU bytes
// and checks the receive: GRH area, payload after it, byte_len with the 40
// bytes, source QP, flags.
func TestUDSend(t *testing.T) {
	const mtu = 1024
	for _, op := range []ibv.WROpcode{ibv.WRSend, ibv.WRSendWithImm} {
		for _, n := range []int{0, 1, mtu} {
			t.Run(op.String()+"/"+itoa(uint64(n)), func(t *testing.T) {
				o := defaultOpts()
				o.mtu = mtu
				a, b := newUnreliablePair(t, ibv.QPTypeUD, o, 0x11111111)
				src := pattern(n, 7)
				lkey := a.mem.register(pd, append(src, 0), 0, ibv.AccessLocalWrite)
				dst := make([]byte, 2048)
				rkey := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)
				must(t, b.qp.PostRecv(&RecvWQE{WRID: 9, SGL: []SGE{{0, uint32(GRHLen + n), rkey}}}))
				must(t, a.qp.PostSend(&SendWQE{WRID: 1, Opcode: op, Flags: ibv.SendSignaled | ibv.SendSolicited, SGL: []SGE{{0, uint32(n), lkey}},
					RemoteQPN: qpnB, RemoteQKey: 0x11111111, Dest: "to-b", Imm: 0xABCD}, time.Unix(1, 0), &a.out))
				wantSend := Completion{WRID: 1, Opcode: ibv.WCSend, ByteLen: uint32(n), QPN: qpnA}
				if op == ibv.WRSendWithImm {
					wantSend.Flags = ibv.WCWithImm
				}
				wantCompletions(t, a.scq.take(), wantSend)
				if d := udDeliver(t, a, b, &nhV4); len(d) != 1 || d[0] != "to-b" {
					t.Fatalf("destinations %v", d)
				}
				want := Completion{WRID: 9, Opcode: ibv.WCRecv, ByteLen: uint32(GRHLen + n), QPN: qpnB, SrcQP: qpnA, Flags: ibv.WCGRH, Solicited: true}
				if op == ibv.WRSendWithImm {
					want.Imm, want.Flags = 0xABCD, ibv.WCGRH|ibv.WCWithImm
				}
				wantCompletions(t, b.rcq.take(), want)
				wantBytes(t, "payload", dst[GRHLen:GRHLen+n], src)
				g := dst[:GRHLen]
				wantBytes(t, "GRH reserved bytes", g[:20], make([]byte, 20))
				ip := wire.IPv4(g[20:40])
				udp := 8 + wire.BTHLen + wire.DETHLen + n + int(wire.PadCount(n)) + wire.ICRCLen
				if op == ibv.WRSendWithImm {
					udp += wire.ImmDtLen
				}
				if ip.Version() != 4 || ip.HeaderLen() != 20 || ip.TOS() != 0x10 || ip.TotalLength() != uint16(20+udp) ||
					ip.ID() != 0x1234 || ip.TTL() != 64 || ip.Protocol() != wire.IPProtocolUDP || ip.Checksum() != ip.ComputeChecksum() ||
					ip.Src() != [4]byte{10, 1, 2, 3} || ip.Dst() != [4]byte{10, 1, 2, 4} {
					t.Fatalf("GRH IPv4 header % x", g[20:])
				}
			})
		}
	}
}

// TestUDGRHIPv6: over IPv6 the GRH area holds the whole IPv6 header.
func TestUDGRHIPv6(t *testing.T) {
	o := defaultOpts()
	a, b := newUnreliablePair(t, ibv.QPTypeUD, o, 7)
	lkey := a.mem.register(pd, make([]byte, 64), 0, ibv.AccessLocalWrite)
	dst := make([]byte, 128)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)
	must(t, b.qp.PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, 128, rkey}}}))
	must(t, a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{0, 10, lkey}}, RemoteQPN: qpnB, RemoteQKey: 7}, time.Unix(1, 0), &a.out))
	nh := NetHeader{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), HopLimit: 9, TrafficClass: 0xA4, FlowLabel: 0x12345}
	udDeliver(t, a, b, &nh)
	g := dst[:GRHLen]
	if w := binary.BigEndian.Uint32(g); w != 6<<28|0xA4<<20|0x12345 {
		t.Errorf("version/class/flow %#x", w)
	}
	udp := 8 + wire.BTHLen + wire.DETHLen + 12 + wire.ICRCLen
	if binary.BigEndian.Uint16(g[4:]) != uint16(udp) || g[6] != wire.IPProtocolUDP || g[7] != 9 {
		t.Errorf("payload length/next header/hop limit % x", g[4:8])
	}
	if netip.AddrFrom16([16]byte(g[8:24])) != nh.Src || netip.AddrFrom16([16]byte(g[24:40])) != nh.Dst {
		t.Errorf("addresses % x", g[8:])
	}
}

// TestUDQKey checks the receive Q_Key rule and the send rule for Q_Keys
// with the high bit set (IBTA 10.2.5: the QP's own Q_Key is sent).
func TestUDQKey(t *testing.T) {
	tests := []struct {
		name             string
		sendQP, recvQP   uint32 // the QPs' Q_Keys
		wr               uint32 // the work request's
		wantSent         uint32
		wantDelivered    bool
		wantViolationCnt uint64
	}{
		{"match", 0x1111, 0x2222, 0x2222, 0x2222, true, 0},
		{"mismatch", 0x1111, 0x2222, 0x3333, 0x3333, false, 1},
		{"high bit sends the QP's own", 0x2222, 0x2222, 0x80000000, 0x2222, true, 0},
		{"high bit, own differs", 0x1111, 0x2222, 0x80002222, 0x1111, false, 1},
		{"privileged Q_Key", 0x80010000, 0x80010000, 0xFFFFFFFF, 0x80010000, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newUnreliablePair(t, ibv.QPTypeUD, defaultOpts(), 0)
			a.qp.SetQKey(tc.sendQP)
			b.qp.SetQKey(tc.recvQP)
			lkey := a.mem.register(pd, make([]byte, 64), 0, ibv.AccessLocalWrite)
			rkey := b.mem.register(pd, make([]byte, 128), 0, ibv.AccessLocalWrite)
			must(t, b.qp.PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, 128, rkey}}}))
			must(t, a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{0, 16, lkey}}, RemoteQPN: qpnB, RemoteQKey: tc.wr}, time.Unix(1, 0), &a.out))
			var p wire.Packet
			must(t, p.Parse(frame(nil, a.out.Packets()[0].Bytes, addrA, addrB), 0))
			if k := p.DETH.QKey(); k != tc.wantSent {
				t.Errorf("sent Q_Key %#x, want %#x", k, tc.wantSent)
			}
			udDeliver(t, a, b, &nhV4)
			if got := len(b.rcq.take()) == 1; got != tc.wantDelivered {
				t.Errorf("delivered %v, want %v", got, tc.wantDelivered)
			}
			if c := b.qp.Counters().QKeyViolations; c != tc.wantViolationCnt {
				t.Errorf("QKeyViolations %d, want %d", c, tc.wantViolationCnt)
			}
		})
	}
}

// TestUDLimits: a message must fit the MTU (checked at post time); a
// receive buffer shorter than 40 bytes plus the payload completes with
// LOC_LEN_ERR and the QP carries on; no receive WQE drops the datagram;
// UD has SEND only.
func TestUDLimits(t *testing.T) {
	o := defaultOpts()
	o.mtu = 512
	a, b := newUnreliablePair(t, ibv.QPTypeUD, o, 5)
	now := time.Unix(1, 0)
	lkey := a.mem.register(pd, make([]byte, 1024), 0, ibv.AccessLocalWrite)
	rkey := b.mem.register(pd, make([]byte, 4096), 0, ibv.AccessLocalWrite)
	send := func(n uint32) error {
		return a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{0, n, lkey}}, RemoteQPN: qpnB, RemoteQKey: 5}, now, &a.out)
	}
	if err := send(513); !errors.Is(err, ErrMessageTooLong) {
		t.Fatalf("MTU+1: %v", err)
	}
	if err := a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, Flags: ibv.SendInline, Inline: make([]byte, 513)}, now, &a.out); !errors.Is(err, ErrMessageTooLong) && !errors.Is(err, ErrInlineTooLong) {
		t.Fatalf("inline MTU+1: %v", err)
	}
	for _, op := range []ibv.WROpcode{ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm, ibv.WRRDMARead, ibv.WRAtomicFetchAndAdd, ibv.WRSendWithInv} {
		if err := a.qp.PostSend(&SendWQE{Opcode: op, SGL: []SGE{{0, 8, lkey}}}, now, &a.out); !errors.Is(err, ErrBadOpcodeForType) {
			t.Errorf("%v: %v", op, err)
		}
	}
	// No receive WQE.
	must(t, send(512))
	udDeliver(t, a, b, &nhV4)
	if c := b.qp.Counters(); c.DroppedNoRecv != 1 {
		t.Fatalf("DroppedNoRecv %d", c.DroppedNoRecv)
	}
	// One byte short, then enough.
	must(t, b.qp.PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, GRHLen + 511, rkey}}}))
	must(t, b.qp.PostRecv(&RecvWQE{WRID: 2, SGL: []SGE{{1024, 20, rkey}, {2048, GRHLen + 492, rkey}}}))
	must(t, send(512))
	must(t, send(512))
	udDeliver(t, a, b, &nhV4)
	wantCompletions(t, b.rcq.take(),
		Completion{WRID: 1, Status: ibv.WCLocLenErr, Opcode: ibv.WCRecv, QPN: qpnB},
		Completion{WRID: 2, Opcode: ibv.WCRecv, ByteLen: GRHLen + 512, QPN: qpnB, SrcQP: qpnA, Flags: ibv.WCGRH})
	if b.qp.State() != ibv.QPStateRTS {
		t.Fatalf("state %v", b.qp.State())
	}
}

// TestUDTwoDestinations sends from one UD QP to two others, each datagram
// tagged with its work request's destination.
func TestUDTwoDestinations(t *testing.T) {
	o := defaultOpts()
	a, b := newUnreliablePair(t, ibv.QPTypeUD, o, 3)
	c := &endpoint{mem: newTestMemory(), scq: new(testCQ), rcq: new(testCQ), name: "c"}
	c.qp = NewQP(Config{Type: ibv.QPTypeUD, QPN: 0x33, PD: pd, MaxSendWR: 4, MaxRecvWR: 4, MaxSGE: 1, Memory: c.mem, SendCQ: c.scq, RecvCQ: c.rcq})
	c.qp.SetState(ibv.QPStateInit)
	c.qp.SetQKey(3)
	c.qp.SetState(ibv.QPStateRTR)
	lkey := a.mem.register(pd, pattern(64, 1), 0, ibv.AccessLocalWrite)
	for _, e := range []*endpoint{b, c} {
		k := e.mem.register(pd, make([]byte, 128), 0, ibv.AccessLocalWrite)
		must(t, e.qp.PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, 128, k}}}))
	}
	now := time.Unix(1, 0)
	must(t, a.qp.PostSend(&SendWQE{WRID: 1, Opcode: ibv.WRSend, SGL: []SGE{{0, 8, lkey}}, RemoteQPN: qpnB, RemoteQKey: 3, Dest: "b"}, now, &a.out))
	must(t, a.qp.PostSend(&SendWQE{WRID: 2, Opcode: ibv.WRSend, SGL: []SGE{{0, 9, lkey}}, RemoteQPN: 0x33, RemoteQKey: 3, Dest: "c"}, now, &a.out))
	pkts := a.out.Packets()
	if len(pkts) != 2 || pkts[0].Dest != "b" || pkts[1].Dest != "c" {
		t.Fatalf("packets %+v", pkts)
	}
	var p wire.Packet
	for i, e := range []*endpoint{b, c} {
		must(t, p.Parse(frame(nil, pkts[i].Bytes, addrA, addrB), 0))
		// Each QP takes only its own datagram.
		b.qp.HandlePacketFrom(&p, &nhV4, now, &b.out)
		c.qp.HandlePacketFrom(&p, &nhV4, now, &c.out)
		if got := e.rcq.take(); len(got) != 1 || got[0].ByteLen != GRHLen+8+uint32(i) || got[0].SrcQP != qpnA {
			t.Fatalf("%s: %+v", e.name, got)
		}
	}
}

// TestUDAllocs: the UD data path allocates nothing in a steady state.
func TestUDAllocs(t *testing.T) {
	a, b := newUnreliablePair(t, ibv.QPTypeUD, defaultOpts(), 1)
	lkey := a.mem.register(pd, make([]byte, 1024), 0, ibv.AccessLocalWrite)
	rkey := b.mem.register(pd, make([]byte, 2048), 0, ibv.AccessLocalWrite)
	now := time.Unix(1, 0)
	var dest any = "dest"
	send := SendWQE{Opcode: ibv.WRSendWithImm, SGL: []SGE{{0, 1024, lkey}}, RemoteQPN: qpnB, RemoteQKey: 1, Dest: dest}
	recv := RecvWQE{SGL: []SGE{{0, 2048, rkey}}}
	var p wire.Packet
	buf := make([]byte, 0, 2048)
	nh := nhV4
	round := func() {
		must(t, b.qp.PostRecv(&recv))
		must(t, a.qp.PostSend(&send, now, &a.out))
		buf = frame(buf, a.out.Packets()[0].Bytes, addrA, addrB)
		must(t, p.Parse(buf, 0))
		b.qp.HandlePacketFrom(&p, &nh, now, &b.out)
		a.out.Reset()
		a.scq.c, b.rcq.c = a.scq.c[:0], b.rcq.c[:0]
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per datagram", n)
	}
	if b.qp.Counters().RDMARecvs == 0 {
		t.Fatal("nothing received")
	}
}

// TestUDBadReceiveBuffer: a receive WQE whose lkey names nothing completes
// with LOC_PROT_ERR and moves the QP to ERR, flushing the rest.
func TestUDBadReceiveBuffer(t *testing.T) {
	a, b := newUnreliablePair(t, ibv.QPTypeUD, defaultOpts(), 2)
	lkey := a.mem.register(pd, make([]byte, 64), 0, ibv.AccessLocalWrite)
	rkey := b.mem.register(pd, make([]byte, 256), 0, ibv.AccessLocalWrite)
	must(t, b.qp.PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, 128, rkey ^ 0x100}}}))
	must(t, b.qp.PostRecv(&RecvWQE{WRID: 2, SGL: []SGE{{0, 128, rkey}}}))
	must(t, a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{0, 8, lkey}}, RemoteQPN: qpnB, RemoteQKey: 2}, time.Unix(1, 0), &a.out))
	udDeliver(t, a, b, &nhV4)
	wantCompletions(t, b.rcq.take(),
		Completion{WRID: 1, Status: ibv.WCLocProtErr, Opcode: ibv.WCRecv, QPN: qpnB},
		Completion{WRID: 2, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: qpnB})
	if b.qp.State() != ibv.QPStateErr || b.qp.ErrorCause() != CauseRecvCompletion || b.mem.refs != 0 {
		t.Fatalf("state %v, cause %v, refs %d", b.qp.State(), b.qp.ErrorCause(), b.mem.refs)
	}
}
