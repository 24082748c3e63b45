package verbs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAsyncEventTypeValues pins the values and names of enum
// ibv_event_type.
func TestAsyncEventTypeValues(t *testing.T) {
	for _, c := range []struct {
		typ  AsyncEventType
		val  int
		name string
	}{
		{EventCQErr, 0, "CQ_ERR"},
		{EventQPFatal, 1, "QP_FATAL"},
		{EventQPReqErr, 2, "QP_REQ_ERR"},
		{EventQPAccessErr, 3, "QP_ACCESS_ERR"},
		{EventCommEst, 4, "COMM_EST"},
		{EventSQDrained, 5, "SQ_DRAINED"},
		{EventPathMig, 6, "PATH_MIG"},
		{EventPathMigErr, 7, "PATH_MIG_ERR"},
		{EventDeviceFatal, 8, "DEVICE_FATAL"},
		{EventPortActive, 9, "PORT_ACTIVE"},
		{EventPortErr, 10, "PORT_ERR"},
		{EventLIDChange, 11, "LID_CHANGE"},
		{EventPKeyChange, 12, "PKEY_CHANGE"},
		{EventSMChange, 13, "SM_CHANGE"},
		{EventSRQErr, 14, "SRQ_ERR"},
		{EventSRQLimitReached, 15, "SRQ_LIMIT_REACHED"},
		{EventQPLastWQEReached, 16, "QP_LAST_WQE_REACHED"},
		{EventClientReregister, 17, "CLIENT_REREGISTER"},
		{EventGIDChange, 18, "GID_CHANGE"},
		{EventWQFatal, 19, "WQ_FATAL"},
		{AsyncEventType(20), 20, "EVENT(20)"},
		{AsyncEventType(-1), -1, "EVENT(-1)"},
	} {
		if int(c.typ) != c.val || c.typ.String() != c.name {
			t.Errorf("%v = %d, want %s = %d", c.typ, int(c.typ), c.name, c.val)
		}
	}
}

