package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestAsyncEventTypeValues pins the values and names of enum
// ibv_event_type.
func TestAsyncEventTypeValues(t *testing.T) {
	for _, c := range []struct {
		typ  verbs.AsyncEventType
		val  int
		name string
	}{
		{verbs.EventCQErr, 0, "CQ_ERR"},
		{verbs.EventQPFatal, 1, "QP_FATAL"},
		{verbs.EventQPReqErr, 2, "QP_REQ_ERR"},
		{verbs.EventQPAccessErr, 3, "QP_ACCESS_ERR"},
		{verbs.EventCommEst, 4, "COMM_EST"},
		{verbs.EventSQDrained, 5, "SQ_DRAINED"},
		{verbs.EventPathMig, 6, "PATH_MIG"},
		{verbs.EventPathMigErr, 7, "PATH_MIG_ERR"},
		{verbs.EventDeviceFatal, 8, "DEVICE_FATAL"},
		{verbs.EventPortActive, 9, "PORT_ACTIVE"},
		{verbs.EventPortErr, 10, "PORT_ERR"},
		{verbs.EventLIDChange, 11, "LID_CHANGE"},
		{verbs.EventPKeyChange, 12, "PKEY_CHANGE"},
		{verbs.EventSMChange, 13, "SM_CHANGE"},
		{verbs.EventSRQErr, 14, "SRQ_ERR"},
		{verbs.EventSRQLimitReached, 15, "SRQ_LIMIT_REACHED"},
		{verbs.EventQPLastWQEReached, 16, "QP_LAST_WQE_REACHED"},
		{verbs.EventClientReregister, 17, "CLIENT_REREGISTER"},
		{verbs.EventGIDChange, 18, "GID_CHANGE"},
		{verbs.EventWQFatal, 19, "WQ_FATAL"},
		{verbs.AsyncEventType(20), 20, "EVENT(20)"},
		{verbs.AsyncEventType(-1), -1, "EVENT(-1)"},
	} {
		if int(c.typ) != c.val || c.typ.String() != c.name {
			t.Errorf("%v = %d, want %s = %d", c.typ, int(c.typ), c.name, c.val)
		}
	}
}

// nextEvent waits up to 10 s for the device's next asynchronous event.
func nextEvent(t testing.TB, d *verbs.Device) verbs.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := d.GetAsyncEvent(ctx)
	if err != nil {
		t.Fatalf("GetAsyncEvent: %v", err)
	}
	return ev
}

// pendingEvents returns the events queued on d, without waiting.
func pendingEvents(d *verbs.Device) []verbs.AsyncEvent {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var evs []verbs.AsyncEvent
	for {
		ev, err := d.GetAsyncEvent(ctx)
		if err != nil {
			return evs
		}
		evs = append(evs, ev)
	}
}

func TestGetAsyncEventWaits(t *testing.T) {
	d := newDevice(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.GetAsyncEvent(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetAsyncEvent with no event and a done context: %v", err)
	}

	// A waiter is woken by an event raised later, and another by Close.
	cq := rdmatest.CQ(t, d, 1)
	got := make(chan verbs.AsyncEvent)
	go func() {
		ev, _ := d.GetAsyncEvent(context.Background())
		got <- ev
	}()
	cq.Push(wcWithID(1), false)
	cq.Push(wcWithID(2), false) // overruns
	if ev := <-got; ev.Type != verbs.EventCQErr || ev.CQ != cq {
		t.Fatalf("event %+v, want CQ_ERR for the CQ", ev)
	}
	errc := make(chan error)
	go func() {
		_, err := d.GetAsyncEvent(context.Background())
		errc <- err
	}()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("GetAsyncEvent blocked across Close: %v, want ErrClosed", err)
	}
	if _, err := d.GetAsyncEvent(context.Background()); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("GetAsyncEvent after Close: %v, want ErrClosed", err)
	}
}

// TestAsyncEventQueueBounded: a program that never reads its events loses
// the newest beyond the queue's capacity, counted, and raising them never
// blocks.
func TestAsyncEventQueueBounded(t *testing.T) {
	d := newDevice(t)
	const extra = 10
	cqs := make([]*verbs.CQ, verbs.AsyncQueueLen+extra)
	for i := range cqs {
		cqs[i] = rdmatest.CQ(t, d, 1)
		cqs[i].Push(wcWithID(1), false)
		cqs[i].Push(wcWithID(2), false)
		cqs[i].Push(wcWithID(3), false) // the CQ is in error already: no second event
	}
	if n := d.AsyncEventsDropped(); n != extra {
		t.Fatalf("%d events dropped, want %d", n, extra)
	}
	evs := pendingEvents(d)
	if len(evs) != verbs.AsyncQueueLen {
		t.Fatalf("%d events queued, want %d", len(evs), verbs.AsyncQueueLen)
	}
	for i, ev := range evs {
		if ev.Type != verbs.EventCQErr || ev.CQ != cqs[i] {
			t.Fatalf("event %d is %v for another CQ: not in the order raised", i, ev.Type)
		}
	}
}

