package verbs

import (
	"testing"
	"time"
)

// checkFlushed posts more work on a failed QP and checks the aftermath of
// an error: the QP reads back ERR, every later request completes with
// WR_FLUSH_ERR, and the CQ then holds nothing more.
func checkFlushed(t *testing.T, e *rcEnd) {
	t.Helper()
	waitFor(t, "QP in ERR", func() bool { return e.qp.State() == QPStateErr })
	if attr, _, err := e.qp.Query(QPAttrState); err != nil || attr.QPState != QPStateErr {
		t.Fatalf("Query: state %v, %v; want ERR", attr.QPState, err)
	}
	mustPostSend(t, e.qp, SendWR{WRID: 1000, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
		SGList: []SGE{e.mr.SGE(0, 8)}, RDMA: RDMAParams{RemoteAddr: 0, RKey: 1}})
	mustPostRecv(t, e.qp, RecvWR{WRID: 1001, SGList: []SGE{e.mr.SGE(0, 8)}})
	wcs := waitN(t, e.cq, 2)
	if wcs[0].WRID != 1000 || wcs[0].Status != WCWRFlushErr || wcs[0].Opcode != WCRDMAWrite ||
		wcs[1].WRID != 1001 || wcs[1].Status != WCWRFlushErr || wcs[1].Opcode != WCRecv {
		t.Fatalf("posts in ERR completed %+v, want two WR_FLUSH_ERR", wcs)
	}
	expectEmpty(t, e.cq)
	// ERR leads only to RESET (or ERR): a failed QP cannot be revived.
	err := e.qp.Modify(&QPAttr{QPState: QPStateRTS}, QPAttrState)
	wantErr(t, err, ErrInvalidState, "qp_state")
}

// TestE2ERecoverAfterError: a connection whose QPs failed is brought back
// through RESET and carries traffic again, with new PSNs.
func TestE2ERecoverAfterError(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x11}})
	if wc := waitWC(t, a.cq); wc.Status != WCRemAccessErr {
		t.Fatalf("completion %+v", wc)
	}
	checkFlushed(t, a)
	checkFlushed(t, b)
	for _, e := range []*rcEnd{a, b} {
		mustModify(t, e.qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
	}
	linkQP(t, a.qp, b.qp, b.dev, defaultLink(), 0x10, 0x777)
	linkQP(t, b.qp, a.qp, a.dev, defaultLink(), 0x777, 0x10)
	fill(a.buf[:3000], 8)
	mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGList: []SGE{b.mr.SGE(recvOff, 3000)}})
	mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 3000)}})
	if wc := waitWC(t, a.cq); wc.WRID != 3 || wc.Status != WCSuccess {
		t.Fatalf("send after recovery %+v", wc)
	}
	if wc := waitWC(t, b.cq); wc.WRID != 2 || wc.Status != WCSuccess || wc.ByteLen != 3000 {
		t.Fatalf("receive after recovery %+v", wc)
	}
	checkBytes(t, "payload after recovery", b.buf[recvOff:recvOff+3000], a.buf[:3000])
}

