package verbs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// udQKey is the Q_Key of rdma-core's tools (ibv_ud_pingpong, pyverbs).
const udQKey = 0x11111111

// linkUD moves a UD QP from RESET to RTS with Q_Key qkey.
func linkUD(t testing.TB, qp *QP, qkey uint32) {
	t.Helper()
	mustModify(t, qp, step{QPAttr{QPState: QPStateInit, PortNum: 1, QKey: qkey},
		QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey})
	mustModify(t, qp, step{QPAttr{QPState: QPStateRTR}, QPAttrState})
	mustModify(t, qp, step{QPAttr{QPState: QPStateRTS, SQPSN: 0xFFFFFF}, QPAttrState | QPAttrSQPSN})
}

// newUDEnd opens a device on addr with a UD QP in RTS.
func newUDEnd(t testing.TB, addr string, o endOpts) *rcEnd {
	t.Helper()
	e := newTypedEnd(t, addr, QPTypeUD, o)
	linkUD(t, e.qp, udQKey)
	return e
}

// ahTo returns an address handle on e toward the device of peer.
func ahTo(t testing.TB, e, peer *rcEnd) *AH {
	t.Helper()
	gid, err := peer.dev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := e.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

// checkGRH checks the GRH area of a UD receive from device src to device
// dst carrying a UD packet of the given transport length (BTH to ICRC).
func checkGRH(t testing.TB, grh []byte, src, dst *Device, transportLen int) {
	t.Helper()
	if !bytes.Equal(grh[:20], make([]byte, 20)) {
		t.Fatalf("GRH bytes 0-19 not zero: % x", grh[:20])
	}
	ip := grh[20:40]
	s, d := src.Addr().As4(), dst.Addr().As4()
	if ip[0] != 0x45 || ip[9] != 17 || !bytes.Equal(ip[12:16], s[:]) || !bytes.Equal(ip[16:20], d[:]) ||
		binary.BigEndian.Uint16(ip[2:]) != uint16(20+8+transportLen) {
		t.Fatalf("GRH IPv4 header % x (from %v to %v)", ip, src.Addr(), dst.Addr())
	}
}

// TestE2EUD sends SEND and SEND_WITH_IMM datagrams of 0 bytes and of the
// MTU, and checks the receive: the GRH with the sender's and receiver's
// addresses, the payload after it, byte_len counting the GRH, the source
// QP; then answers through an address handle made from the completion.
func TestE2EUD(t *testing.T) {
	a, b := newUDEnd(t, "127.0.1.1", endOpts{}), newUDEnd(t, "127.0.1.2", endOpts{})
	mtu := a.dev.port.ActiveMTU.Bytes()
	ah := ahTo(t, a, b)
	id := uint64(0)
	for _, op := range []WROpcode{WRSend, WRSendWithImm} {
		for _, n := range []int{0, mtu} {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				id++
				fill(a.buf[:n], byte(id))
				clear(b.buf[:GRHSize+mtu])
				mustPostRecv(t, b.qp, RecvWR{WRID: id, SGList: []SGE{b.mr.SGE(0, GRHSize+n)}})
				mustPostSend(t, a.qp, SendWR{WRID: id, Opcode: op, SendFlags: SendSignaled, ImmData: 0xA0 + uint32(id),
					SGList: []SGE{a.mr.SGE(0, n)}, UD: UDParams{AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey}})
				if wc := waitN(t, a.cq, 1)[0]; wc.WRID != id || wc.Status != WCSuccess || wc.Opcode != WCSend || wc.ByteLen != uint32(n) {
					t.Fatalf("send completion %+v", wc)
				}
				wc := waitN(t, b.cq, 1)[0]
				want := WorkCompletion{WRID: id, Opcode: WCRecv, ByteLen: uint32(GRHSize + n), QPNum: b.qp.QPN(), SrcQP: a.qp.QPN(), WCFlags: WCGRH}
				tlen := 12 + 8 + n + 4
				if op == WRSendWithImm {
					want.ImmData, want.WCFlags = 0xA0+uint32(id), WCGRH|WCWithImm
					tlen += 4
				}
				if wc != want {
					t.Fatalf("receive completion\n got %+v\nwant %+v", wc, want)
				}
				checkGRH(t, b.buf[:GRHSize], a.dev, b.dev, tlen)
				if !bytes.Equal(b.buf[GRHSize:GRHSize+n], a.buf[:n]) {
					t.Fatal("payload differs")
				}
				// Answer the sender through an AH built from the receive.
				back, err := b.pd.CreateAHFromWC(&wc, b.buf[:GRHSize], 1)
				if err != nil {
					t.Fatal(err)
				}
				if got := back.Attr(); got.DGID != GIDFromAddr(a.dev.Addr()) || got.SGIDIndex != 1 || got.HopLimit == 0 {
					t.Fatalf("AH from the completion: %+v", got)
				}
				mustPostRecv(t, a.qp, RecvWR{WRID: id, SGList: []SGE{a.mr.SGE(8192, GRHSize+4)}})
				mustPostSend(t, b.qp, SendWR{WRID: id, Opcode: WRSend, SGList: []SGE{b.mr.SGE(GRHSize, min(n, 4))},
					UD: UDParams{AH: back, RemoteQPN: wc.SrcQP, RemoteQKey: udQKey}})
				if wc := waitN(t, a.cq, 1)[0]; wc.WRID != id || wc.SrcQP != b.qp.QPN() || wc.Status != WCSuccess {
					t.Fatalf("reply %+v", wc)
				}
				if err := back.Destroy(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestE2EUDTwoDestinations sends from one UD QP to the QPs of two other
// devices, alternating per work request.
func TestE2EUDTwoDestinations(t *testing.T) {
	a := newUDEnd(t, "127.0.1.1", endOpts{})
	peers := []*rcEnd{newUDEnd(t, "127.0.1.2", endOpts{}), newUDEnd(t, "127.0.1.3", endOpts{})}
	ahs := []*AH{ahTo(t, a, peers[0]), ahTo(t, a, peers[1])}
	const rounds = 8
	for _, p := range peers {
		for i := range rounds {
			mustPostRecv(t, p.qp, RecvWR{WRID: uint64(i), SGList: []SGE{p.mr.SGE(i*256, 256)}})
		}
	}
	for i := range 2 * rounds {
		binary.BigEndian.PutUint32(a.buf[i*8:], uint32(i))
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SGList: []SGE{a.mr.SGE(i*8, 4)},
			UD: UDParams{AH: ahs[i%2], RemoteQPN: peers[i%2].qp.QPN(), RemoteQKey: udQKey}})
	}
	for j, p := range peers {
		wcs := waitN(t, p.cq, rounds)
		for i, wc := range wcs {
			got := binary.BigEndian.Uint32(p.buf[i*256+GRHSize:])
			if wc.Status != WCSuccess || wc.SrcQP != a.qp.QPN() || got != uint32(2*i+j) {
				t.Fatalf("peer %d, receive %d: %+v, payload %d", j, i, wc, got)
			}
			checkGRH(t, p.buf[i*256:i*256+GRHSize], a.dev, p.dev, 12+8+4+4)
		}
	}
}

// TestE2EUDQKey: a datagram with another Q_Key is dropped and counted; a
// work request Q_Key with the high bit set sends the QP's own.
func TestE2EUDQKey(t *testing.T) {
	a, b := newUDEnd(t, "127.0.1.1", endOpts{}), newUDEnd(t, "127.0.1.2", endOpts{})
	ah := ahTo(t, a, b)
	mustPostRecv(t, b.qp, RecvWR{WRID: 1, SGList: []SGE{b.mr.SGE(0, 256)}})
	send := func(qkey uint32) {
		mustPostSend(t, a.qp, SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 8)},
			UD: UDParams{AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}})
	}
	send(udQKey + 1)
	waitFor(t, "the Q_Key violation", func() bool { return b.dev.Counters().QKeyViolations == 1 })
	expectEmpty(t, b.cq)
	// a's own Q_Key is udQKey too.
	send(0x80000000)
	if wc := waitN(t, b.cq, 1)[0]; wc.WRID != 1 || wc.Status != WCSuccess {
		t.Fatalf("%+v", wc)
	}
	if c := b.qp.Counters(); c.QKeyViolations != 1 || c.RDMARecvs != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// TestE2EUDLimits: a message longer than the MTU is refused at post time;
// a receive buffer without room for the GRH and the payload completes with
// LOC_LEN_ERR; a datagram finding no receive is dropped and counted.
func TestE2EUDLimits(t *testing.T) {
	a, b := newUDEnd(t, "127.0.1.1", endOpts{}), newUDEnd(t, "127.0.1.2", endOpts{})
	ah := ahTo(t, a, b)
	mtu := a.dev.port.ActiveMTU.Bytes()
	ud := UDParams{AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey}
	err := a.qp.PostSend(&SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, mtu+1)}, UD: ud})
	wantErr(t, err, ErrInvalidArgument, "sg_list")
	mustPostSend(t, a.qp, SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 100)}, UD: ud})
	waitFor(t, "the drop", func() bool { return b.dev.Counters().DroppedNoRecv == 1 })
	mustPostRecv(t, b.qp, RecvWR{WRID: 1, SGList: []SGE{b.mr.SGE(0, GRHSize+99)}})
	mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGList: []SGE{b.mr.SGE(4096, GRHSize+100)}})
	mustPostSend(t, a.qp, SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 100)}, UD: ud})
	mustPostSend(t, a.qp, SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 100)}, UD: ud})
	wcs := waitN(t, b.cq, 2)
	if wcs[0].WRID != 1 || wcs[0].Status != WCLocLenErr || wcs[1].WRID != 2 || wcs[1].Status != WCSuccess || wcs[1].ByteLen != GRHSize+100 {
		t.Fatalf("%+v", wcs)
	}
	if b.qp.State() != QPStateRTS {
		t.Fatalf("state %v after a short receive buffer", b.qp.State())
	}
}

