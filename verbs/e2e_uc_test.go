package verbs_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// newTypedEnd is newEnd with a QP of type typ.
func newTypedEnd(t testing.TB, host int, typ verbs.QPType, o rdmatest.EndOptions) *rdmatest.End {
	t.Helper()
	o.Type = typ
	return newEnd(t, host, o)
}

// linkUC moves a UC QP from RESET to RTS toward remote with exactly the
// attributes the kernel requires of UC: no timeout, retry counts,
// rd_atomic values or RNR timer, which RC needs and UC does not have.
func linkUC(t testing.TB, local, remote *verbs.QP, mtu verbs.MTU, lpsn, rpsn uint32) {
	t.Helper()
	rdmatest.LinkQP(t, local, rdmatest.Link{MTU: mtu, Access: verbs.AccessRemoteWrite}, lpsn, rdmatest.PeerOf(t, remote, rpsn))
}

// newUCPair opens two UC ends on testkit.Addr(1) and Addr(2), connected
// with path MTU mtu; a's PSNs cross the 2^24 wrap.
func newUCPair(t testing.TB, mtu verbs.MTU, o rdmatest.EndOptions) (a, b *rdmatest.End) {
	t.Helper()
	a, b = newTypedEnd(t, 1, verbs.QPTypeUC, o), newTypedEnd(t, 2, verbs.QPTypeUC, o)
	linkUC(t, a.QP, b.QP, mtu, 0xFFFFFE, 0x3000)
	linkUC(t, b.QP, a.QP, mtu, 0x3000, 0xFFFFFE)
	return a, b
}

// TestE2EUC runs UC RDMA WRITE, WRITE_WITH_IMM, SEND and SEND_WITH_IMM at
// 0, 1, MTU-1, MTU, MTU+1 and 3·MTU+7 bytes between two devices. A plain
// WRITE has no receive completion: a SEND behind it on the same QP (UC
// keeps order) tells when its data is in place.
func TestE2EUC(t *testing.T) {
	const mtu = 1024
	a, b := newUCPair(t, verbs.MTU1024, rdmatest.EndOptions{})
	const srcOff, dstOff, recvOff = 0, 16 << 10, 32 << 10
	fence := func(id uint64) {
		rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: id, SGList: []verbs.SGE{b.MR.SGE(recvOff+8192, 64)}})
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(srcOff, 4)}})
		got := rdmatest.WaitN(t, b.CQ, 1)
		if got[0].WRID != id || got[0].Status != verbs.WCSuccess {
			t.Fatalf("fence: %+v", got)
		}
	}
	id := uint64(100)
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRSend, verbs.WRSendWithImm} {
		for _, n := range []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 7} {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				id++
				fill(a.Buf[srcOff:srcOff+n], byte(id))
				clear(b.Buf[dstOff : dstOff+4*mtu])
				clear(b.Buf[recvOff : recvOff+4*mtu])
				recvs := op != verbs.WRRDMAWrite
				if recvs {
					rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: id, SGList: []verbs.SGE{b.MR.SGE(recvOff, 4*mtu)}})
				}
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: id, Opcode: op, SendFlags: verbs.SendSignaled, ImmData: uint32(id),
					SGList: []verbs.SGE{a.MR.SGE(srcOff, n)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + dstOff, RKey: b.MR.RKey()}})
				sent := rdmatest.WaitN(t, a.CQ, 1)[0]
				wantOp := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMAWriteWithImm: verbs.WCRDMAWrite, verbs.WRSend: verbs.WCSend, verbs.WRSendWithImm: verbs.WCSend}[op]
				if sent.WRID != id || sent.Status != verbs.WCSuccess || sent.Opcode != wantOp || sent.ByteLen != uint32(n) {
					t.Fatalf("send completion %+v", sent)
				}
				at := dstOff
				if !recvs {
					fence(id + 1000)
				} else {
					wc := rdmatest.ConnectedRecv(rdmatest.WaitOne(t, b.CQ), a.QP.QPN())
					want := verbs.WorkCompletion{WRID: id, Opcode: verbs.WCRecv, ByteLen: uint32(n), QPNum: b.QP.QPN(), SrcQP: a.QP.QPN()}
					if op == verbs.WRRDMAWriteWithImm {
						want.Opcode = verbs.WCRecvRDMAWithImm
					}
					if op != verbs.WRSend {
						want.ImmData, want.WCFlags = uint32(id), verbs.WCWithImm
					}
					if wc != want {
						t.Fatalf("receive completion\n got %+v\nwant %+v", wc, want)
					}
					if op != verbs.WRRDMAWriteWithImm {
						at = recvOff
					}
				}
				if !bytes.Equal(b.Buf[at:at+n], a.Buf[srcOff:srcOff+n]) {
					t.Fatalf("data differs")
				}
			})
		}
	}
	// Nothing was ever answered: UC has no ACKs.
	if c := b.QP.Counters(); c.SentPkts != 0 {
		t.Errorf("the receiving UC QP sent %d packets", c.SentPkts)
	}
	if c := a.Dev.Counters(); c.RcvdPkts != 0 {
		t.Errorf("the sending device received %d packets", c.RcvdPkts)
	}
}

// TestE2EUCNoReceive: a UC SEND that finds no receive is dropped (and
// counted), not RNR NAKed; the sender completed it; the next one, with a
// receive posted, arrives.
func TestE2EUCNoReceive(t *testing.T) {
	rdmatest.SkipOnHardware(t, "it waits for the drop in goroce's counters (zero on hardware)")
	a, b := newUCPair(t, verbs.MTU1024, rdmatest.EndOptions{})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 3000)}})
	if wc := rdmatest.WaitN(t, a.CQ, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	testkit.WaitFor(t, "the drop", func() bool { return b.Dev.Counters().DroppedNoRecv == 1 })
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(0, 4096)}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 3000)}})
	if wc := rdmatest.WaitN(t, b.CQ, 1)[0]; wc.WRID != 2 || wc.ByteLen != 3000 {
		t.Fatalf("%+v", wc)
	}
	if c := b.Dev.Counters(); c.SendRNRErr != 0 || c.SentPkts != 0 {
		t.Errorf("counters %+v", c)
	}
}