// TestE2EAtomicErrors follows pyverbs' test_atomic error cases. Each case
// runs on a fresh connection, since a failed request takes the QPs to ERR.
// After the failing request two more are queued behind it: every work
// request completes exactly once, the failing one with its error and the
// others with WR_FLUSH_ERR.
func TestE2EAtomicErrors(t *testing.T) {
	cases := []struct {
		name       string
		target     endOpts     // the responder's side
		access     AccessFlags // the responder QP's QPAccessFlags
		wr         func(t *testing.T, a, b *rcEnd) SendWR
		want       WCStatus
		remoteErr  bool // the responder's QP fails too
		wantTarget uint64
	}{
		{
			name: "misaligned remote address",
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				return fetchAdd(a, b.mr.IOVA()+dstOff+4, b.mr.RKey())
			},
			want: WCRemInvReqErr, remoteErr: true,
		},
		{
			name: "invalid rkey",
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				return fetchAdd(a, b.mr.IOVA()+dstOff, b.mr.RKey()+0x100)
			},
			want: WCRemAccessErr, remoteErr: true,
		},
		{
			name: "invalid local lkey",
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				wr := fetchAdd(a, b.mr.IOVA()+dstOff, b.mr.RKey())
				wr.SGList[0].LKey ^= 0x80
				return wr
			},
			want: WCLocProtErr,
		},
		{
			name: "local buffer not writable",
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				// The original value is written into local memory, which
				// needs local write: a second, read-only region.
				ro := mustMR2(t, a.pd, make([]byte, 8), AccessRemoteRead)
				wr := fetchAdd(a, b.mr.IOVA()+dstOff, b.mr.RKey())
				wr.SGList[0] = ro.SGE(0, 8)
				return wr
			},
			want: WCLocProtErr,
		},
		{
			name:   "MR without remote atomic",
			target: endOpts{mrAccess: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead},
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				return fetchAdd(a, b.mr.IOVA()+dstOff, b.mr.RKey())
			},
			want: WCRemAccessErr, remoteErr: true,
		},
		{
			// goroce, like rxe, answers an operation the QP's access
			// flags do not enable with an invalid request NAK.
			name:   "QP without remote atomic",
			access: AccessRemoteWrite | AccessRemoteRead,
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				return fetchAdd(a, b.mr.IOVA()+dstOff, b.mr.RKey())
			},
			want: WCRemInvReqErr, remoteErr: true,
		},
		{
			name: "out of the region's bounds",
			wr: func(t *testing.T, a, b *rcEnd) SendWR {
				return fetchAdd(a, b.mr.IOVA()+uint64(len(b.buf)), b.mr.RKey())
			},
			want: WCRemAccessErr, remoteErr: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", c.target)
			lb := defaultLink()
			if c.access != 0 {
				lb.access = c.access
			}
			connect(t, a, b, defaultLink(), lb)
			const initial = 77
			b.buf[dstOff] = initial
			mustPostRecv(t, b.qp, RecvWR{WRID: 500, SGList: []SGE{b.mr.SGE(recvOff, 64)}})

			wr := c.wr(t, a, b)
			wr.WRID = 1
			mustPostSend(t, a.qp, wr)
			// Two more behind it, one unsignaled: both must flush.
			mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 8)},
				RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}})
			mustPostSend(t, a.qp, fetchAdd(a, b.mr.IOVA()+dstOff, b.mr.RKey()))

			wcs := waitN(t, a.cq, 3)
			if wcs[0].WRID != 1 || wcs[0].Status != c.want || wcs[0].QPNum != a.qp.QPN() {
				t.Fatalf("failing request completed %+v, want %v", wcs[0], c.want)
			}
			for i, wc := range wcs[1:] {
				if wc.WRID != uint64(i+2) || wc.Status != WCWRFlushErr {
					t.Fatalf("request %d completed %+v, want WR_FLUSH_ERR", i+2, wc)
				}
			}
			checkFlushed(t, a)

			// The responder fails on remote errors (flushing its posted
			// receive) and is untouched by local ones.
			if c.remoteErr {
				if wc := waitWC(t, b.cq); wc.WRID != 500 || wc.Status != WCWRFlushErr {
					t.Fatalf("responder's receive completed %+v, want WR_FLUSH_ERR", wc)
				}
				checkFlushed(t, b)
			} else {
				expectEmpty(t, b.cq)
				if s := b.qp.State(); s != QPStateRTS {
					t.Fatalf("responder in %v after a local error", s)
				}
			}
			if b.buf[dstOff] != initial {
				t.Fatalf("target memory changed to %d by a failed atomic", b.buf[dstOff])
			}
		})
	}
}

// fetchAdd is a signaled FETCH_AND_ADD of 1 whose result lands at a's
// offset srcOff.
func fetchAdd(a *rcEnd, raddr uint64, rkey uint32) SendWR {
	return SendWR{WRID: 3, Opcode: WRAtomicFetchAndAdd, SendFlags: SendSignaled,
		SGList: []SGE{a.mr.SGE(srcOff, 8)}, Atomic: AtomicParams{RemoteAddr: raddr, RKey: rkey, CompareAdd: 1}}
}

// TestE2ESendTooLong: a SEND longer than the posted receive fails on both
// sides, the requester with REM_INV_REQ_ERR and the receiver with
// LOC_LEN_ERR, for single- and multi-packet messages.
func TestE2ESendTooLong(t *testing.T) {
	for _, n := range []int{65, 3000} {
		t.Run("", func(t *testing.T) {
			a, b := newPair(t, endOpts{}, endOpts{})
			b.buf[recvOff+64] = 0x5C
			mustPostRecv(t, b.qp, RecvWR{WRID: 9, SGList: []SGE{b.mr.SGE(recvOff, 40), b.mr.SGE(recvOff+40, 24)}})
			mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, n)}})
			if wc := waitWC(t, a.cq); wc.WRID != 1 || wc.Status != WCRemInvReqErr {
				t.Fatalf("requester completion %+v, want REM_INV_REQ_ERR", wc)
			}
			if wc := waitWC(t, b.cq); wc.WRID != 9 || wc.Status != WCLocLenErr || wc.QPNum != b.qp.QPN() {
				t.Fatalf("receiver completion %+v, want LOC_LEN_ERR", wc)
			}
			if b.buf[recvOff+64] != 0x5C {
				t.Fatal("the SEND wrote past the receive buffer")
			}
			checkFlushed(t, a)
			checkFlushed(t, b)
		})
	}
}

