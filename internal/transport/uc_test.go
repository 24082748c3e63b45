package transport

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// newUnreliablePair returns two QPs of type typ (UC or UD), a (QPN 0x11)
// and b (QPN 0x22), in RTS; UC ones are connected to each other, UD ones
// have Q_Key qkey.
func newUnreliablePair(t testing.TB, typ ibv.QPType, o pairOpts, qkey uint32) (a, b *endpoint) {
	t.Helper()
	mk := func(name string, qpn uint32, srq *SRQ) *endpoint {
		e := &endpoint{mem: newTestMemory(), scq: new(testCQ), rcq: new(testCQ), name: name}
		e.qp = NewQP(Config{
			Type: typ, QPN: qpn, PD: pd, MaxSendWR: o.maxSendWR, MaxRecvWR: 64, MaxSGE: 4, MaxInline: 256,
			Memory: e.mem, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq, SQSigAll: o.sqSigAll,
		})
		return e
	}
	var srq *SRQ
	if o.srq {
		srq = NewSRQ(64, 4)
	}
	a, b = mk("a", qpnA, nil), mk("b", qpnB, srq)
	setup := func(e *endpoint, dest uint32, sq, rq psn.PSN) {
		qp := e.qp
		qp.SetState(ibv.QPStateInit)
		must(t, qp.SetPathMTU(o.mtu))
		qp.SetQKey(qkey)
		qp.SetAccessFlags(o.access)
		if typ == ibv.QPTypeUC {
			qp.SetDestQPN(dest)
			qp.SetRQPSN(rq)
		}
		qp.SetState(ibv.QPStateRTR)
		qp.SetSQPSN(sq)
		qp.SetDest(e.name)
		qp.SetState(ibv.QPStateRTS)
	}
	setup(a, qpnB, o.psnA, o.psnB)
	setup(b, qpnA, o.psnB, o.psnA)
	return a, b
}

// TestUCTransfer moves every UC operation at sizes around the MTU and
// checks the wire (UC opcodes, no AckReq, consecutive PSNs), the data, the
// completions, and that the responder never answers.
func TestUCTransfer(t *testing.T) {
	const mtu = 256
	ops := []struct {
		op     ibv.WROpcode
		recvOp ibv.WCOpcode
	}{
		{ibv.WRRDMAWrite, 0},
		{ibv.WRRDMAWriteWithImm, ibv.WCRecvRDMAWithImm},
		{ibv.WRSend, ibv.WCRecv},
		{ibv.WRSendWithImm, ibv.WCRecv},
	}
	for _, tc := range ops {
		for _, n := range []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 7} {
			t.Run(tc.op.String()+"/"+itoa(uint64(n)), func(t *testing.T) {
				o := defaultOpts()
				o.mtu = mtu
				a, b := newUnreliablePair(t, ibv.QPTypeUC, o, 0)
				src := pattern(n, 3)
				dst := make([]byte, 4096)
				lkey := a.mem.register(pd, append(src, 0), 0x1000, ibv.AccessLocalWrite)
				rkey := b.mem.register(pd, dst, 0x9000, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
				l := newLink(t, a, b)
				l.recv(b, 77, SGE{0x9000, 4096, rkey})
				l.post(a, SendWQE{WRID: 5, Opcode: tc.op, Flags: ibv.SendSignaled, SGL: []SGE{{0x1000, uint32(n), lkey}},
					RemoteAddr: 0x9000, RKey: rkey, Imm: 0xCAFE})
				// The request completed when its last packet left, before
				// anything was delivered.
				wantCompletions(t, a.scq.take(), Completion{WRID: 5, Opcode: wcOpcode(tc.op), ByteLen: uint32(n), QPN: qpnA,
					Flags: map[bool]ibv.WCFlags{true: ibv.WCWithImm}[tc.op == ibv.WRSendWithImm || tc.op == ibv.WRRDMAWriteWithImm]})
				wantPackets := max((n+mtu-1)/mtu, 1)
				pkts := a.out.Packets()
				if len(pkts) != wantPackets {
					t.Fatalf("%d packets, want %d", len(pkts), wantPackets)
				}
				for i := range pkts {
					p := l.parse(a, pkts[i].Bytes)
					if p.Info().Transport() != wire.TransportUC || p.BTH.AckReq() || p.BTH.PSN() != o.psnA.Add(uint32(i)) {
						t.Errorf("packet %d: %v AckReq %v PSN %v", i, p.BTH.Opcode(), p.BTH.AckReq(), p.BTH.PSN())
					}
				}
				l.run(time.Second)
				if b.out.Len() != 0 || len(l.log) != wantPackets {
					t.Fatalf("b answered: %v", l.log)
				}
				wantBytes(t, "placed data", dst[:n], src)
				got := b.rcq.take()
				if tc.recvOp == 0 {
					wantCompletions(t, got)
					return
				}
				want := Completion{WRID: 77, Opcode: tc.recvOp, ByteLen: uint32(n), QPN: qpnB, SrcQP: qpnA}
				if tc.op != ibv.WRSend {
					want.Imm, want.Flags = 0xCAFE, ibv.WCWithImm
				}
				wantCompletions(t, got, want)
				if s := a.qp.Snapshot(); s.SQDepth != 0 || s.TimerArmed {
					t.Errorf("requester state after the send: %+v", s)
				}
				if a.mem.refs != 0 || b.mem.refs != 0 {
					t.Errorf("refs outstanding: %d, %d", a.mem.refs, b.mem.refs)
				}
			})
		}
	}
}

