package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// Moving to SQD with en_sqd_async_notify raises EventSQDrained once the
// work requests in flight have completed, and not before (IBA 11.6.3);
// without the flag, or for requests queued in SQD, nothing is raised.
func TestSQDrainedEvent(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	toSQD := func(notify bool) {
		t.Helper()
		attr := verbs.QPAttr{QPState: verbs.QPStateSQD, EnSQDAsyncNotify: notify}
		mask := verbs.QPAttrState
		if notify {
			mask |= verbs.QPAttrEnSQDAsyncNotify
		}
		if err := a.QP.Modify(&attr, mask); err != nil {
			t.Fatal(err)
		}
	}
	toRTS := func() {
		t.Helper()
		if err := a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	write := func(id uint64, n int) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, n)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}}
	}

	// Requests in flight when the QP enters SQD: the event follows their
	// completions.
	for i := range 4 {
		rdmatest.PostSend(t, a.QP, write(uint64(i), 60000))
	}
	toSQD(true)
	ev := nextEvent(t, a.Dev)
	if ev.Type != verbs.EventSQDrained || ev.QP != a.QP {
		t.Fatalf("event %v for QP %v, want SQ_DRAINED for %d", ev.Type, ev.QP, a.QP.QPN())
	}
	if wcs := rdmatest.Poll(t, a.CQ); len(wcs) != 4 {
		t.Fatalf("%d completions when SQ_DRAINED was raised, want all 4", len(wcs))
	}

	// A request posted in SQD is queued, not started: no second event,
	// and it runs after the move back to RTS.
	rdmatest.PostSend(t, a.QP, write(10, 100))
	if evs := pendingEvents(a.Dev); len(evs) != 0 {
		t.Fatalf("events %v for a request queued in SQD", evs)
	}
	toRTS()
	if wc := rdmatest.WaitN(t, a.CQ, 1)[0]; wc.WRID != 10 || wc.Status != verbs.WCSuccess {
		t.Fatalf("queued request: %+v", wc)
	}

	// Without en_sqd_async_notify: no event, even though drained.
	toSQD(false)
	toRTS()
	// An idle QP moved to SQD with the flag drains at once.
	toSQD(true)
	if ev := nextEvent(t, a.Dev); ev.Type != verbs.EventSQDrained {
		t.Fatalf("event %v, want SQ_DRAINED", ev.Type)
	}
	if evs := pendingEvents(a.Dev); len(evs) != 0 {
		t.Fatalf("extra events %v", evs)
	}
}
