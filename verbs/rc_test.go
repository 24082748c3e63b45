package verbs_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

func TestRCLoopbackOperations(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU1024, verbs.MTU4096} {
		t.Run(mtu.String(), func(t *testing.T) {
			a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
			l := rdmatest.DefaultLink()
			l.MTU = mtu
			rdmatest.Connect(t, a, b, l, l)
			n := mtu.Bytes()*3 + 7

			// RDMA WRITE: a's bytes land in b's memory; b does nothing.
			for i := range n {
				a.Buf[i] = byte(i*7 + 1)
			}
			wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, 100), a.MR.SGE(100, n-100)},
				RDMA:   verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 1000, RKey: b.MR.RKey()}}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 1 || wc.Opcode != verbs.WCRDMAWrite {
				t.Fatalf("write completion %+v", wc)
			}
			if !bytes.Equal(b.Buf[1000:1000+n], a.Buf[:n]) {
				t.Fatal("written bytes differ")
			}

			// RDMA READ: b's bytes come back into a's memory.
			for i := range n {
				b.Buf[20000+i] = byte(i*13 + 5)
			}
			wr = verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(30000, n)},
				RDMA:   verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 20000, RKey: b.MR.RKey()}}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead || wc.ByteLen != uint32(n) {
				t.Fatalf("read completion %+v", wc)
			}
			if !bytes.Equal(a.Buf[30000:30000+n], b.Buf[20000:20000+n]) {
				t.Fatal("read bytes differ")
			}

			// SEND with immediate into a posted receive.
			if err := b.QP.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(40000, n)}}); err != nil {
				t.Fatal(err)
			}
			wr = verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: 0xdeadbeef,
				SGList: []verbs.SGE{a.MR.SGE(0, n)}}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend {
				t.Fatalf("send completion %+v", wc)
			}
			wc := rdmatest.WaitOne(t, b.CQ)
			if wc.Status != verbs.WCSuccess || wc.WRID != 9 || wc.Opcode != verbs.WCRecv || wc.ByteLen != uint32(n) ||
				wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != 0xdeadbeef || wc.QPNum != b.QP.QPN() {
				t.Fatalf("receive completion %+v", wc)
			}
			if !bytes.Equal(b.Buf[40000:40000+n], a.Buf[:n]) {
				t.Fatal("sent bytes differ")
			}

			// Atomics on b's memory.
			binary.NativeEndian.PutUint64(b.Buf[8:], 40)
			wr = verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(50000, 8)},
				Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + 8, RKey: b.MR.RKey(), CompareAdd: 2}}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCFetchAdd {
				t.Fatalf("fetch-add completion %+v", wc)
			}
			if got, orig := binary.NativeEndian.Uint64(b.Buf[8:]), binary.NativeEndian.Uint64(a.Buf[50000:]); got != 42 || orig != 40 {
				t.Fatalf("fetch-add: memory %d, original %d", got, orig)
			}
			wr = verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(50008, 8)},
				Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + 8, RKey: b.MR.RKey(), CompareAdd: 42, Swap: 7}}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCCompSwap {
				t.Fatalf("compare-swap completion %+v", wc)
			}
			if got, orig := binary.NativeEndian.Uint64(b.Buf[8:]), binary.NativeEndian.Uint64(a.Buf[50008:]); got != 7 || orig != 42 {
				t.Fatalf("compare-swap: memory %d, original %d", got, orig)
			}

			// A bad rkey: remote access error, then the QP flushes.
			wr = verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
				RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey() ^ 0x80}}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCRemAccessErr || wc.WRID != 6 {
				t.Fatalf("bad rkey completion %+v", wc)
			}
			if st := a.QP.State(); st != verbs.QPStateErr {
				t.Errorf("requester QP in %v after a remote access error, want ERR", st)
			}
		})
	}
}
