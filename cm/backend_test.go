package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The TestBackend tests run the event API (IDs on event channels) on both
// kinds of device: "goroce" on two goroce devices of the process, "kernel"
// on a kernel RDMA device through librdmacm, both ends on the device of
// GOROCE_RDMACM_ADDR (test/hw/run.sh runs them in the rxe VM). The
// checks are those both must pass; what only goroce's CM does (its
// timers, its path values) is in event_test.go.

// kernelHosts returns two hosts on the kernel device of
// GOROCE_RDMACM_ADDR, skipping the test without one; nil in a build
// without librdmacm (hw_id_test.go sets it).
var kernelHosts func(t *testing.T) (a, b *host)

// forBackends runs f as the subtests "goroce" and "kernel".
func forBackends(t *testing.T, f func(t *testing.T, a, b *host, kernel bool)) {
	t.Run("goroce", func(t *testing.T) {
		checkLeaks(t)
		f(t, newHost(t, 1), newHost(t, 2), false)
	})
	t.Run("kernel", func(t *testing.T) {
		if kernelHosts == nil {
			t.Skip("a kernel RDMA device needs a build with -tags goroce_ibverbs (test/hw/run.sh)")
		}
		a, b := kernelHosts(t)
		f(t, a, b, true)
	})
}

// backendIDs makes what most TestBackend tests start from: an event
// channel for each host, a listener of port space ps on b (its context
// lctx), and an ID of a resolved to it, its route too. The test's
// cleanup destroys the IDs, then closes the channels.
func backendIDs(t *testing.T, a, b *host, ps PortSpace, lctx any) (cha, chb *EventChannel, l, ida *ID) {
	t.Helper()
	cha, chb = NewEventChannel(), NewEventChannel()
	t.Cleanup(func() {
		_ = cha.Close()
		_ = chb.Close()
	})
	l = listenOn(t, chb, b, ps, lctx)
	t.Cleanup(func() { _ = l.Destroy() })
	ida = resolved(t, cha, a, ps, l.LocalAddr())
	t.Cleanup(func() { _ = ida.Destroy() })
	return cha, chb, l, ida
}

