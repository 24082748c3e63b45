//go:build linux && cgo && goroce_ibverbs

package rdmacm

import (
	"bytes"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// These tests need an IP address of a kernel RDMA device
// (GOROCE_RDMACM_ADDR); test/hw/run.sh runs them in the rxe VM on rxe0's.

func deviceAddr(t *testing.T) netip.Addr {
	s := os.Getenv("GOROCE_RDMACM_ADDR")
	if s == "" {
		t.Skip("no RDMA device address here (set GOROCE_RDMACM_ADDR, or run test/hw/run.sh)")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("GOROCE_RDMACM_ADDR: %v", err)
	}
	return a
}

func channel(t *testing.T) *EventChannel {
	t.Helper()
	c, err := NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func createID(t *testing.T, c *EventChannel) *ID {
	t.Helper()
	id, err := c.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// expect waits for c's next event and fails unless it is want.
func expect(t *testing.T, c *EventChannel, want EventType) Event {
	t.Helper()
	e, err := c.GetEvent(time.Now().Add(testkit.Timeout))
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if e.Type != want {
		t.Fatalf("event %v (status %d), want %v", e.Type, e.Status, want)
	}
	return e
}

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// moveQP moves id's QP to state with what librdmacm computes.
func moveQP(t *testing.T, id *ID, qp *verbs.QP, state verbs.QPState) {
	t.Helper()
	a, mask, err := id.InitQPAttr(state)
	check(t, "InitQPAttr "+state.String(), err)
	check(t, "Modify "+state.String(), qp.Modify(a, mask))
}

// end opens the device an ID resolved to through verbs' hardware backend.
func end(t *testing.T, id *ID) *rdmatest.End {
	t.Helper()
	name := id.DeviceName()
	if name == "" {
		t.Fatal("the ID has no device")
	}
	return rdmatest.NewEnd(t, rdmatest.EndOptions{Open: func(verbs.DeviceConfig) (*verbs.Device, error) {
		return verbs.OpenHardware(name)
	}})
}

// resolve takes a new client ID on c through address and route resolution.
func resolve(t *testing.T, c *EventChannel, dst netip.AddrPort) *ID {
	t.Helper()
	id := createID(t, c)
	check(t, "ResolveAddr", id.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second))
	expect(t, c, EventAddrResolved)
	check(t, "ResolveRoute", id.ResolveRoute(2*time.Second))
	expect(t, c, EventRouteResolved)
	return id
}

func listen(t *testing.T, c *EventChannel, a netip.Addr) (*ID, netip.AddrPort) {
	t.Helper()
	l := createID(t, c)
	check(t, "BindAddr", l.BindAddr(netip.AddrPortFrom(a, 0)))
	check(t, "Listen", l.Listen(8))
	if l.DeviceName() == "" {
		t.Fatalf("%v is not an RDMA device's address", a)
	}
	return l, netip.AddrPortFrom(a, l.LocalPort())
}

// TestConnectSendWriteDisconnect connects two QPs of the device through
// librdmacm, with private data both ways, moves data with SEND and WRITE,
// and disconnects.
func TestConnectSendWriteDisconnect(t *testing.T) {
	a := deviceAddr(t)
	sch, cch := channel(t), channel(t)
	l, dst := listen(t, sch, a)
	defer l.Destroy()

	cid := resolve(t, cch, dst)
	defer cid.Destroy()
	ce := end(t, cid)
	moveQP(t, cid, ce.QP, verbs.QPStateInit)
	rdmatest.PostRecv(t, ce.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{ce.MR.SGE(0, 64)}})
	check(t, "Connect", cid.Connect(&ConnParam{PrivateData: []byte("hello"), QPNum: ce.QP.QPN(),
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))

	req := expect(t, sch, EventConnectRequest)
	if req.Listen != l || req.ID == nil {
		t.Fatalf("request's IDs: listen %p (want %p), id %p", req.Listen, l, req.ID)
	}
	defer req.ID.Destroy()
	if got, want := req.ID.PeerAddr(), cid.LocalAddr(); got != want || got.Addr() != a {
		t.Fatalf("request's peer address %v, the client's %v (device address %v)", got, want, a)
	}
	if !bytes.HasPrefix(req.Param.PrivateData, []byte("hello")) {
		t.Fatalf("request's private data %q", req.Param.PrivateData)
	}
	se := end(t, req.ID)
	moveQP(t, req.ID, se.QP, verbs.QPStateInit)
	rdmatest.PostRecv(t, se.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{se.MR.SGE(0, 64)}})
	moveQP(t, req.ID, se.QP, verbs.QPStateRTR)
	moveQP(t, req.ID, se.QP, verbs.QPStateRTS)
	check(t, "Accept", req.ID.Accept(&ConnParam{PrivateData: []byte("welcome"), QPNum: se.QP.QPN(),
		ResponderResources: req.Param.ResponderResources, InitiatorDepth: req.Param.InitiatorDepth, RNRRetryCount: 7}))

	resp := expect(t, cch, EventConnectResponse)
	if !bytes.HasPrefix(resp.Param.PrivateData, []byte("welcome")) {
		t.Fatalf("response's private data %q", resp.Param.PrivateData)
	}
	moveQP(t, cid, ce.QP, verbs.QPStateRTR)
	moveQP(t, cid, ce.QP, verbs.QPStateRTS)
	check(t, "Establish", cid.Establish())
	expect(t, sch, EventEstablished)

	copy(ce.Buf[100:], "ping")
	rdmatest.PostSend(t, ce.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{ce.MR.SGE(100, 4)}})
	if wc := rdmatest.WaitOne(t, ce.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 3 {
		t.Fatalf("client's SEND: %+v", wc)
	}
	if wc := rdmatest.WaitOne(t, se.CQ); wc.Status != verbs.WCSuccess || wc.ByteLen != 4 || string(se.Buf[:4]) != "ping" {
		t.Fatalf("server's receive: %+v, %q", wc, se.Buf[:4])
	}
	copy(ce.Buf[200:], "written")
	rdmatest.PostSend(t, ce.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{ce.MR.SGE(200, 7)}, RDMA: verbs.RDMAParams{RemoteAddr: se.MR.IOVA() + 300, RKey: se.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, ce.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 4 {
		t.Fatalf("client's WRITE: %+v", wc)
	}
	if got := string(se.Buf[300:307]); got != "written" {
		t.Fatalf("server's buffer after the WRITE: %q", got)
	}

	check(t, "client Disconnect", cid.Disconnect())
	expect(t, sch, EventDisconnected)
	check(t, "server Disconnect", req.ID.Disconnect())
	expect(t, cch, EventDisconnected)
}

// TestReject refuses a request with private data, which the client gets
// with EventRejected.
func TestReject(t *testing.T) {
	a := deviceAddr(t)
	sch, cch := channel(t), channel(t)
	l, dst := listen(t, sch, a)
	defer l.Destroy()
	cid := resolve(t, cch, dst)
	defer cid.Destroy()
	ce := end(t, cid)
	moveQP(t, cid, ce.QP, verbs.QPStateInit)
	check(t, "Connect", cid.Connect(&ConnParam{QPNum: ce.QP.QPN(), RetryCount: 7, RNRRetryCount: 7}))
	req := expect(t, sch, EventConnectRequest)
	check(t, "Reject", req.ID.Reject([]byte("busy")))
	check(t, "Destroy", req.ID.Destroy())
	rej := expect(t, cch, EventRejected)
	if !bytes.HasPrefix(rej.Param.PrivateData, []byte("busy")) {
		t.Fatalf("REJ's private data %q (status %d)", rej.Param.PrivateData, rej.Status)
	}
}
