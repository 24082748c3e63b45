package verbs

import (
	"bytes"
	"fmt"
	"testing"
)

// newTypedEnd is newEnd with a QP of type typ (UC or UD) in place of the RC
// one, which stays unused in RESET.
func newTypedEnd(t testing.TB, addr string, typ QPType, o endOpts) *rcEnd {
	t.Helper()
	e := newEnd(t, addr, o)
	c := o.cap
	if c == (QPCap{}) {
		c = QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	}
	qp, err := e.pd.CreateQP(QPInitAttr{QPType: typ, SendCQ: e.cq, RecvCQ: e.cq, Cap: c, SQSigAll: o.sqSigAll})
	if err != nil {
		t.Fatal(err)
	}
	e.qp = qp
	return e
}

// linkUC moves a UC QP from RESET to RTS toward remote with exactly the
// attributes the kernel requires of UC: no timeout, retry counts,
// rd_atomic values or RNR timer, which RC needs and UC does not have.
func linkUC(t testing.TB, local, remote *QP, remoteDev *Device, mtu MTU, lpsn, rpsn uint32) {
	t.Helper()
	gid, err := remoteDev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustModify(t, local, step{QPAttr{QPState: QPStateInit, PortNum: 1, QPAccessFlags: AccessRemoteWrite},
		QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags})
	mustModify(t, local, step{QPAttr{QPState: QPStateRTR, PathMTU: mtu, DestQPNum: remote.QPN(), RQPSN: rpsn,
		AHAttr: AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
		QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN})
	mustModify(t, local, step{QPAttr{QPState: QPStateRTS, SQPSN: lpsn}, QPAttrState | QPAttrSQPSN})
}

// newUCPair opens two UC ends on 127.0.1.1 and 127.0.1.2, connected with
// path MTU mtu; a's PSNs cross the 2^24 wrap.
func newUCPair(t testing.TB, mtu MTU, o endOpts) (a, b *rcEnd) {
	t.Helper()
	a, b = newTypedEnd(t, "127.0.1.1", QPTypeUC, o), newTypedEnd(t, "127.0.1.2", QPTypeUC, o)
	linkUC(t, a.qp, b.qp, b.dev, mtu, 0xFFFFFE, 0x3000)
	linkUC(t, b.qp, a.qp, a.dev, mtu, 0x3000, 0xFFFFFE)
	return a, b
}

// TestE2EUC runs UC RDMA WRITE, WRITE_WITH_IMM, SEND and SEND_WITH_IMM at
// 0, 1, MTU-1, MTU, MTU+1 and 3·MTU+7 bytes between two devices. A plain
// WRITE has no receive completion: a SEND behind it on the same QP (UC
// keeps order) tells when its data is in place.
func TestE2EUC(t *testing.T) {
	const mtu = 1024
	a, b := newUCPair(t, MTU1024, endOpts{})
	const srcOff, dstOff, recvOff = 0, 16 << 10, 32 << 10
	fence := func(id uint64) {
		mustPostRecv(t, b.qp, RecvWR{WRID: id, SGList: []SGE{b.mr.SGE(recvOff+8192, 64)}})
		mustPostSend(t, a.qp, SendWR{WRID: id, Opcode: WRSend, SGList: []SGE{a.mr.SGE(srcOff, 4)}})
		got := waitN(t, b.cq, 1)
		if got[0].WRID != id || got[0].Status != WCSuccess {
			t.Fatalf("fence: %+v", got)
		}
	}
	id := uint64(100)
	for _, op := range []WROpcode{WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm} {
		for _, n := range []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 7} {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				id++
				fill(a.buf[srcOff:srcOff+n], byte(id))
				clear(b.buf[dstOff : dstOff+4*mtu])
				clear(b.buf[recvOff : recvOff+4*mtu])
				recvs := op != WRRDMAWrite
				if recvs {
					mustPostRecv(t, b.qp, RecvWR{WRID: id, SGList: []SGE{b.mr.SGE(recvOff, 4*mtu)}})
				}
				mustPostSend(t, a.qp, SendWR{WRID: id, Opcode: op, SendFlags: SendSignaled, ImmData: uint32(id),
					SGList: []SGE{a.mr.SGE(srcOff, n)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}})
				sent := waitN(t, a.cq, 1)[0]
				wantOp := map[WROpcode]WCOpcode{WRRDMAWrite: WCRDMAWrite, WRRDMAWriteWithImm: WCRDMAWrite, WRSend: WCSend, WRSendWithImm: WCSend}[op]
				if sent.WRID != id || sent.Status != WCSuccess || sent.Opcode != wantOp || sent.ByteLen != uint32(n) {
					t.Fatalf("send completion %+v", sent)
				}
				at := dstOff
				if !recvs {
					fence(id + 1000)
				} else {
					wc := waitN(t, b.cq, 1)[0]
					want := WorkCompletion{WRID: id, Opcode: WCRecv, ByteLen: uint32(n), QPNum: b.qp.QPN(), SrcQP: a.qp.QPN()}
					if op == WRRDMAWriteWithImm {
						want.Opcode = WCRecvRDMAWithImm
					}
					if op != WRSend {
						want.ImmData, want.WCFlags = uint32(id), WCWithImm
					}
					if wc != want {
						t.Fatalf("receive completion\n got %+v\nwant %+v", wc, want)
					}
					if op != WRRDMAWriteWithImm {
						at = recvOff
					}
				}
				if !bytes.Equal(b.buf[at:at+n], a.buf[srcOff:srcOff+n]) {
					t.Fatalf("data differs")
				}
			})
		}
	}
	// Nothing was ever answered: UC has no ACKs.
	if c := b.qp.Counters(); c.SentPkts != 0 {
		t.Errorf("the receiving UC QP sent %d packets", c.SentPkts)
	}
	if c := a.dev.Counters(); c.RcvdPkts != 0 {
		t.Errorf("the sending device received %d packets", c.RcvdPkts)
	}
}

// TestE2EUCNoReceive: a UC SEND that finds no receive is dropped (and
// counted), not RNR NAKed; the sender completed it; the next one, with a
// receive posted, arrives.
func TestE2EUCNoReceive(t *testing.T) {
	a, b := newUCPair(t, MTU1024, endOpts{})
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 3000)}})
	if wc := waitN(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("%+v", wc)
	}
	waitFor(t, "the drop", func() bool { return b.dev.Counters().DroppedNoRecv == 1 })
	mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGList: []SGE{b.mr.SGE(0, 4096)}})
	mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 3000)}})
	if wc := waitN(t, b.cq, 1)[0]; wc.WRID != 2 || wc.ByteLen != 3000 {
		t.Fatalf("%+v", wc)
	}
	if c := b.dev.Counters(); c.SendRNRErr != 0 || c.SentPkts != 0 {
		t.Errorf("counters %+v", c)
	}
}