// nextEvent waits up to 10 s for the device's next asynchronous event.
func nextEvent(t testing.TB, d *Device) AsyncEvent {
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
func pendingEvents(d *Device) []AsyncEvent {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var evs []AsyncEvent
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
	cq := mustCQ(t, d, 1)
	got := make(chan AsyncEvent)
	go func() {
		ev, _ := d.GetAsyncEvent(context.Background())
		got <- ev
	}()
	cq.push(wcWithID(1), false)
	cq.push(wcWithID(2), false) // overruns
	if ev := <-got; ev.Type != EventCQErr || ev.CQ != cq {
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
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("GetAsyncEvent blocked across Close: %v, want ErrClosed", err)
	}
	if _, err := d.GetAsyncEvent(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetAsyncEvent after Close: %v, want ErrClosed", err)
	}
}

// TestAsyncEventQueueBounded: a program that never reads its events loses
// the newest beyond the queue's capacity, counted, and raising them never
// blocks.
func TestAsyncEventQueueBounded(t *testing.T) {
	d := newDevice(t)
	const extra = 10
	cqs := make([]*CQ, asyncQueueLen+extra)
	for i := range cqs {
		cqs[i] = mustCQ(t, d, 1)
		cqs[i].push(wcWithID(1), false)
		cqs[i].push(wcWithID(2), false)
		cqs[i].push(wcWithID(3), false) // the CQ is in error already: no second event
	}
	if n := d.AsyncEventsDropped(); n != extra {
		t.Fatalf("%d events dropped, want %d", n, extra)
	}
	evs := pendingEvents(d)
	if len(evs) != asyncQueueLen {
		t.Fatalf("%d events queued, want %d", len(evs), asyncQueueLen)
	}
	for i, ev := range evs {
		if ev.Type != EventCQErr || ev.CQ != cqs[i] {
			t.Fatalf("event %d is %v for another CQ: not in the order raised", i, ev.Type)
		}
	}
}

// TestCQOverrunState: a CQ that overran accepts no completion any more,
// even once polled empty, and keeps those it held.
func TestCQOverrunState(t *testing.T) {
	d := newDevice(t)
	cq := mustCQ(t, d, 2)
	for i := range uint64(3) {
		cq.push(wcWithID(i), false)
	}
	buf := make([]WorkCompletion, 4)
	if n, err := cq.Poll(buf); n != 2 || err != nil || buf[0].WRID != 0 || buf[1].WRID != 1 {
		t.Fatalf("Poll after the overrun = %d %v, %v; want the 2 completions accepted", n, buf[:n], err)
	}
	if !cq.push(wcWithID(7), false) {
		t.Fatal("an empty CQ in error accepted a completion")
	}
	if n, _ := cq.Poll(buf); n != 0 {
		t.Fatalf("Poll = %d, want 0", n)
	}
	if cq.overrunCount() != 2 {
		t.Fatalf("%d overruns counted, want 2", cq.overrunCount())
	}
	evs := pendingEvents(d)
	if len(evs) != 1 || evs[0].Type != EventCQErr || evs[0].CQ != cq {
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
	a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
	if err := b.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	small := mustCQ(t, b.dev, 2)
	var err error
	b.qp, err = b.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: b.cq, RecvCQ: small,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, defaultLink(), defaultLink())
	for i := range 5 {
		mustPostRecv(t, b.qp, RecvWR{WRID: uint64(100 + i), SGList: []SGE{b.mr.SGE(recvOff+i*64, 64)}})
	}
	for i := range 3 {
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 8)}})
	}
	// The third SEND was placed and acknowledged before its completion
	// was refused: the requester sees all three succeed.
	for i, wc := range waitN(t, a.cq, 3) {
		if wc.WRID != uint64(i) || wc.Status != WCSuccess {
			t.Fatalf("send %d completed %+v", i, wc)
		}
	}
	waitFor(t, "receiver in ERR", func() bool { return b.qp.State() == QPStateErr })
	evs := []AsyncEvent{nextEvent(t, b.dev), nextEvent(t, b.dev)}
	if evs[0].Type != EventCQErr || evs[0].CQ != small || evs[1].Type != EventQPFatal || evs[1].QP != b.qp {
		t.Fatalf("events %v %v, want CQ_ERR for the CQ then QP_FATAL for the QP", evs[0].Type, evs[1].Type)
	}
	wcs := pollAll(t, small)
	if len(wcs) != 2 || wcs[0].WRID != 100 || wcs[1].WRID != 101 || wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
		t.Fatalf("receive CQ holds %+v, want receives 100 and 101", wcs)
	}
	// Receive 102 (its message), 103 and 104 (flushes) were refused.
	if c := b.qp.Counters(); c.CQOverruns != 3 {
		t.Fatalf("%d completions refused, want 3", c.CQOverruns)
	}
	// A CQ in error stays so: a receive posted to the failed QP flushes
	// into it and is refused as well.
	mustPostRecv(t, b.qp, RecvWR{WRID: 200})
	expectEmpty(t, small)
	if extra := pendingEvents(b.dev); len(extra) != 0 {
		t.Fatalf("more events: %+v", extra)
	}
	if len(pendingEvents(a.dev)) != 0 || a.qp.State() != QPStateRTS {
		t.Fatalf("requester affected: %v", a.qp.State())
	}
}