// smallQP creates a QP of the ID's port space on h through the ID.
func smallQP(t *testing.T, id *ID, h *host) *verbs.QP {
	t.Helper()
	qp, err := id.CreateQP(h.pd, verbs.QPInitAttr{SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestBackendEventFlow: resolve, connect with private data, the request,
// accept, established on both sides, a SEND and a WRITE, disconnect from
// the active side, destroy; the QPs are the IDs' (CreateQP). On goroce
// devices also what only goroce's CM chooses: the path MTU, the ACK
// timeout, the QP's rights, the flow label, TIMEWAIT_EXIT.
func TestBackendEventFlow(t *testing.T) {
	forBackends(t, func(t *testing.T, a, b *host, kernel bool) {
		cha, chb, l, ida := backendIDs(t, a, b, PortSpaceTCP, "the listener's")
		if l.LocalAddr().Addr() != b.addr() || l.LocalAddr().Port() == 0 {
			t.Fatalf("listener bound to %v", l.LocalAddr())
		}
		r, ok := ida.Route()
		if !ok || r.HopLimit != 64 || r.DGID != verbs.GIDFromAddr(b.addr()) || !kernel && r.PathMTU != verbs.MTU4096 {
			t.Errorf("route %+v, %v", r, ok)
		}
		qa := smallQP(t, ida, a)
		if qa.Type() != verbs.QPTypeRC || qa.State() != verbs.QPStateInit {
			t.Fatalf("CreateQP: %v in %v", qa.Type(), qa.State())
		}
		if err := ida.Connect(&ConnParam{PrivateData: []byte("hello"), ResponderResources: 2, InitiatorDepth: 3,
			RetryCount: 6, RNRRetryCount: 5}); err != nil {
			t.Fatal(err)
		}
		req := expect(t, chb, EventConnectRequest)
		idb := req.ID
		if req.Listen != l || idb.Context() != "the listener's" || !bytes.HasPrefix(req.Conn.PrivateData, []byte("hello")) ||
			req.Conn.QPNum != qa.QPN() || req.Conn.ResponderResources != 3 || req.Conn.InitiatorDepth != 2 ||
			req.Conn.RetryCount != 6 || req.Conn.RNRRetryCount != 5 ||
			!kernel && len(req.Conn.PrivateData) != MaxConnectPrivateData {
			t.Fatalf("connect request %+v", req.Conn)
		}
		if idb.PeerAddr() != ida.LocalAddr() || idb.LocalAddr() != l.LocalAddr() || ida.PeerAddr() != l.LocalAddr() {
			t.Errorf("request %v → %v; active %v → %v, listener %v", idb.PeerAddr(), idb.LocalAddr(),
				ida.LocalAddr(), ida.PeerAddr(), l.LocalAddr())
		}
		if idb.Device() != b.dev {
			t.Errorf("the request's device is not the listener's")
		}
		qb := smallQP(t, idb, b)
		if err := idb.Accept(&ConnParam{PrivateData: []byte("welcome"), ResponderResources: MaxResponderResources,
			InitiatorDepth: MaxInitiatorDepth, RNRRetryCount: 4}); err != nil {
			t.Fatal(err)
		}
		if qb.State() != verbs.QPStateRTS {
			t.Fatalf("passive QP after Accept: %v", qb.State())
		}
		est := expect(t, cha, EventEstablished)
		if !bytes.HasPrefix(est.Conn.PrivateData, []byte("welcome")) || est.Conn.QPNum != qb.QPN() || est.Conn.RNRRetryCount != 4 ||
			est.Conn.ResponderResources != 2 || est.Conn.InitiatorDepth != 3 {
			t.Fatalf("established %+v", est.Conn)
		}
		expect(t, chb, EventEstablished)
		attrA, _, _ := qa.Query(0)
		attrB, _, _ := qb.Query(0)
		if attrA.DestQPNum != qb.QPN() || attrB.DestQPNum != qa.QPN() || attrA.SQPSN != attrB.RQPSN || attrB.SQPSN != attrA.RQPSN ||
			attrA.RetryCnt != 6 || attrB.RetryCnt != 6 || attrA.RNRRetry != 4 || attrB.RNRRetry != 5 ||
			attrA.MinRNRTimer != DefaultMinRNRTimer || attrB.MinRNRTimer != DefaultMinRNRTimer ||
			attrA.MaxDestRdAtomic != 2 || attrB.MaxRdAtomic != 2 || attrA.MaxRdAtomic != 3 || attrB.MaxDestRdAtomic != 3 {
			t.Errorf("QP attributes:\n a %+v\n b %+v", attrA, attrB)
		}
		// What goroce's CM chooses where the kernel's has its own: the
		// ACK timeout, the rights, the flow label from both ports.
		if !kernel && (attrA.Timeout != 17 || attrB.Timeout != 17 || attrA.PathMTU != verbs.MTU4096 ||
			attrA.QPAccessFlags != verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic ||
			attrA.AHAttr.FlowLabel == 0 || attrA.AHAttr.FlowLabel != attrB.AHAttr.FlowLabel) {
			t.Errorf("goroce's QP attributes:\n a %+v\n b %+v", attrA, attrB)
		}

		// A SEND from a, a WRITE from b.
		rdmatest.PostRecv(t, qb, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 64)}})
		copy(a.buf[100:], "ping")
		rdmatest.PostSend(t, qa, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(100, 4)}})
		if wc := rdmatest.WaitOne(t, a.cq); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
			t.Fatalf("SEND: %+v", wc)
		}
		if wc := rdmatest.WaitOne(t, b.cq); wc.Status != verbs.WCSuccess || wc.ByteLen != 4 || string(b.buf[:4]) != "ping" {
			t.Fatalf("receive: %+v %q", wc, b.buf[:4])
		}
		copy(b.buf[200:], "pong")
		rdmatest.PostSend(t, qb, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{b.mr.SGE(200, 4)}, RDMA: verbs.RDMAParams{RemoteAddr: a.mr.IOVA() + 300, RKey: a.mr.RKey()}})
		if wc := rdmatest.WaitOne(t, b.cq); wc.Status != verbs.WCSuccess || string(a.buf[300:304]) != "pong" {
			t.Fatalf("WRITE: %+v %q", wc, a.buf[300:304])
		}

		if err := ida.Disconnect(); err != nil {
			t.Fatal(err)
		}
		expect(t, chb, EventDisconnected)
		if err := idb.Disconnect(); err != nil {
			t.Fatal(err)
		}
		expect(t, cha, EventDisconnected)
		if !kernel {
			expect(t, cha, EventTimewaitExit)
			expect(t, chb, EventTimewaitExit)
		}
		if qa.State() != verbs.QPStateErr || qb.State() != verbs.QPStateErr {
			t.Errorf("QP states after disconnect: %v %v", qa.State(), qb.State())
		}
		for _, id := range []*ID{ida, idb} {
			if err := id.DestroyQP(); err != nil {
				t.Error(err)
			}
			if err := id.Destroy(); err != nil {
				t.Error(err)
			}
		}
		// The QPs CreateQP made are gone with DestroyQP.
		for _, qp := range []*verbs.QP{qa, qb} {
			if _, _, err := qp.Query(0); !errors.Is(err, verbs.ErrClosed) {
				t.Errorf("QP %#x after DestroyQP: %v", qp.QPN(), err)
			}
		}
		if err := l.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := l.Destroy(); !errors.Is(err, ErrClosed) {
			t.Errorf("second Destroy: %v", err)
		}
		if err := ida.Connect(nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Connect on a destroyed ID: %v", err)
		}
	})
}