// TestE2ERNR: a SEND arriving before its receive is RNR NAKed and retried.
func TestE2ERNR(t *testing.T) {
	t.Run("receive posted later", func(t *testing.T) {
		a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
		la, lb := defaultLink(), defaultLink()
		la.rnrRetry, lb.minRNRTimer = 7, 12 // infinite retries, 0.64 ms apart
		connect(t, a, b, la, lb)
		fill(a.buf[:2000], 1)
		mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 2000)}})
		time.Sleep(20 * time.Millisecond)
		expectEmpty(t, a.cq)
		mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGList: []SGE{b.mr.SGE(recvOff, 2000)}})
		if wc := waitWC(t, a.cq); wc.WRID != 1 || wc.Status != WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
		if wc := waitWC(t, b.cq); wc.WRID != 2 || wc.Status != WCSuccess || wc.ByteLen != 2000 {
			t.Fatalf("receive completion %+v", wc)
		}
		checkBytes(t, "payload", b.buf[recvOff:recvOff+2000], a.buf[:2000])
	})
	t.Run("rnr_retry 0", func(t *testing.T) {
		a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
		la := defaultLink()
		la.rnrRetry = 0
		connect(t, a, b, la, defaultLink())
		mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithImm, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 10)}})
		mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 10)},
			RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
		wcs := waitN(t, a.cq, 2)
		if wcs[0].WRID != 1 || wcs[0].Status != WCRNRRetryExcErr || wcs[1].WRID != 2 || wcs[1].Status != WCWRFlushErr {
			t.Fatalf("completions %+v, want RNR_RETRY_EXC_ERR then WR_FLUSH_ERR", wcs)
		}
		checkFlushed(t, a)
		// An RNR NAK is no error for the responder.
		if s := b.qp.State(); s != QPStateRTS {
			t.Fatalf("responder in %v", s)
		}
	})
	t.Run("WRITE with immediate", func(t *testing.T) {
		// WRITE with immediate needs a receive as much as a SEND does.
		a, b := newPair(t, endOpts{}, endOpts{})
		fill(a.buf[:100], 4)
		mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWriteWithImm, SendFlags: SendSignaled, ImmData: 5,
			SGList: []SGE{a.mr.SGE(0, 100)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}})
		time.Sleep(5 * time.Millisecond)
		mustPostRecv(t, b.qp, RecvWR{WRID: 2})
		if wc := waitWC(t, a.cq); wc.WRID != 1 || wc.Status != WCSuccess {
			t.Fatalf("write completion %+v", wc)
		}
		if wc := waitWC(t, b.cq); wc.WRID != 2 || wc.Opcode != WCRecvRDMAWithImm || wc.ImmData != 5 || wc.ByteLen != 100 {
			t.Fatalf("receive completion %+v", wc)
		}
		checkBytes(t, "payload", b.buf[dstOff:dstOff+100], a.buf[:100])
	})
}

// TestE2EPeerGone: when the remote device disappears, the oldest request
// exhausts its retries and the rest flush, in bounded time.
func TestE2EPeerGone(t *testing.T) {
	a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
	la := defaultLink()
	// 4.096 µs × 2^12 ≈ 17 ms, 2 retries: the failure takes about 50 ms.
	// A shorter timeout (8, about 1 ms) makes the connection itself
	// flaky under -race on two cores, where a receive goroutine can wait
	// that long for the scheduler to run it.
	la.timeout, la.retryCnt = 12, 2
	connect(t, a, b, la, defaultLink())
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
		t.Fatalf("completion %+v before the peer left", wc)
	}
	raddr, rkey := b.mr.IOVA(), b.mr.RKey()
	if err := b.dev.Close(); err != nil {
		t.Fatal(err)
	}
	ops := []WROpcode{WRRDMAWrite, WRSend, WRRDMARead, WRAtomicFetchAndAdd}
	for i, op := range ops {
		wr := SendWR{WRID: uint64(10 + i), Opcode: op, SGList: []SGE{a.mr.SGE(8*i, 8)},
			RDMA:   RDMAParams{RemoteAddr: raddr, RKey: rkey},
			Atomic: AtomicParams{RemoteAddr: raddr, RKey: rkey}}
		if i == 0 {
			wr.SendFlags = SendSignaled
		}
		mustPostSend(t, a.qp, wr)
	}
	start := time.Now()
	wcs := waitN(t, a.cq, len(ops)) // within 10 s
	t.Logf("failed after %v", time.Since(start))
	if wcs[0].WRID != 10 || wcs[0].Status != WCRetryExcErr {
		t.Fatalf("oldest request completed %+v, want RETRY_EXC_ERR", wcs[0])
	}
	for i, wc := range wcs[1:] {
		if wc.WRID != uint64(11+i) || wc.Status != WCWRFlushErr {
			t.Fatalf("request %d completed %+v, want WR_FLUSH_ERR", 11+i, wc)
		}
	}
	checkFlushed(t, a)
}