// TestCQOverrunState: a CQ that overran accepts no completion any more,
// even once polled empty, and keeps those it held.
func TestCQOverrunState(t *testing.T) {
	d := newDevice(t)
	cq := rdmatest.CQ(t, d, 2)
	for i := range uint64(3) {
		cq.Push(wcWithID(i), false)
	}
	buf := make([]verbs.WorkCompletion, 4)
	if n, err := cq.Poll(buf); n != 2 || err != nil || buf[0].WRID != 0 || buf[1].WRID != 1 {
		t.Fatalf("Poll after the overrun = %d %v, %v; want the 2 completions accepted", n, buf[:n], err)
	}
	if !cq.Push(wcWithID(7), false) {
		t.Fatal("an empty CQ in error accepted a completion")
	}
	if n, _ := cq.Poll(buf); n != 0 {
		t.Fatalf("Poll = %d, want 0", n)
	}
	if cq.OverrunCount() != 2 {
		t.Fatalf("%d overruns counted, want 2", cq.OverrunCount())
	}
	evs := pendingEvents(d)
	if len(evs) != 1 || evs[0].Type != verbs.EventCQErr || evs[0].CQ != cq {
		t.Fatalf("events %+v, want one CQ_ERR", evs)
	}
}

// TestE2ECQOverrun: a receive CQ too small for what arrives overruns. The
// device raises CQ_ERR for it and QP_FATAL for the QP whose completion it
// refused, which moves to ERR; the completions accepted before stay
// pollable; the flush completions of the QP's other receives are refused
// too, so those work requests never complete (the documented loss); the
// requester is not affected.
func TestE2ECQOverrun(t *testing.T) {
	rdmatest.SkipOnHardware(t, "it checks goroce's overrun semantics (see CQ): rxe did not move the receiving QP to ERR within the test's wait")
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	if err := b.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	small := rdmatest.CQ(t, b.Dev, 2)
	var err error
	b.QP, err = b.PD.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: small,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	for i := range 5 {
		rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: uint64(100 + i), SGList: []verbs.SGE{b.MR.SGE(recvOff+i*64, 64)}})
	}
	for i := range 3 {
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	}
	// The third SEND was placed and acknowledged before its completion
	// was refused: the requester sees all three succeed.
	for i, wc := range rdmatest.WaitN(t, a.CQ, 3) {
		if wc.WRID != uint64(i) || wc.Status != verbs.WCSuccess {
			t.Fatalf("send %d completed %+v", i, wc)
		}
	}
	testkit.WaitFor(t, "receiver in ERR", func() bool { return b.QP.State() == verbs.QPStateErr })
	evs := []verbs.AsyncEvent{nextEvent(t, b.Dev), nextEvent(t, b.Dev)}
	if evs[0].Type != verbs.EventCQErr || evs[0].CQ != small || evs[1].Type != verbs.EventQPFatal || evs[1].QP != b.QP {
		t.Fatalf("events %v %v, want CQ_ERR for the CQ then QP_FATAL for the QP", evs[0].Type, evs[1].Type)
	}
	wcs := rdmatest.Poll(t, small)
	if len(wcs) != 2 || wcs[0].WRID != 100 || wcs[1].WRID != 101 || wcs[0].Status != verbs.WCSuccess || wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("receive CQ holds %+v, want receives 100 and 101", wcs)
	}
	// Receive 102 (its message), 103 and 104 (flushes) were refused.
	if c := b.QP.Counters(); c.CQOverruns != 3 {
		t.Fatalf("%d completions refused, want 3", c.CQOverruns)
	}
	// A CQ in error stays so: a receive posted to the failed QP flushes
	// into it and is refused as well.
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 200})
	rdmatest.ExpectEmpty(t, small)
	if extra := pendingEvents(b.Dev); len(extra) != 0 {
		t.Fatalf("more events: %+v", extra)
	}
	if len(pendingEvents(a.Dev)) != 0 || a.QP.State() != verbs.QPStateRTS {
		t.Fatalf("requester affected: %v", a.QP.State())
	}
}