// TestBackendNoQP: IDs without QPs, whose application moves them with
// InitQPAttr: EventConnectResponse, Establish, the passive side
// established by the RTU; then a WRITE each way.
func TestBackendNoQP(t *testing.T) {
	forBackends(t, func(t *testing.T, a, b *host, kernel bool) {
		cha, chb, _, ida := backendIDs(t, a, b, PortSpaceTCP, nil)
		qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
		defer qa.Destroy()
		defer qb.Destroy()
		if _, _, err := ida.InitQPAttr(verbs.QPStateRTR); !errors.Is(err, verbs.ErrInvalidState) {
			t.Errorf("RTR attributes before the REP: %v", err)
		}
		moveQP(t, ida, qa, verbs.QPStateInit)
		if err := ida.Connect(&ConnParam{QPNum: qa.QPN(), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		req := expect(t, chb, EventConnectRequest)
		idb := req.ID
		defer idb.Destroy()
		for _, s := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
			moveQP(t, idb, qb, s)
		}
		if err := idb.Accept(&ConnParam{QPNum: qb.QPN(), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		resp := expect(t, cha, EventConnectResponse)
		if resp.Conn.QPNum != qb.QPN() {
			t.Fatalf("response %+v", resp.Conn)
		}
		for _, s := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
			moveQP(t, ida, qa, s)
		}
		if err := ida.Establish(); err != nil {
			t.Fatal(err)
		}
		expect(t, chb, EventEstablished)
		if _, ok := cha.TryGetEvent(); ok {
			t.Error("an event after Establish")
		}
		for _, w := range []struct {
			from, to *host
			qp       *verbs.QP
		}{{b, a, qb}, {a, b, qa}} {
			copy(w.from.buf[400:], "data")
			rdmatest.PostSend(t, w.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{w.from.mr.SGE(400, 4)}, RDMA: verbs.RDMAParams{RemoteAddr: w.to.mr.IOVA() + 500, RKey: w.to.mr.RKey()}})
			if wc := rdmatest.WaitOne(t, w.from.cq); wc.Status != verbs.WCSuccess || string(w.to.buf[500:504]) != "data" {
				t.Fatalf("WRITE: %+v", wc)
			}
		}
	})
}

// TestBackendReject: the passive side refuses with private data; the
// active side gets EventRejected with the consumer's reason and the data,
// its QP in ERR. Then a connection to a port nobody listens on is
// rejected with the invalid service ID reason (ErrNoListener).
func TestBackendReject(t *testing.T) {
	forBackends(t, func(t *testing.T, a, b *host, kernel bool) {
		cha, chb, _, ida := backendIDs(t, a, b, PortSpaceTCP, nil)
		qa := smallQP(t, ida, a)
		defer ida.DestroyQP()
		if err := ida.Connect(nil); err != nil {
			t.Fatal(err)
		}
		idb := expect(t, chb, EventConnectRequest).ID
		defer idb.Destroy()
		if err := idb.Reject(make([]byte, MaxRejectPrivateData+1)); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("Reject with too much private data: %v", err)
		}
		if err := idb.Reject([]byte("not today")); err != nil {
			t.Fatal(err)
		}
		ev := expect(t, cha, EventRejected)
		var rej *RejectError
		if ev.Status != int(RejectConsumer) || !errors.As(ev.Err, &rej) || !bytes.HasPrefix(ev.Conn.PrivateData, []byte("not today")) {
			t.Fatalf("rejection: status %d, %v, %q", ev.Status, ev.Err, ev.Conn.PrivateData)
		}
		if qa.State() != verbs.QPStateErr {
			t.Errorf("active QP after the REJ: %v", qa.State())
		}

		// Nobody listens on the listener's port + 1... unless somebody
		// does: take a port that was just free.
		free, err := chb.CreateID(nil, PortSpaceTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := free.BindAddr(netip.AddrPortFrom(b.addr(), 0)); err != nil {
			t.Fatal(err)
		}
		port := free.LocalAddr().Port()
		if err := free.Destroy(); err != nil {
			t.Fatal(err)
		}
		idc := resolved(t, cha, a, PortSpaceTCP, netip.AddrPortFrom(b.addr(), port))
		defer idc.Destroy()
		if err := idc.Connect(&ConnParam{QPNum: 0x77, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		ev = expect(t, cha, EventRejected)
		if ev.Status != int(RejectInvalidServiceID) || !errors.Is(ev.Err, ErrNoListener) {
			t.Fatalf("no listener: status %d, %v", ev.Status, ev.Err)
		}
	})
}

// TestBackendUD resolves a UD service through IDs of the UDP port space
// (SIDR), with private data both ways, and sends it a datagram with what
// EventEstablished delivered.
func TestBackendUD(t *testing.T) {
	forBackends(t, func(t *testing.T, a, b *host, kernel bool) {
		cha, chb, _, ida := backendIDs(t, a, b, PortSpaceUDP, nil)
		qa := smallQP(t, ida, a)
		defer ida.DestroyQP()
		if qa.Type() != verbs.QPTypeUD || qa.State() != verbs.QPStateRTS {
			t.Fatalf("CreateQP: %v in %v", qa.Type(), qa.State())
		}
		if err := ida.Connect(&ConnParam{PrivateData: []byte("which")}); err != nil {
			t.Fatal(err)
		}
		req := expect(t, chb, EventConnectRequest)
		idb := req.ID
		defer idb.Destroy()
		if !bytes.HasPrefix(req.UD.PrivateData, []byte("which")) {
			t.Fatalf("request's private data %q", req.UD.PrivateData)
		}
		qb := smallQP(t, idb, b)
		defer idb.DestroyQP()
		if err := idb.Accept(&ConnParam{PrivateData: []byte("this one")}); err != nil {
			t.Fatal(err)
		}
		est := expect(t, cha, EventEstablished)
		if est.UD.QPNum != qb.QPN() || est.UD.QKey != UDPQKey || !bytes.HasPrefix(est.UD.PrivateData, []byte("this one")) {
			t.Fatalf("service %+v; want QPN %#x", est.UD, qb.QPN())
		}
		ah, err := a.pd.CreateAH(est.UD.AH)
		if err != nil {
			t.Fatal(err)
		}
		defer ah.Destroy()
		rdmatest.PostRecv(t, qb, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, verbs.GRHSize+64)}})
		copy(a.buf[100:], "datagram")
		rdmatest.PostSend(t, qa, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(100, 8)}, UD: verbs.UDParams{AH: ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}})
		if wc := rdmatest.WaitOne(t, a.cq); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
			t.Fatalf("send: %+v", wc)
		}
		wc := rdmatest.WaitOne(t, b.cq)
		if wc.Status != verbs.WCSuccess || wc.ByteLen != verbs.GRHSize+8 || wc.SrcQP != qa.QPN() ||
			string(b.buf[verbs.GRHSize:verbs.GRHSize+8]) != "datagram" {
			t.Fatalf("receive: %+v", wc)
		}
	})
}