// TestUCLossDropsMessage loses one packet of the middle message of three
// 3-packet SENDs and checks that exactly that message is dropped: the rest
// of it silently, the next one recovering at its FIRST packet, into the
// receive WQE the lost message would have used.
func TestUCLossDropsMessage(t *testing.T) {
	const mtu = 256
	for _, tc := range []struct {
		lose string
		srq  bool
	}{{"FIRST", false}, {"MIDDLE", false}, {"LAST", false}, {"MIDDLE", true}, {"LAST", true}} {
		lose := tc.lose
		t.Run(fmt.Sprintf("%s/srq=%v", lose, tc.srq), func(t *testing.T) {
			o := defaultOpts()
			o.mtu = mtu
			o.srq = tc.srq
			a, b := newUnreliablePair(t, ibv.QPTypeUC, o, 0)
			msgs := [][]byte{pattern(3*mtu, 1), pattern(3*mtu, 2), pattern(3*mtu-5, 3)}
			src := make([]byte, 0, 4096)
			for _, m := range msgs {
				src = append(src, m...)
			}
			lkey := a.mem.register(pd, src, 0, ibv.AccessLocalWrite)
			dst := make([]byte, 3*1024)
			rkey := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)
			l := newLink(t, a, b)
			for i := range 3 {
				w := RecvWQE{WRID: uint64(10 + i), SGL: []SGE{{uint64(i) * 1024, 1024, rkey}}}
				if tc.srq {
					must(t, b.qp.srq.(*SRQ).PostRecv(&w))
				} else {
					must(t, b.qp.PostRecv(&w))
				}
			}
			seen := 0
			l.drop = func(from *endpoint, p *wire.Packet) bool {
				seen++
				return seen == map[string]int{"FIRST": 4, "MIDDLE": 5, "LAST": 6}[lose]
			}
			off := uint64(0)
			for i, m := range msgs {
				l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRSend, SGL: []SGE{{off, uint32(len(m)), lkey}}})
				off += uint64(len(m))
				l.run(time.Second)
			}
			wantCompletions(t, b.rcq.take(),
				Completion{WRID: 10, Opcode: ibv.WCRecv, ByteLen: uint32(len(msgs[0])), QPN: qpnB, SrcQP: qpnA},
				Completion{WRID: 11, Opcode: ibv.WCRecv, ByteLen: uint32(len(msgs[2])), QPN: qpnB, SrcQP: qpnA})
			wantBytes(t, "message 1", dst[:len(msgs[0])], msgs[0])
			wantBytes(t, "message 3", dst[1024:1024+len(msgs[2])], msgs[2])
			c := b.qp.Counters()
			if c.DroppedMessages != 1 {
				t.Errorf("DroppedMessages = %d, want 1", c.DroppedMessages)
			}
			if b.out.Len() != 0 || b.qp.State() != ibv.QPStateRTS {
				t.Errorf("responder answered or failed: state %v", b.qp.State())
			}
			left := b.qp.Snapshot().RQDepth
			if tc.srq {
				left = b.qp.srq.(*SRQ).Len()
			}
			if s := b.qp.Snapshot(); left != 1 || s.InMessage || s.HoldsRecvWQE {
				t.Errorf("responder after recovery: %d receives left, %+v", left, s)
			}
		})
	}
}

