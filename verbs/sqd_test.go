package verbs

import (
	"testing"
)

// Moving to SQD with en_sqd_async_notify raises EventSQDrained once the
// work requests in flight have completed, and not before (IBA 11.6.3);
// without the flag, or for requests queued in SQD, nothing is raised.
func TestSQDrainedEvent(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	toSQD := func(notify bool) {
		t.Helper()
		attr := QPAttr{QPState: QPStateSQD, EnSQDAsyncNotify: notify}
		mask := QPAttrState
		if notify {
			mask |= QPAttrEnSQDAsyncNotify
		}
		if err := a.qp.Modify(&attr, mask); err != nil {
			t.Fatal(err)
		}
	}
	toRTS := func() {
		t.Helper()
		if err := a.qp.Modify(&QPAttr{QPState: QPStateRTS}, QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	write := func(id uint64, n int) SendWR {
		return SendWR{WRID: id, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
			SGList: []SGE{a.mr.SGE(0, n)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}}
	}

	// Requests in flight when the QP enters SQD: the event follows their
	// completions.
	for i := range 4 {
		mustPostSend(t, a.qp, write(uint64(i), 60000))
	}
	toSQD(true)
	ev := nextEvent(t, a.dev)
	if ev.Type != EventSQDrained || ev.QP != a.qp {
		t.Fatalf("event %v for QP %v, want SQ_DRAINED for %d", ev.Type, ev.QP, a.qp.QPN())
	}
	if wcs := pollAll(t, a.cq); len(wcs) != 4 {
		t.Fatalf("%d completions when SQ_DRAINED was raised, want all 4", len(wcs))
	}

	// A request posted in SQD is queued, not started: no second event,
	// and it runs after the move back to RTS.
	mustPostSend(t, a.qp, write(10, 100))
	if evs := pendingEvents(a.dev); len(evs) != 0 {
		t.Fatalf("events %v for a request queued in SQD", evs)
	}
	toRTS()
	if wc := waitN(t, a.cq, 1)[0]; wc.WRID != 10 || wc.Status != WCSuccess {
		t.Fatalf("queued request: %+v", wc)
	}

	// Without en_sqd_async_notify: no event, even though drained.
	toSQD(false)
	toRTS()
	// An idle QP moved to SQD with the flag drains at once.
	toSQD(true)
	if ev := nextEvent(t, a.dev); ev.Type != EventSQDrained {
		t.Fatalf("event %v, want SQ_DRAINED", ev.Type)
	}
	if evs := pendingEvents(a.dev); len(evs) != 0 {
		t.Fatalf("extra events %v", evs)
	}
}
