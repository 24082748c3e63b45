package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// rcEnd is one side of an RC connection between two devices on loopback.
type rcEnd struct {
	dev *Device
	pd  *PD
	cq  *CQ
	qp  *QP
	buf []byte
	mr  *MR
}

const rcAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

func newRCEnd(t testing.TB, addr string, size int) *rcEnd {
	t.Helper()
	e := &rcEnd{dev: openDevice(t, DeviceConfig{Addr: netip.MustParseAddr(addr)})}
	e.pd = mustPD(t, e.dev)
	e.cq = mustCQ(t, e.dev, 256)
	e.buf = make([]byte, size)
	e.mr = mustMR2(t, e.pd, e.buf, rcAccess)
	qp, err := e.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	e.qp = qp
	return e
}

func mustMR2(t testing.TB, pd *PD, buf []byte, access AccessFlags) *MR {
	t.Helper()
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// connectRC brings a and b to RTS, each pointed at the other.
func connectRC(t testing.TB, a, b *rcEnd, mtu MTU) {
	t.Helper()
	link := func(local, remote *rcEnd, lpsn, rpsn uint32) {
		gid, err := remote.dev.QueryGID(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		mustModify(t, local.qp, step{QPAttr{QPState: QPStateInit, PortNum: 1, QPAccessFlags: rcAccess},
			QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags})
		mustModify(t, local.qp, step{QPAttr{QPState: QPStateRTR, PathMTU: mtu, DestQPNum: remote.qp.QPN(),
			RQPSN: rpsn, MaxDestRdAtomic: 16, MinRNRTimer: 12,
			AHAttr: AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer})
		mustModify(t, local.qp, step{QPAttr{QPState: QPStateRTS, SQPSN: lpsn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic})
	}
	link(a, b, 0xFFFFF0, 0x100)
	link(b, a, 0x100, 0xFFFFF0) // a's PSNs wrap around 2^24 at once
}

// waitWC polls cq until one completion arrives.
func waitWC(t testing.TB, cq *CQ) WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]WorkCompletion, 1)
	for ctx.Err() == nil {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatal("no completion within 10 s")
	return WorkCompletion{}
}

func TestRCLoopbackOperations(t *testing.T) {
	for _, mtu := range []MTU{MTU256, MTU1024, MTU4096} {
		t.Run(mtu.String(), func(t *testing.T) {
			a, b := newRCEnd(t, "127.0.1.1", 1<<16), newRCEnd(t, "127.0.1.2", 1<<16)
			connectRC(t, a, b, mtu)
			n := mtu.Bytes()*3 + 7

			// RDMA WRITE: a's bytes land in b's memory; b does nothing.
			for i := range n {
				a.buf[i] = byte(i*7 + 1)
			}
			wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(0, 100), a.mr.SGE(100, n-100)},
				RDMA:   RDMAParams{RemoteAddr: b.mr.IOVA() + 1000, RKey: b.mr.RKey()}}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.WRID != 1 || wc.Opcode != WCRDMAWrite {
				t.Fatalf("write completion %+v", wc)
			}
			if !bytes.Equal(b.buf[1000:1000+n], a.buf[:n]) {
				t.Fatal("written bytes differ")
			}

			// RDMA READ: b's bytes come back into a's memory.
			for i := range n {
				b.buf[20000+i] = byte(i*13 + 5)
			}
			wr = SendWR{WRID: 2, Opcode: WRRDMARead, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(30000, n)},
				RDMA:   RDMAParams{RemoteAddr: b.mr.IOVA() + 20000, RKey: b.mr.RKey()}}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.Opcode != WCRDMARead || wc.ByteLen != uint32(n) {
				t.Fatalf("read completion %+v", wc)
			}
			if !bytes.Equal(a.buf[30000:30000+n], b.buf[20000:20000+n]) {
				t.Fatal("read bytes differ")
			}

			// SEND with immediate into a posted receive.
			if err := b.qp.PostRecv(&RecvWR{WRID: 9, SGList: []SGE{b.mr.SGE(40000, n)}}); err != nil {
				t.Fatal(err)
			}
			wr = SendWR{WRID: 3, Opcode: WRSendWithImm, SendFlags: SendSignaled, ImmData: 0xdeadbeef,
				SGList: []SGE{a.mr.SGE(0, n)}}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.Opcode != WCSend {
				t.Fatalf("send completion %+v", wc)
			}
			wc := waitWC(t, b.cq)
			if wc.Status != WCSuccess || wc.WRID != 9 || wc.Opcode != WCRecv || wc.ByteLen != uint32(n) ||
				wc.WCFlags&WCWithImm == 0 || wc.ImmData != 0xdeadbeef || wc.QPNum != b.qp.QPN() {
				t.Fatalf("receive completion %+v", wc)
			}
			if !bytes.Equal(b.buf[40000:40000+n], a.buf[:n]) {
				t.Fatal("sent bytes differ")
			}

			// Atomics on b's memory.
			binary.NativeEndian.PutUint64(b.buf[8:], 40)
			wr = SendWR{WRID: 4, Opcode: WRAtomicFetchAndAdd, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(50000, 8)},
				Atomic: AtomicParams{RemoteAddr: b.mr.IOVA() + 8, RKey: b.mr.RKey(), CompareAdd: 2}}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.Opcode != WCFetchAdd {
				t.Fatalf("fetch-add completion %+v", wc)
			}
			if got, orig := binary.NativeEndian.Uint64(b.buf[8:]), binary.NativeEndian.Uint64(a.buf[50000:]); got != 42 || orig != 40 {
				t.Fatalf("fetch-add: memory %d, original %d", got, orig)
			}
			wr = SendWR{WRID: 5, Opcode: WRAtomicCmpAndSwp, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(50008, 8)},
				Atomic: AtomicParams{RemoteAddr: b.mr.IOVA() + 8, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 7}}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.Opcode != WCCompSwap {
				t.Fatalf("compare-swap completion %+v", wc)
			}
			if got, orig := binary.NativeEndian.Uint64(b.buf[8:]), binary.NativeEndian.Uint64(a.buf[50008:]); got != 7 || orig != 42 {
				t.Fatalf("compare-swap: memory %d, original %d", got, orig)
			}

			// A bad rkey: remote access error, then the QP flushes.
			wr = SendWR{WRID: 6, Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 8)},
				RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x80}}
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != WCRemAccessErr || wc.WRID != 6 {
				t.Fatalf("bad rkey completion %+v", wc)
			}
			if st := a.qp.State(); st != QPStateErr {
				t.Errorf("requester QP in %v after a remote access error, want ERR", st)
			}
		})
	}
}