// TestUCNoReceiveDrops: a SEND finding no receive WQE is dropped and
// counted, never RNR NAKed; the sender has completed it anyway, and the
// next SEND is received once a WQE is posted.
func TestUCNoReceiveDrops(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newUnreliablePair(t, ibv.QPTypeUC, o, 0)
	src := pattern(600, 9)
	lkey := a.mem.register(pd, src, 0, ibv.AccessLocalWrite)
	dst := make([]byte, 1024)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)
	l := newLink(t, a, b)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRSend, Flags: ibv.SendSignaled, SGL: []SGE{{0, 600, lkey}}})
	l.run(time.Second)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCSend, ByteLen: 600, QPN: qpnA})
	if c := b.qp.Counters(); c.DroppedNoRecv != 1 || c.RNRNakSent != 0 || b.out.Len() != 0 {
		t.Fatalf("counters %+v", c)
	}
	l.recv(b, 2, SGE{0, 1024, rkey})
	l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRSendWithImm, SGL: []SGE{{0, 600, lkey}}, Imm: 4})
	l.run(time.Second)
	wantCompletions(t, b.rcq.take(), Completion{WRID: 2, Opcode: ibv.WCRecv, ByteLen: 600, QPN: qpnB, SrcQP: qpnA, Imm: 4, Flags: ibv.WCWithImm})
	wantBytes(t, "data", dst[:600], src)
}

// TestUCResponderErrorsDrop: responder checks that fail on RC with a NAK
// and ERR drop the message on UC, and the QP carries on.
func TestUCResponderErrorsDrop(t *testing.T) {
	tests := []struct {
		name  string
		setup func(a, b *endpoint, w *SendWQE)
	}{
		{"write without REMOTE_WRITE", func(a, b *endpoint, w *SendWQE) { b.qp.SetAccessFlags(0) }},
		{"bad rkey", func(a, b *endpoint, w *SendWQE) { w.RKey ^= 0x100 }},
		{"out of bounds", func(a, b *endpoint, w *SendWQE) { w.RemoteAddr = 1024 - 100 }},
		{"send longer than the buffer", func(a, b *endpoint, w *SendWQE) { w.Opcode = ibv.WRSend }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOpts()
			o.mtu = 256
			a, b := newUnreliablePair(t, ibv.QPTypeUC, o, 0)
			src := pattern(600, 5)
			lkey := a.mem.register(pd, src, 0, ibv.AccessLocalWrite)
			dst := make([]byte, 1024)
			rkey := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
			l := newLink(t, a, b)
			l.recv(b, 1, SGE{0, 300, rkey})
			w := SendWQE{WRID: 1, Opcode: ibv.WRRDMAWriteWithImm, SGL: []SGE{{0, 600, lkey}}, RKey: rkey}
			tc.setup(a, b, &w)
			l.post(a, w)
			l.run(time.Second)
			if got := b.rcq.take(); len(got) != 0 {
				t.Fatalf("completions %+v", got)
			}
			if c := b.qp.Counters(); c.DroppedMessages != 1 || b.qp.State() != ibv.QPStateRTS || b.out.Len() != 0 {
				t.Fatalf("state %v, counters %+v", b.qp.State(), c)
			}
			// The WQE serves the next message.
			b.qp.SetAccessFlags(ibv.AccessRemoteWrite)
			l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRSend, SGL: []SGE{{0, 200, lkey}}})
			l.run(time.Second)
			wantCompletions(t, b.rcq.take(), Completion{WRID: 1, Opcode: ibv.WCRecv, ByteLen: 200, QPN: qpnB, SrcQP: qpnA})
		})
	}
}