// TestE2EErrorBehindRead: a request that fails while an earlier READ is
// still being answered (the responder sends long READ replies in bursts
// and executes later requests meanwhile) must not cut the READ short:
// responses leave in PSN order, so the READ completes with all its data,
// the WRITE between them succeeds, and only the failing request completes
// with the error.
func TestE2EErrorBehindRead(t *testing.T) {
	// 80 response packets at MTU 256, in two bursts; the requests after it
	// stay within the requester's window (at least 128 unacknowledged PSNs), so
	// they leave right behind the READ and reach the responder while the
	// second burst is pending. Posting them in SQD and moving to RTS sends
	// all three in one batch.
	const n = 80 * 256
	for _, bad := range []WROpcode{WRRDMARead, WRRDMAWrite, WRAtomicFetchAndAdd} {
		t.Run(bad.String(), func(t *testing.T) {
			a, b := newEnd(t, "127.0.1.1", endOpts{bufSize: 2*n + 4096}), newEnd(t, "127.0.1.2", endOpts{bufSize: n + 4096})
			l := defaultLink()
			l.mtu = MTU256
			connect(t, a, b, l, l)
			fill(b.buf[:n], 0x61)
			mustModify(t, a.qp, step{QPAttr{QPState: QPStateSQD}, QPAttrState})
			mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(0, n)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
			mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(n, 100)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + n, RKey: b.mr.RKey()}})
			mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: bad, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(n+200, 8)},
				RDMA:   RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x22},
				Atomic: AtomicParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x22}})
			mustModify(t, a.qp, step{QPAttr{QPState: QPStateRTS}, QPAttrState})
			wcs := waitN(t, a.cq, 3)
			if wcs[0].WRID != 1 || wcs[0].Status != WCSuccess || wcs[0].ByteLen != n ||
				wcs[1].WRID != 2 || wcs[1].Status != WCSuccess ||
				wcs[2].WRID != 3 || wcs[2].Status != WCRemAccessErr {
				t.Fatalf("completions %+v, want READ and WRITE successful, then REM_ACCESS_ERR", wcs)
			}
			checkBytes(t, "READ data", a.buf[:n], b.buf[:n])
			checkFlushed(t, a)
			checkFlushed(t, b)
		})
	}
}

// TestTimerWakesForEarlierDeadline: the timer goroutine sleeps until the
// earliest retransmission deadline and is woken only for an earlier one
// (engine.schedule). With a QP whose deadline is a second away already
// filed, a second QP of the same device with a 17 ms timeout and a dead
// peer must still fail after its own retries, not at the first QP's
// deadline.
func TestTimerWakesForEarlierDeadline(t *testing.T) {
	a := newEnd(t, "127.0.1.1", endOpts{})
	b, c := newEnd(t, "127.0.1.2", endOpts{}), newEnd(t, "127.0.1.3", endOpts{})
	slow, fast := defaultLink(), defaultLink()
	slow.timeout = 18 // 4.096 µs × 2^18 ≈ 1.07 s
	fast.timeout, fast.retryCnt = 12, 1
	connect(t, a, b, slow, defaultLink())
	qp2, err := a.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	linkQP(t, qp2, c.qp, c.dev, fast, 0x100, 0x200)
	linkQP(t, c.qp, qp2, a.dev, defaultLink(), 0x200, 0x100)
	for _, e := range []*rcEnd{b, c} {
		if err := e.dev.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: 0x1000, RKey: 1}})
	time.Sleep(20 * time.Millisecond) // the timer goroutine now sleeps until about 1 s
	start := time.Now()
	mustPostSend(t, qp2, SendWR{WRID: 2, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(8, 8)},
		RDMA: RDMAParams{RemoteAddr: 0x1000, RKey: 1}})
	wc := waitWC(t, a.cq)
	took := time.Since(start)
	if wc.WRID != 2 || wc.Status != WCRetryExcErr {
		t.Fatalf("first completion %+v, want wr_id 2 with RETRY_EXC_ERR", wc)
	}
	// Two timeouts of 17 ms; the other QP's deadline is a second away.
	if took > 600*time.Millisecond {
		t.Fatalf("RETRY_EXC_ERR after %v: the timer waited for the later deadline", took)
	}
	t.Logf("failed after %v", took)
}
