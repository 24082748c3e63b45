package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The cross tests of the CM run in two processes (rdmatest.CrossRun), one
// side of each connection in each: test/hw/cross.sh runs them between a
// goroce device on the host, whose CM is this package's, and rxe0 in the
// rxe VM, whose CM is the kernel's through librdmacm (the hardware
// backend). The responder listens, the requester dials.

// crossRegion is what the listener tells of its buffer, for the WRITE.
type crossRegion struct {
	Addr string
	IOVA uint64
	RKey uint32
}

// TestCrossCMNet connects the processes with the net-like API (Listen,
// Accept, Dial), private data both ways, then moves a SEND and a WRITE
// and closes from the dialing side.
func TestCrossCMNet(t *testing.T) {
	rdmatest.SkipUnlessCross(t)
	rdmatest.CrossRun(t, func(t *testing.T, x *rdmatest.Cross) {
		e := x.Open(rdmatest.EndOptions{})
		ctx := testkit.Context(t)
		if !x.Requester {
			l, err := Listen(netip.AddrPortFrom(x.Addr(), 0).String())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := PrepareQP(e.QP); err != nil { // INIT: a receive can wait
				t.Fatal(err)
			}
			rdmatest.PostRecv(t, e.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{e.MR.SGE(0, 64)}})
			x.Tell("listening", crossRegion{Addr: l.Addr().String(), IOVA: e.MR.IOVA(), RKey: e.MR.RKey()})
			req, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(req.PrivateData(), []byte("from "+x.Remote)) {
				t.Fatalf("request's private data %q", req.PrivateData())
			}
			c, err := req.Accept(ctx, e.QP, &Params{PrivateData: []byte("from " + x.Local)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wc := rdmatest.WaitOne(t, e.CQ)
			if wc.Status != verbs.WCSuccess || wc.ByteLen != 5 || string(e.Buf[:5]) != "hello" {
				t.Fatalf("receive: %+v %q", wc, e.Buf[:5])
			}
			x.Hear("written", nil)
			if got := string(e.Buf[1000:1005]); got != "world" {
				t.Fatalf("the WRITE left %q", got)
			}
			x.Tell("checked", nil)
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("the peer's disconnect did not end the connection")
			}
			if !errors.Is(c.Err(), ErrDisconnected) {
				t.Errorf("connection ended with %v, want ErrDisconnected", c.Err())
			}
			return
		}
		var r crossRegion
		x.Hear("listening", &r)
		c, err := Dial(ctx, r.Addr, e.QP, &Params{PrivateData: []byte("from " + x.Local)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if !bytes.HasPrefix(c.Remote().PrivateData, []byte("from "+x.Remote)) {
			t.Fatalf("reply's private data %q", c.Remote().PrivateData)
		}
		copy(e.Buf[100:], "hello")
		copy(e.Buf[200:], "world")
		rdmatest.PostSend(t, e.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{e.MR.SGE(100, 5)}})
		rdmatest.PostSend(t, e.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{e.MR.SGE(200, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: r.IOVA + 1000, RKey: r.RKey}})
		for _, wc := range rdmatest.WaitN(t, e.CQ, 2) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		x.Tell("written", nil)
		x.Hear("checked", nil)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCrossCMEvents connects the processes with the event API (IDs on
// event channels, librdmacm's calls), the QPs the IDs', and disconnects
// from the passive side.
func TestCrossCMEvents(t *testing.T) {
	rdmatest.SkipUnlessCross(t)
	rdmatest.CrossRun(t, func(t *testing.T, x *rdmatest.Cross) {
		e := x.Open(rdmatest.EndOptions{})
		ch := NewEventChannel()
		defer ch.Close()
		id, err := ch.CreateID("cross", PortSpaceTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer id.Destroy()
		h := &host{dev: e.Dev, pd: e.PD, cq: e.CQ, buf: e.Buf, mr: e.MR, ip: x.Addr()}
		if !x.Requester {
			if err := id.BindAddr(netip.AddrPortFrom(h.addr(), 0)); err != nil {
				t.Fatal(err)
			}
			if err := id.Listen(0); err != nil {
				t.Fatal(err)
			}
			x.Tell("listening", id.LocalAddr().String())
			req := expect(t, ch, EventConnectRequest)
			child := req.ID
			defer child.Destroy()
			if child.Context() != "cross" || !bytes.HasPrefix(req.Conn.PrivateData, []byte("from "+x.Remote)) {
				t.Fatalf("request: context %v, private data %q", child.Context(), req.Conn.PrivateData)
			}
			if err := child.SetQP(e.QP); err != nil {
				t.Fatal(err)
			}
			defer child.DestroyQP()
			rdmatest.PostRecv(t, e.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{e.MR.SGE(0, 64)}})
			if err := child.Accept(&ConnParam{PrivateData: []byte("from " + x.Local), ResponderResources: 1,
				InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, EventEstablished)
			wc := rdmatest.WaitOne(t, e.CQ)
			if wc.Status != verbs.WCSuccess || string(e.Buf[:5]) != "hello" {
				t.Fatalf("receive: %+v %q", wc, e.Buf[:5])
			}
			if err := child.Disconnect(); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, EventDisconnected)
			return
		}
		var s string
		x.Hear("listening", &s)
		dst, err := netip.ParseAddrPort(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.ResolveAddr(netip.AddrPortFrom(h.addr(), 0), dst, testTimeout); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, EventAddrResolved)
		if id.Device() == nil {
			t.Fatal("no device after ADDR_RESOLVED")
		}
		if err := id.ResolveRoute(testTimeout); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, EventRouteResolved)
		if err := id.SetQP(e.QP); err != nil {
			t.Fatal(err)
		}
		defer id.DestroyQP()
		if err := id.Connect(&ConnParam{PrivateData: []byte("from " + x.Local), ResponderResources: 1, InitiatorDepth: 1,
			RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		est := expect(t, ch, EventEstablished)
		if !bytes.HasPrefix(est.Conn.PrivateData, []byte("from "+x.Remote)) {
			t.Fatalf("reply's private data %q", est.Conn.PrivateData)
		}
		copy(e.Buf[100:], "hello")
		rdmatest.PostSend(t, e.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{e.MR.SGE(100, 5)}})
		if wc := rdmatest.WaitOne(t, e.CQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("SEND: %+v", wc)
		}
		expect(t, ch, EventDisconnected)
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
	})
}