// TestUCPostChecks: UC has no READ, atomics or SEND_WITH_INV; a bad lkey
// fails the request with LOC_PROT_ERR and the QP; a long message is sent
// in bursts continued by OnTimer.
func TestUCPostChecks(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newUnreliablePair(t, ibv.QPTypeUC, o, 0)
	now := time.Unix(1, 0)
	for _, op := range []ibv.WROpcode{ibv.WRRDMARead, ibv.WRAtomicCmpAndSwp, ibv.WRAtomicFetchAndAdd, ibv.WRSendWithInv} {
		w := SendWQE{Opcode: op, SGL: []SGE{{0, 8, 1}}}
		if err := a.qp.PostSend(&w, now, &a.out); !errors.Is(err, ErrBadOpcodeForType) {
			t.Errorf("%v: %v", op, err)
		}
	}
	big := make([]byte, 100*256)
	lkey := a.mem.register(pd, big, 0, ibv.AccessLocalWrite)
	rkey := b.mem.register(pd, make([]byte, len(big)), 0, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	must(t, a.qp.PostSend(&SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, SGL: []SGE{{0, uint32(len(big)), lkey}}, RKey: rkey}, now, &a.out))
	if n := a.out.Len(); n != unrelBurst {
		t.Fatalf("first burst %d packets, want %d", n, unrelBurst)
	}
	if d, ok := a.qp.Deadline(); !ok || d.After(now) {
		t.Fatalf("no immediate deadline to continue: %v %v", d, ok)
	}
	a.qp.OnTimer(now, &a.out)
	if n := a.out.Len(); n != 100 {
		t.Fatalf("%d packets after OnTimer, want 100", n)
	}
	if _, ok := a.qp.Deadline(); ok {
		t.Fatal("deadline armed after the message was sent")
	}
	a.out.Reset()
	must(t, a.qp.PostSend(&SendWQE{WRID: 2, Opcode: ibv.WRSend, SGL: []SGE{{0, 10, lkey ^ 0x100}}}, now, &a.out))
	wantCompletions(t, a.scq.take(), Completion{WRID: 2, Status: ibv.WCLocProtErr, Opcode: ibv.WCSend, QPN: qpnA})
	if a.qp.State() != ibv.QPStateErr || a.out.Len() != 0 {
		t.Fatalf("state %v, %d packets", a.qp.State(), a.out.Len())
	}
}

