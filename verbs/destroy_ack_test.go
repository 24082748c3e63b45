package verbs

import (
	"testing"
)

// A receiver that destroys its QP the moment it has polled the completion
// of a SEND must still acknowledge that SEND: the ACK the receive path
// built for the end of its batch goes out before the QP closes, as a NIC
// would have sent it. Otherwise the sender retries the SEND into a closed
// QP until RETRY_EXC_ERR (seen in goroce-pingpong, whose ends close as
// soon as their last exchange is done). The test holds the receiver's
// batch end back until the QP is destroyed, so the race always happens.
func TestDestroyRightAfterReceiveStillAcks(t *testing.T) {
	link := defaultLink()
	link.timeout = 8 // ~1 ms: a lost ACK ends in RETRY_EXC_ERR within ~10 ms
	a := newEnd(t, "127.0.1.1", endOpts{})
	b := newEnd(t, "127.0.1.2", endOpts{})
	connect(t, a, b, link, link)

	destroyed := make(chan struct{})
	hook := func(d *Device) {
		if d == b.dev {
			<-destroyed
		}
	}
	endBatchHook.Store(&hook)
	t.Cleanup(func() { endBatchHook.Store(nil) })

	mustPostRecv(t, b.qp, RecvWR{WRID: 1, SGList: []SGE{b.mr.SGE(0, 64)}})
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, SendFlags: SendSignaled,
		SGList: []SGE{a.mr.SGE(0, 64)}})
	if wc := waitN(t, b.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("receive: %+v", wc)
	}
	err := b.qp.Destroy()
	close(destroyed)
	if err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, a.cq, 1)[0]; wc.Status != WCSuccess || wc.WRID != 2 {
		t.Fatalf("the SEND whose receive completed did not succeed: %+v", wc)
	}
}
