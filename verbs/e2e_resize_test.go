package verbs_test

import (
	"testing"

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