// TestE2EResponderErrorEvents: a responder error that no receive work
// request carries is an affiliated asynchronous error of the responder's
// QP (IBTA C9-222.1.1): QP_ACCESS_ERR for a remote access violation,
// QP_REQ_ERR for an invalid request. One charged to a receive is reported
// by its completion alone; the requester learns of the failure from its
// completion, not from an event.
func TestE2EResponderErrorEvents(t *testing.T) {
	cases := []struct {
		name  string
		wr    func(a, b *rcEnd) SendWR
		want  WCStatus
		event []AsyncEventType
	}{
		{"remote access", func(a, b *rcEnd) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 8)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x40}}
		}, WCRemAccessErr, []AsyncEventType{EventQPAccessErr}},
		{"invalid request", func(a, b *rcEnd) SendWR {
			return fetchAdd(a, b.mr.IOVA()+dstOff+4, b.mr.RKey())
		}, WCRemInvReqErr, []AsyncEventType{EventQPReqErr}},
		{"charged to a receive", func(a, b *rcEnd) SendWR {
			return SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 100)}}
		}, WCRemInvReqErr, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, endOpts{}, endOpts{})
			mustPostRecv(t, b.qp, RecvWR{WRID: 9, SGList: []SGE{b.mr.SGE(recvOff, 64)}})
			wr := c.wr(a, b)
			wr.WRID, wr.SendFlags = 1, SendSignaled
			mustPostSend(t, a.qp, wr)
			if wc := waitWC(t, a.cq); wc.Status != c.want {
				t.Fatalf("requester completion %+v, want %v", wc, c.want)
			}
			waitFor(t, "responder in ERR", func() bool { return b.qp.State() == QPStateErr })
			evs := pendingEvents(b.dev)
			if len(evs) != len(c.event) {
				t.Fatalf("responder events %+v, want %v", evs, c.event)
			}
			for i, ev := range evs {
				if ev.Type != c.event[i] || ev.QP != b.qp {
					t.Fatalf("responder event %v for %p, want %v for its QP", ev.Type, ev.QP, c.event[i])
				}
			}
			if evs := pendingEvents(a.dev); len(evs) != 0 {
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
	a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
	if err := b.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	srq, err := b.pd.CreateSRQ(SRQInitAttr{MaxWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	b.qp, err = b.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, defaultLink(), defaultLink())
	for i := range 4 {
		mustPostSRQ(t, srq, RecvWR{WRID: uint64(i), SGList: []SGE{b.mr.SGE(recvOff+64*i, 64)}})
	}
	if err := srq.Modify(SRQAttr{SRQLimit: 3}, SRQLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 8)}})
		waitWC(t, a.cq)
	}
	// 3 left after the first message, below 3 after the second: one event.
	if ev := nextEvent(t, b.dev); ev.Type != EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("event %+v, want SRQ_LIMIT_REACHED", ev)
	}
	if evs := pendingEvents(b.dev); len(evs) != 0 {
		t.Fatalf("more events %+v: the limit fires once per arming", evs)
	}

	// An error moves the QP to ERR: the access error and the last WQE.
	mustPostSend(t, a.qp, SendWR{WRID: 9, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() + 0x100}})
	if wc := waitWC(t, a.cq); wc.Status != WCRemAccessErr {
		t.Fatalf("completion %+v", wc)
	}
	waitFor(t, "responder in ERR", func() bool { return b.qp.State() == QPStateErr })
	evs := pendingEvents(b.dev)
	if len(evs) != 2 || evs[0].Type != EventQPAccessErr || evs[1].Type != EventQPLastWQEReached || evs[1].QP != b.qp {
		t.Fatalf("events %+v, want QP_ACCESS_ERR then QP_LAST_WQE_REACHED", evs)
	}

	// Modify to ERR from RTS raises QP_LAST_WQE_REACHED alone; ERR to
	// ERR raises nothing.
	mustModify(t, a.qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
	mustModify(t, b.qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
	connect(t, a, b, defaultLink(), defaultLink())
	mustModify(t, b.qp, step{QPAttr{QPState: QPStateErr}, QPAttrState})
	mustModify(t, b.qp, step{QPAttr{QPState: QPStateErr}, QPAttrState})
	evs = pendingEvents(b.dev)
	if len(evs) != 1 || evs[0].Type != EventQPLastWQEReached || evs[0].QP != b.qp {
		t.Fatalf("events %+v, want one QP_LAST_WQE_REACHED", evs)
	}
}
