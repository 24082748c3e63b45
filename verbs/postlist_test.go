package verbs

import (
	"bytes"
	"testing"
)

// PostSendList posts a list in order, transmits it in one batch and, like
// ibv_post_send's bad_wr, stops at the first bad request: the ones before
// it complete, the ones after it are not posted.
func TestPostSendList(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	fill(a.buf[:4096], 7)

	const n = 48
	wrs := make([]SendWR, n)
	for i := range wrs {
		off := i * 64
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled,
			SGList: []SGE{a.mr.SGE(off, 64)},
			RDMA:   RDMAParams{RemoteAddr: b.mr.IOVA() + uint64(off), RKey: b.mr.RKey()}}
	}
	posted, err := a.qp.PostSendList(wrs)
	if err != nil || posted != n {
		t.Fatalf("PostSendList = %d, %v; want %d, nil", posted, err, n)
	}
	for i, wc := range waitN(t, a.cq, n) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(a.buf[:n*64], b.buf[:n*64]) {
		t.Fatal("the WRITEs' bytes did not arrive")
	}

	// A bad request in the middle: the two before it are posted and
	// complete; it and the one after it are not.
	bad := []SendWR{wrs[0], wrs[1], wrs[2], wrs[3]}
	bad[2].SGList = make([]SGE, 5) // max_send_sge is 4
	posted, err = a.qp.PostSendList(bad)
	wantErr(t, err, ErrInvalidArgument, "num_sge")
	if posted != 2 {
		t.Fatalf("posted %d before the bad request, want 2", posted)
	}
	if wcs := waitN(t, a.cq, 2); wcs[0].WRID != 0 || wcs[1].WRID != 1 {
		t.Fatalf("completions %+v", wcs)
	}
	expectEmpty(t, a.cq)

	if posted, err := a.qp.PostSendList(nil); posted != 0 || err != nil {
		t.Fatalf("empty list: %d, %v", posted, err)
	}
}
