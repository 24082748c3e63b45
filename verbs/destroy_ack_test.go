package verbs_test

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// A receiver that destroys its QP, or moves it to ERR, the moment it has
// polled the completion of a SEND must still acknowledge that SEND: a NIC
// that delivered the completion has sent the ACK, or will. goroce defers
// the ACK to the end of its receive batch, so Destroy and Modify must
// send what the batch still holds. Otherwise the sender retries the SEND
// into a closed QP until RETRY_EXC_ERR (seen in goroce-pingpong, whose
// ends close as soon as their last exchange is done).
//
// Each test holds the receiver's batch end at one point until the QP is
// destroyed or modified, so the race always happens, and reads the
// receiver's sent-packet counter when Destroy or Modify returns: the ACK
// must have left by then. The sender has no retransmission timer (timeout
// 0), so its SEND completes only through the ACK of its one transmission,
// and no test depends on how fast a loaded machine schedules goroutines
// (a 1 ms timer, as this test once had, ran out of retries whenever the
// receiving goroutine waited 8 ms for a CPU).

// TestDestroyRightAfterReceiveStillAcks: the ACK is still in the QP's
// Output, where the receive path left it for the end of its batch.
func TestDestroyRightAfterReceiveStillAcks(t *testing.T) {
	a, b := ackPair(t)
	held, release := holdBatch(t, b.Dev, verbs.BatchStart)
	sendOne(t, a, b)
	<-held
	if err := b.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	wantAckSent(t, b, "Destroy")
	release()
	wantSendDone(t, a)
}

// TestDestroyFlushesRepliesOfTheBatch: the receive batch has taken the
// ACK into the device's reply batch but not sent it yet when the QP is
// destroyed; the goroutine may not run again before Device.Close closes
// the socket, so Destroy sends it.
func TestDestroyFlushesRepliesOfTheBatch(t *testing.T) {
	a, b := ackPair(t)
	held, release := holdBatch(t, b.Dev, verbs.BatchFlush)
	sendOne(t, a, b)
	<-held
	if err := b.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	wantAckSent(t, b, "Destroy")
	release()
	wantSendDone(t, a)
}

// TestModifyToErrRightAfterReceiveStillAcks: moving the QP to ERR (the
// usual first step of a teardown) used to discard the Output, and the ACK
// with it.
func TestModifyToErrRightAfterReceiveStillAcks(t *testing.T) {
	a, b := ackPair(t)
	held, release := holdBatch(t, b.Dev, verbs.BatchStart)
	sendOne(t, a, b)
	<-held
	if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wantAckSent(t, b, "Modify to ERR")
	release()
	wantSendDone(t, a)
}

// TestModifyToErrFlushesRepliesOfTheBatch: the receive batch has taken
// the ACK into the device's reply batch when the QP moves to ERR; what the
// application sends next (rdma_cm's DREQ) must not leave before it, so
// Modify sends it.
func TestModifyToErrFlushesRepliesOfTheBatch(t *testing.T) {
	a, b := ackPair(t)
	held, release := holdBatch(t, b.Dev, verbs.BatchFlush)
	sendOne(t, a, b)
	<-held
	if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wantAckSent(t, b, "Modify to ERR")
	release()
	wantSendDone(t, a)
}

// ackPair connects two ends; a, the sender, never retransmits.
func ackPair(t *testing.T) (a, b *rdmatest.End) {
	t.Helper()
	return ackPairWith(t, rdmatest.EndOptions{})
}

// ackPairWith is ackPair with the receiver b made with bo.
func ackPairWith(t *testing.T, bo rdmatest.EndOptions) (a, b *rdmatest.End) {
	t.Helper()
	a = newEnd(t, 1, rdmatest.EndOptions{})
	b = newEnd(t, 2, bo)
	oa := rdmatest.DefaultLink()
	oa.Timeout = 0 // no retransmission timer
	rdmatest.Connect(t, a, b, oa, rdmatest.DefaultLink())
	return a, b
}

// holdBatch stops the first receive batch of d that reaches at until
// release is called; held is closed once it waits there. release is also
// called at the end of the test, so that the device can close.
func holdBatch(t *testing.T, d *verbs.Device, at verbs.BatchPoint) (held <-chan struct{}, release func()) {
	t.Helper()
	h := make(chan struct{})
	r := make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	hook := func(dev *verbs.Device, p verbs.BatchPoint) {
		if dev == d && p == at {
			holdOnce.Do(func() {
				close(h)
				<-r
			})
		}
	}
	verbs.SetEndBatchHook(hook)
	release = func() { releaseOnce.Do(func() { close(r) }) }
	t.Cleanup(func() {
		release()
		verbs.SetEndBatchHook(nil)
	})
	return h, release
}

// sendOne sends a 64-byte SEND from a to b (through b's SRQ if it has
// one) and waits for b's receive
// completion, which the receive path delivers before its batch ends.
func sendOne(t *testing.T, a, b *rdmatest.End) {
	t.Helper()
	recv := verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.MR.SGE(0, 64)}}
	if b.SRQ != nil {
		if err := b.SRQ.PostRecv(&recv); err != nil {
			t.Fatal(err)
		}
	} else {
		rdmatest.PostRecv(t, b.QP, recv)
	}
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}})
	if wc := rdmatest.WaitN(t, b.CQ, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("receive: %+v", wc)
	}
}

// wantAckSent checks that b's device has sent its one packet, the ACK,
// by the time what returned.
func wantAckSent(t *testing.T, b *rdmatest.End, what string) {
	t.Helper()
	if n := b.Dev.Counters().SentPkts; n != 1 {
		t.Fatalf("%s returned with %d packets sent, want 1 (the ACK of the SEND whose completion was polled)", what, n)
	}
}

// wantSendDone checks that a's SEND completed successfully.
func wantSendDone(t *testing.T, a *rdmatest.End) {
	t.Helper()
	if wc := rdmatest.WaitN(t, a.CQ, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("the SEND whose receive completed did not succeed: %+v", wc)
	}
}

// TestDestroyRightAfterSRQReceiveStillAcks: the same for a QP that
// receives through a shared receive queue (goroce-srq-pingpong's ends).
func TestDestroyRightAfterSRQReceiveStillAcks(t *testing.T) {
	a, b := ackPairWith(t, rdmatest.EndOptions{SRQ: &verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1}})
	held, release := holdBatch(t, b.Dev, verbs.BatchStart)
	sendOne(t, a, b)
	<-held
	if err := b.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	wantAckSent(t, b, "Destroy")
	release()
	wantSendDone(t, a)
}

// TestStateIsErrWhenErrorCompletionPolled: a requester whose WRITE was
// refused (remote access error) is in ERR by the time the application
// polls that completion, as on a NIC, even while the receive batch that
// took the NAK has not ended yet (the batch is held there).
func TestStateIsErrWhenErrorCompletionPolled(t *testing.T) {
	a, b := ackPair(t)
	_, release := holdBatch(t, a.Dev, verbs.BatchStart)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 8)},
		RDMA:   verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey() ^ 0x80}})
	wc := rdmatest.WaitN(t, a.CQ, 1)[0]
	st := a.QP.State()
	release()
	if wc.Status != verbs.WCRemAccessErr || wc.WRID != 6 {
		t.Fatalf("bad rkey completion %+v", wc)
	}
	if st != verbs.QPStateErr {
		t.Fatalf("QP in %v when its error completion was polled, want ERR", st)
	}
}
