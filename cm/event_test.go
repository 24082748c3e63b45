package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// expect takes the next event of ch, which must be of type want, and
// acknowledges it.
func expect(t *testing.T, ch *EventChannel, want EventType) *Event {
	t.Helper()
	ev, err := ch.GetEvent(testkit.Context(t))
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
	}
	if err := ev.Ack(); err != nil {
		t.Fatal(err)
	}
	return ev
}

// listenOn makes a listening ID on ch bound to h's address.
func listenOn(t *testing.T, ch *EventChannel, h *host, ps PortSpace, context any) *ID {
	t.Helper()
	l, err := ch.CreateID(context, ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.BindAddr(netip.AddrPortFrom(h.addr(), 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	return l
}

// resolved makes an ID on ch resolved from h to dst, its route too.
func resolved(t *testing.T, ch *EventChannel, h *host, ps PortSpace, dst netip.AddrPort) *ID {
	t.Helper()
	id, err := ch.CreateID(nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(h.addr(), 0), dst, time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, EventAddrResolved)
	if id.Device() != h.dev {
		t.Fatalf("resolved to %v", id.Device())
	}
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, EventRouteResolved)
	return id
}

// moveQP moves qp to s with the ID's attributes.
func moveQP(t *testing.T, id *ID, qp *verbs.QP, s verbs.QPState) {
	t.Helper()
	attr, mask, err := id.InitQPAttr(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&attr, mask); err != nil {
		t.Fatalf("to %v: %v", s, err)
	}
}

// TestEventActiveReject: the active side refuses the REP after
// EventConnectResponse; the passive side gets EventRejected with the
// reason and private data, its QP in ERR.
func TestEventActiveReject(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	cha, chb := NewEventChannel(), NewEventChannel()
	defer cha.Close()
	defer chb.Close()
	l := listenOn(t, chb, b, PortSpaceTCP, nil)
	defer l.Destroy()
	ida := resolved(t, cha, a, PortSpaceTCP, l.LocalAddr())
	defer ida.Destroy()
	if err := ida.Connect(&ConnParam{QPNum: 0x1234}); err != nil {
		t.Fatal(err)
	}
	idb := expect(t, chb, EventConnectRequest).ID
	defer idb.Destroy()
	qb, err := idb.CreateQP(b.pd, verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer idb.DestroyQP()
	if err := idb.Accept(nil); err != nil {
		t.Fatal(err)
	}
	expect(t, cha, EventConnectResponse)
	if err := ida.Reject([]byte("changed my mind")); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, chb, EventRejected)
	var rej *RejectError
	if ev.Status != int(RejectConsumer) || !errors.As(ev.Err, &rej) || !bytes.HasPrefix(ev.Conn.PrivateData, []byte("changed my mind")) {
		t.Fatalf("rejection: status %d, %v, %q", ev.Status, ev.Err, ev.Conn.PrivateData)
	}
	if qb.State() != verbs.QPStateErr {
		t.Errorf("passive QP %v", qb.State())
	}
}

// TestEventStatuses: the errno statuses of failures, for C code.
func TestEventStatuses(t *testing.T) {
	checkLeaks(t)
	a := newHost(t, 1)
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, PortSpaceTCP)
	defer id.Destroy()
	if err := id.ResolveAddr(netip.AddrPortFrom(a.dev.Addr(), 0), netip.MustParseAddrPort("192.0.2.7:1"), time.Second); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, ch, EventAddrError)
	if ev.Status != -int(syscall.ENETUNREACH) || !errors.Is(ev.Err, ErrNoRoute) {
		t.Errorf("ADDR_ERROR status %d, %v", ev.Status, ev.Err)
	}
	// Still bound: a reachable address resolves.
	if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(testkit.Addr(98), 1), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, EventAddrResolved)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, EventRouteResolved)
	if err := id.SetCMTimeouts(8, 1); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(&ConnParam{QPNum: 0x55}); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, ch, EventUnreachable)
	if ev.Status != -int(syscall.ETIMEDOUT) || !errors.Is(ev.Err, ErrTimeout) {
		t.Errorf("UNREACHABLE status %d, %v", ev.Status, ev.Err)
	}
	if ev.Type.String() != "UNREACHABLE" {
		t.Error("no name")
	}
}

// TestDestroyWaitsForAck: Destroy returns once the events GetEvent
// handed out are acknowledged, as rdma_destroy_id.
func TestDestroyWaitsForAck(t *testing.T) {
	checkLeaks(t)
	a := newHost(t, 1)
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, PortSpaceTCP)
	if err := id.ResolveAddr(netip.AddrPortFrom(a.dev.Addr(), 0), netip.AddrPortFrom(a.dev.Addr(), 9), time.Second); err != nil {
		t.Fatal(err)
	}
	ev, err := ch.GetEvent(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	destroyed := make(chan struct{})
	go func() {
		_ = id.Destroy()
		close(destroyed)
	}()
	select {
	case <-destroyed:
		t.Fatal("Destroy returned with an event unacknowledged")
	case <-time.After(50 * time.Millisecond):
	}
	if err := ch.Close(); !errors.Is(err, verbs.ErrBusy) && err != nil {
		t.Errorf("Close with an ID being destroyed: %v", err)
	}
	if err := ev.Ack(); err != nil {
		t.Fatal(err)
	}
	<-destroyed
	if err := ev.Ack(); err == nil {
		t.Error("a second Ack succeeded")
	}
}