// TestUCStragglersIgnored: a packet behind the expected PSN (a duplicate,
// or one overtaken by later packets) is ignored, even a FIRST or ONLY:
// taking it would deliver an old message again or out of order, and would
// cut short the message in progress.
func TestUCStragglersIgnored(t *testing.T) {
	const mtu = 256
	o := defaultOpts()
	o.mtu = mtu
	a, b := newUnreliablePair(t, ibv.QPTypeUC, o, 0)
	src := pattern(3*mtu*2, 4)
	lkey := a.mem.register(pd, src, 0, ibv.AccessLocalWrite)
	dst := make([]byte, 2*1024)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)
	now := time.Unix(1, 0)
	for i := range 2 {
		must(t, b.qp.PostRecv(&RecvWQE{WRID: uint64(i), SGL: []SGE{{uint64(i) * 1024, 1024, rkey}}}))
		must(t, a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{uint64(i * 3 * mtu), 3 * mtu, lkey}}}, now, &a.out))
	}
	var raw [][]byte
	for _, p := range a.out.Packets() {
		raw = append(raw, frame(nil, p.Bytes, addrA, addrB))
	}
	// Message 1, then message 2 with a duplicate of message 1's FIRST and
	// MIDDLE in the middle of it.
	var p wire.Packet
	for _, i := range []int{0, 1, 2, 3, 0, 4, 1, 5} {
		must(t, p.Parse(raw[i], mtu))
		b.qp.HandlePacket(&p, now, &b.out)
	}
	wantCompletions(t, b.rcq.take(),
		Completion{WRID: 0, Opcode: ibv.WCRecv, ByteLen: 3 * mtu, QPN: qpnB, SrcQP: qpnA},
		Completion{WRID: 1, Opcode: ibv.WCRecv, ByteLen: 3 * mtu, QPN: qpnB, SrcQP: qpnA})
	wantBytes(t, "message 2", dst[1024:1024+3*mtu], src[3*mtu:])
	if c := b.qp.Counters(); c.DuplicateRequest != 2 || c.DroppedMessages != 0 {
		t.Fatalf("counters %+v", c)
	}
}

// bindMemory is a testMemory that executes BIND_MW (LocalOps), succeeding
// when ok.
type bindMemory struct {
	*testMemory
	ok    bool
	binds []MWBind
}

func (m *bindMemory) BindMW(_ uint32, b *MWBind) bool     { m.binds = append(m.binds, *b); return m.ok }
func (m *bindMemory) LocalInvalidate(uint32, uint32) bool { return false }

// TestUCBindMW: BIND_MW is valid on UC (rxe_wr_opcode_info): it executes
// in posting order and completes at once; a refused bind fails the work
// request with MW_BIND_ERR and the QP. LOCAL_INV is RC only.
func TestUCBindMW(t *testing.T) {
	for _, ok := range []bool{true, false} {
		mem := &bindMemory{testMemory: newTestMemory(), ok: ok}
		scq := new(testCQ)
		qp := NewQP(Config{Type: ibv.QPTypeUC, QPN: qpnA, PD: pd, MaxSendWR: 4, MaxSGE: 1, Memory: mem, SendCQ: scq, RecvCQ: new(testCQ)})
		qp.SetState(ibv.QPStateInit)
		qp.SetState(ibv.QPStateRTR)
		qp.SetState(ibv.QPStateRTS)
		var out Output
		now := time.Unix(1, 0)
		if err := qp.PostSend(&SendWQE{Opcode: ibv.WRLocalInv, InvalidateRKey: 5}, now, &out); !errors.Is(err, ErrBadOpcodeForType) {
			t.Fatalf("LOCAL_INV on UC: %v", err)
		}
		must(t, qp.PostSend(&SendWQE{WRID: 1, Opcode: ibv.WRSend, Flags: ibv.SendSignaled}, now, &out))
		must(t, qp.PostSend(&SendWQE{WRID: 2, Opcode: ibv.WRBindMW, Flags: ibv.SendSignaled, Bind: MWBind{MWRKey: 0x200, RKey: 7, Length: 64}}, now, &out))
		want := []Completion{{WRID: 1, Opcode: ibv.WCSend, QPN: qpnA}, {WRID: 2, Opcode: ibv.WCBindMW, QPN: qpnA}}
		state := ibv.QPStateRTS
		if !ok {
			want[1].Status, state = ibv.WCMWBindErr, ibv.QPStateErr
		}
		wantCompletions(t, scq.take(), want...)
		if len(mem.binds) != 1 || mem.binds[0].MWRKey != 0x200 || qp.State() != state || out.Len() != 1 {
			t.Fatalf("binds %+v, state %v, %d packets", mem.binds, qp.State(), out.Len())
		}
	}
}