// TestE2EUDSRQ: UD QPs receive through a shared receive queue.
func TestE2EUDSRQ(t *testing.T) {
	a := newUDEnd(t, "127.0.1.1", endOpts{})
	b := newEnd(t, "127.0.1.2", endOpts{})
	srq, err := b.pd.CreateSRQ(SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	var qps []*QP
	for range 2 {
		qp, err := b.pd.CreateQP(QPInitAttr{QPType: QPTypeUD, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		linkUD(t, qp, udQKey)
		qps = append(qps, qp)
	}
	for i := range 4 {
		if err := srq.PostRecv(&RecvWR{WRID: uint64(i), SGList: []SGE{b.mr.SGE(i*128, 128)}}); err != nil {
			t.Fatal(err)
		}
	}
	ah := ahTo(t, a, b)
	for i := range 4 {
		mustPostSend(t, a.qp, SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 16)},
			UD: UDParams{AH: ah, RemoteQPN: qps[i%2].QPN(), RemoteQKey: udQKey}})
	}
	wcs := waitN(t, b.cq, 4)
	for i, wc := range wcs {
		if wc.WRID != uint64(i) || wc.QPNum != qps[i%2].QPN() || wc.ByteLen != GRHSize+16 {
			t.Fatalf("%d: %+v", i, wc)
		}
	}
}

// TestE2EUDAllocs: a steady state of UD sends and receives allocates
// nothing, on the posting goroutine or on the device's receive path.
func TestE2EUDAllocs(t *testing.T) {
	a, b := newUDEnd(t, "127.0.1.1", endOpts{}), newUDEnd(t, "127.0.1.2", endOpts{})
	ah := ahTo(t, a, b)
	send := &SendWR{Opcode: WRSendWithImm, SGList: []SGE{a.mr.SGE(0, 512)}, UD: UDParams{AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey}}
	recv := &RecvWR{SGList: []SGE{b.mr.SGE(0, GRHSize+512)}}
	wcs := make([]WorkCompletion, 1)
	round := func() {
		if err := b.qp.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(send); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := b.cq.Poll(wcs)
			if err != nil || n == 1 && wcs[0].Status != WCSuccess {
				t.Fatalf("%v %+v", err, wcs)
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no receive within 10 s")
			}
			runtime.Gosched() // let the device's receive goroutine run
		}
	}
	for range 10 {
		round()
	}
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per datagram", n)
	}
}
