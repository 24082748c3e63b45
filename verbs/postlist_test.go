package verbs_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// PostSendList posts a list in order, transmits it in one batch and, like
// ibv_post_send's bad_wr, stops at the first bad request: the ones before
// it complete, the ones after it are not posted.
func TestPostSendList(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	fill(a.Buf[:4096], 7)

	const n = 48
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		off := i * 64
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(off, 64)},
			RDMA:   verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + uint64(off), RKey: b.MR.RKey()}}
	}
	posted, err := a.QP.PostSendList(wrs)
	if err != nil || posted != n {
		t.Fatalf("PostSendList = %d, %v; want %d, nil", posted, err, n)
	}
	for i, wc := range rdmatest.WaitN(t, a.CQ, n) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(a.Buf[:n*64], b.Buf[:n*64]) {
		t.Fatal("the WRITEs' bytes did not arrive")
	}

	// A bad request in the middle: the two before it are posted and
	// complete; it and the one after it are not.
	bad := []verbs.SendWR{wrs[0], wrs[1], wrs[2], wrs[3]}
	bad[2].SGList = make([]verbs.SGE, 5) // max_send_sge is 4
	posted, err = a.QP.PostSendList(bad)
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "num_sge")
	if posted != 2 {
		t.Fatalf("posted %d before the bad request, want 2", posted)
	}
	if wcs := rdmatest.WaitN(t, a.CQ, 2); wcs[0].WRID != 0 || wcs[1].WRID != 1 {
		t.Fatalf("completions %+v", wcs)
	}
	rdmatest.ExpectEmpty(t, a.CQ)

	if posted, err := a.QP.PostSendList(nil); posted != 0 || err != nil {
		t.Fatalf("empty list: %d, %v", posted, err)
	}
}