// TestE2EResponderErrorEvents: a responder error that no receive work
// request carries is an affiliated asynchronous error of the responder's
// QP (IBTA C9-222.1.1): QP_ACCESS_ERR for a remote access violation,
// QP_REQ_ERR for an invalid request. One charged to a receive is reported
// by its completion alone; the requester learns of the failure from its
// completion, not from an event.
func TestE2EResponderErrorEvents(t *testing.T) {
	rdmatest.SkipOnHardware(t, "it checks goroce's refusal details (AsyncEvent.Refusal) and statuses where rxe's differ (REM_OP_ERR for a SEND longer than the receive)")
	cases := []struct {
		name  string
		wr    func(a, b *rdmatest.End) verbs.SendWR
		want  verbs.WCStatus
		event []verbs.AsyncEventType
	}{
		{"remote access", func(a, b *rdmatest.End) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey() ^ 0x40}}
		}, verbs.WCRemAccessErr, []verbs.AsyncEventType{verbs.EventQPAccessErr}},
		{"invalid request", func(a, b *rdmatest.End) verbs.SendWR {
			return fetchAdd(a, b.MR.IOVA()+dstOff+4, b.MR.RKey())
		}, verbs.WCRemInvReqErr, []verbs.AsyncEventType{verbs.EventQPReqErr}},
		{"charged to a receive", func(a, b *rdmatest.End) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 100)}}
		}, verbs.WCRemInvReqErr, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
			rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(recvOff, 64)}})
			wr := c.wr(a, b)
			wr.WRID, wr.SendFlags = 1, verbs.SendSignaled
			rdmatest.PostSend(t, a.QP, wr)
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != c.want {
				t.Fatalf("requester completion %+v, want %v", wc, c.want)
			}
			testkit.WaitFor(t, "responder in ERR", func() bool { return b.QP.State() == verbs.QPStateErr })
			evs := pendingEvents(b.Dev)
			if len(evs) != len(c.event) {
				t.Fatalf("responder events %+v, want %v", evs, c.event)
			}
			for i, ev := range evs {
				if ev.Type != c.event[i] || ev.QP != b.QP {
					t.Fatalf("responder event %v for %p, want %v for its QP", ev.Type, ev.QP, c.event[i])
				}
			}
			if evs := pendingEvents(a.Dev); len(evs) != 0 {
				t.Fatalf("requester events %+v, want none", evs)
			}
		})
	}
}

// TestSRQEvents: an armed SRQ falling below its limit raises
// SRQ_LIMIT_REACHED once per arming; a QP attached to an SRQ raises
// QP_LAST_WQE_REACHED when it enters ERR, whether Modify or an error
// moves it there.
func TestSRQEvents(t *testing.T) {
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	if err := b.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	srq, err := b.PD.CreateSRQ(verbs.SRQInitAttr{MaxWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	b.QP, err = b.PD.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.CQ, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	for i := range 4 {
		mustPostSRQ(t, srq, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(recvOff+64*i, 64)}})
	}
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
		rdmatest.WaitOne(t, a.CQ)
	}
	// 3 left after the first message, below 3 after the second: one event.
	if ev := nextEvent(t, b.Dev); ev.Type != verbs.EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("event %+v, want SRQ_LIMIT_REACHED", ev)
	}
	if evs := pendingEvents(b.Dev); len(evs) != 0 {
		t.Fatalf("more events %+v: the limit fires once per arming", evs)
	}

	// An error moves the QP to ERR: the access error and the last WQE.
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
		RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey() + 0x100}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("completion %+v", wc)
	}
	testkit.WaitFor(t, "responder in ERR", func() bool { return b.QP.State() == verbs.QPStateErr })
	evs := pendingEvents(b.Dev)
	if len(evs) != 2 || evs[0].Type != verbs.EventQPAccessErr || evs[1].Type != verbs.EventQPLastWQEReached || evs[1].QP != b.QP {
		t.Fatalf("events %+v, want QP_ACCESS_ERR then QP_LAST_WQE_REACHED", evs)
	}

	// Modify to ERR from RTS raises QP_LAST_WQE_REACHED alone; ERR to
	// ERR raises nothing.
	rdmatest.Modify(t, a.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	rdmatest.Modify(t, b.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	rdmatest.Modify(t, b.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateErr}, Mask: verbs.QPAttrState})
	rdmatest.Modify(t, b.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateErr}, Mask: verbs.QPAttrState})
	evs = pendingEvents(b.Dev)
	if len(evs) != 1 || evs[0].Type != verbs.EventQPLastWQEReached || evs[0].QP != b.QP {
		t.Fatalf("events %+v, want one QP_LAST_WQE_REACHED", evs)
	}
}
