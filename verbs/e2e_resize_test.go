package verbs_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestE2ECQResize resizes a CQ while work requests complete into it, on
// either backend (ibv_resize_cq on hardware): every completion arrives
// once, in order, whether it was queued before the resize or after; sizes
// outside 1..max_cqe and a destroyed CQ are refused.
func TestE2ECQResize(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	fill(a.Buf[srcOff:srcOff+64], 0x5A)
	wrid := uint64(0)
	for _, n := range []int{64, 8, 32} {
		const k = 4
		for range k {
			wrid++
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(srcOff, 64)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + dstOff, RKey: b.MR.RKey()}})
		}
		if err := a.CQ.Resize(n); err != nil {
			t.Fatalf("Resize(%d): %v", n, err)
		}
		if a.CQ.Size() < n {
			t.Fatalf("Size %d after Resize(%d)", a.CQ.Size(), n)
		}
		wcs := rdmatest.WaitN(t, a.CQ, k)
		for i, wc := range wcs {
			if want := wrid - k + 1 + uint64(i); wc.WRID != want || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite {
				t.Fatalf("after Resize(%d): completion %d %+v, want WRID %d, success", n, i, wc, want)
			}
		}
		rdmatest.ExpectEmpty(t, a.CQ)
	}
	checkBytes(t, "written", b.Buf[dstOff:dstOff+64], a.Buf[srcOff:srcOff+64])
	maxCQE := a.Dev.Query().MaxCQE
	rdmatest.WantError(t, a.CQ.Resize(0), verbs.ErrInvalidArgument, "cqe")
	rdmatest.WantError(t, a.CQ.Resize(maxCQE+1), verbs.ErrInvalidArgument, "cqe")
	cq := rdmatest.CQ(t, a.Dev, 4)
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, cq.Resize(8), verbs.ErrClosed, "cq")
}

// TestE2EMRRereg re-registers a region in place while a peer uses it, on
// either backend (ibv_rereg_mr on hardware): new memory at its address
// with new rights, then read-only rights; the peer reaches the new memory
// through the new rkey, and a WRITE the new rights forbid is refused.
func TestE2EMRRereg(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	moved := make([]byte, 4096)
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	err := b.MR.Rereg(verbs.ReregChangeTranslation|verbs.ReregChangeAccess, nil, moved, rw)
	if hw := rdmatest.Hardware(); hw != "" && errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("%s=hw:%s: the device refuses ibv_rereg_mr: %v", rdmatest.BackendEnv, hw, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b.MR.IOVA() != uint64(uintptr(unsafe.Pointer(&moved[0]))) || b.MR.Len() != len(moved) {
		t.Fatalf("after Rereg: IOVA %#x length %d, want the new buffer's %p, %d", b.MR.IOVA(), b.MR.Len(), &moved[0], len(moved))
	}
	copy(a.Buf[srcOff:], "moved")
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(srcOff, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 100, RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE into the new memory: %+v", wc)
	}
	if string(moved[100:105]) != "moved" {
		t.Fatalf("the new memory holds %q at offset 100", moved[100:105])
	}

	if err := b.MR.Rereg(verbs.ReregChangeAccess, nil, nil, verbs.AccessLocalWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	copy(moved[200:], "read back")
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(dstOff, 9)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 200, RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || string(a.Buf[dstOff:dstOff+9]) != "read back" {
		t.Fatalf("READ through the read-only rkey: %+v, %q", wc, a.Buf[dstOff:dstOff+9])
	}
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(srcOff, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through the read-only rkey: %+v, want %v", wc, verbs.WCRemAccessErr)
	}
}