// TestBackendMigrate: a request's ID moved to another channel before
// Accept reports its EventEstablished there; Destroy waits for the
// acknowledgement of an event handed out.
func TestBackendMigrate(t *testing.T) {
	forBackends(t, func(t *testing.T, a, b *host, kernel bool) {
		cha, chb, _, ida := backendIDs(t, a, b, PortSpaceTCP, nil)
		chc := NewEventChannel()
		defer chc.Close()
		smallQP(t, ida, a)
		defer ida.DestroyQP()
		if err := ida.Connect(nil); err != nil {
			t.Fatal(err)
		}
		idb := expect(t, chb, EventConnectRequest).ID
		if err := idb.Migrate(chc); err != nil {
			t.Fatal(err)
		}
		if idb.Channel() != chc {
			t.Fatal("Channel after Migrate")
		}
		if err := chc.Close(); !errors.Is(err, verbs.ErrBusy) {
			t.Errorf("Close of a channel with an ID: %v", err)
		}
		smallQP(t, idb, b)
		if err := idb.Accept(nil); err != nil {
			t.Fatal(err)
		}
		expect(t, cha, EventEstablished)
		ev, err := chc.GetEvent(testkit.Context(t))
		if err != nil || ev.Type != EventEstablished || ev.ID != idb {
			t.Fatalf("on the new channel: %v, %v", ev, err)
		}
		if _, ok := chb.TryGetEvent(); ok {
			t.Error("an event on the old channel")
		}
		destroyed := make(chan struct{})
		go func() {
			_ = idb.DestroyQP()
			_ = idb.Destroy()
			close(destroyed)
		}()
		select {
		case <-destroyed:
			t.Fatal("Destroy returned with an event unacknowledged")
		case <-time.After(50 * time.Millisecond):
		}
		if err := ev.Ack(); err != nil {
			t.Fatal(err)
		}
		<-destroyed
		// The active side learns of the passive side's end.
		expect(t, cha, EventDisconnected)
	})
}
